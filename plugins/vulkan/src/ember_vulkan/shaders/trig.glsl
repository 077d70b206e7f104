// float32 sin, cos and tan to a few ulp over the whole range, on every driver: Vulkan bounds the
// built-ins' error only absolutely (~2^-11 on [-pi, pi]) and lavapipe does not reduce huge
// arguments. |x| is reduced exactly to r in [-pi/4, pi/4] plus a quadrant by Payne-Hanek
// (x times 224 bits of 2/pi in integer arithmetic, 96 bits of fraction kept), then polynomials.

// 2/pi as a 224-bit binary fraction, most significant word first.
const uint TWO_OVER_PI[7] = uint[7](0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u,
                                    0x3c439041u, 0xfe5163abu);

// The 32 bits of the 256-bit product p (least significant word first) from bit `lo` up.
uint product_bits(uint p[8], int lo) {
    int w = lo >> 5, s = lo & 31;
    uint low = w < 8 ? p[w] >> s : 0u;
    uint high = (s != 0 && w + 1 < 8) ? p[w + 1] << (32 - s) : 0u;
    return low | high;
}

// |x| (finite, > pi/4) = (q + r / (pi/2)) * pi/2 with |r| <= pi/4; returns r, q in 0..3.
float reduce_half_pi(float a, out uint q) {
    uint bits = floatBitsToUint(a);
    int e = int(bits >> 23) - 127;              // a = ia * 2^(e - 31), ia with its top bit set
    uint ia = ((bits & 0x7fffffu) | 0x800000u) << 8;
    uint p[8];
    uint carry = 0u;
    for (int k = 0; k < 7; k++) {               // p = ia * 2/pi * 2^224, exactly
        uint hi, lo, c;
        umulExtended(ia, TWO_OVER_PI[6 - k], hi, lo);
        p[k] = uaddCarry(lo, carry, c);
        carry = hi + c;
    }
    p[7] = carry;
    int point = 255 - e;                        // a * 2/pi = p * 2^-point
    q = product_bits(p, point) & 3u;
    uint f2 = product_bits(p, point - 32), f1 = product_bits(p, point - 64), f0 = product_bits(p, point - 96);
    bool negative = f2 >= 0x80000000u;          // fraction >= 1/2: round to the next quadrant
    if (negative) {
        q = (q + 1u) & 3u;
        uint c0, c1;
        f0 = uaddCarry(~f0, 1u, c0);
        f1 = uaddCarry(~f1, c0, c1);
        f2 = ~f2 + c1;
    }
    int scale = -32;                            // the fraction is (f2 f1 f0) * 2^-96
    for (int i = 0; i < 2 && f2 == 0u; i++) {
        f2 = f1;
        f1 = f0;
        f0 = 0u;
        scale -= 32;
    }
    if (f2 == 0u) return 0.0;
    int lead = 31 - findMSB(f2);
    uint top = lead == 0 ? f2 : (f2 << lead) | (f1 >> (32 - lead));
    uint next = lead == 0 ? f1 : (f1 << lead) | (f0 >> (32 - lead));
    // top's 32 bits in two exact floats (24 + 8 bits) plus the next word's top bits, times pi/2.
    precise float hi = float(top & 0xffffff00u), lo = float(top & 0xffu) + float(next >> 8) * 5.9604645e-08;
    precise float r = (hi * PI_2 + (hi * -4.37113883e-08 + lo * PI_2)) * pow2_f(scale) * pow2_f(-lead);
    return negative ? -r : r;
}

// Taylor series on |r| <= pi/4 (truncation below 1e-11 relative).
float sin_poly(float r) {
    float r2 = r * r;
    float poly = -1.66666667e-01 + r2 * (8.33333333e-03 + r2 * (-1.98412698e-04 + r2 * (2.75573192e-06
                 + r2 * (-2.50521084e-08 + r2 * 1.60590438e-10))));
    precise float s = r + r * r2 * poly;
    return s;
}

float cos_poly(float r) {
    float r2 = r * r;
    float poly = 4.16666667e-02 + r2 * (-1.38888889e-03 + r2 * (2.48015873e-05 + r2 * (-2.75573192e-07
                 + r2 * 2.08767570e-09)));
    precise float c = (1.0 - 0.5 * r2) + r2 * r2 * poly;
    return c;
}

// op 0: sin, 1: cos, 2: tan.
float trig_f(float x, int op) {
    float a = abs(x);
    if (isinf(x) || isnan(x)) return NAN_F;
    uint q = 0u;
    float r = a <= 0.785398163 ? a : reduce_half_pi(a, q);
    if (op == 2) {
        float s = sin_poly(r), c = cos_poly(r);
        return copysign_f(1.0, x) * ((q & 1u) == 0u ? s / c : -c / s);
    }
    if (op == 1) q += 1u;  // cos(a) = sin(a + pi/2)
    float v = (q & 1u) == 0u ? sin_poly(r) : cos_poly(r);
    v = (q & 2u) == 0u ? v : -v;
    return op == 1 ? v : copysign_f(1.0, x) * v;
}

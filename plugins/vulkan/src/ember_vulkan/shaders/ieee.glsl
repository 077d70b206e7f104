// IEEE float32 arithmetic that stays correct where a driver's does not: Vulkan bounds OpFDiv only
// for divisors in [2^-126, 2^126] (NVIDIA computes x * (1/y)), and a device that flushes subnormal
// operands turns inf * 4e-45 into NaN. The operands are split into a significand in [1, 2) and an
// exponent with integer operations only, so no subnormal ever reaches a float instruction.

// x = significand * 2^e with |significand| in [1, 2) for finite nonzero x (subnormals included);
// zero, inf and NaN come back unchanged with e = 0.
float split_f(float x, out int e) {
    uint u = floatBitsToUint(x), bits = u & 0x7fffffffu;
    e = 0;
    if (bits == 0u || bits >= 0x7f800000u) return x;
    int biased = int(bits >> 23);
    if (biased == 0) {  // subnormal: bits * 2^-149, normalised by its leading one
        int lead = findMSB(bits);
        e = lead - 149;
        bits <<= 23 - lead;
    } else {
        e = biased - 127;
    }
    return uintBitsToFloat((u & 0x80000000u) | 0x3f800000u | (bits & 0x7fffffu));
}

float pow2_f(int n) { return uintBitsToFloat(uint(n + 127) << 23); }  // n in [-126, 127]

// x * 2^n rounded once: exact steps while the result stays normal, then one multiply that rounds
// into the subnormal range (or to zero) where it must.
float scale_f(float x, int n) {
    int ex = int((floatBitsToUint(x) >> 23) & 0xffu) - 127;
    int exact = max(n, -126 - ex), rest = n - exact;
    for (; exact > 126; exact -= 126) x *= pow2_f(126);  // overflows to inf only where the result does
    for (; exact < -126; exact += 126) x *= pow2_f(-126);
    precise float normal = x * pow2_f(exact);  // kept apart: 2^exact * 2^rest may underflow
    return normal * pow2_f(max(rest, -126));
}

float div_f(float a, float b) {
    int ea, eb;
    float ma = split_f(a, ea), mb = split_f(b, eb);
    return scale_f(ma / mb, ea - eb);  // inf / m, m / 0, 0 / 0 and inf / inf keep their IEEE results
}

float mul_f(float a, float b) {
    int ea, eb;
    float ma = split_f(a, ea), mb = split_f(b, eb);
    return scale_f(ma * mb, ea + eb);
}

// A negative number (subnormal included) read from its bits: a flushing device compares -4e-45 < 0
// as false.
bool negative_f(float x) { return floatBitsToUint(x) > 0x80000000u; }

float sqrt_f(float x) {
    if (negative_f(x)) return x != x ? x : uintBitsToFloat(0x7fc00000u);
    int e;
    float m = split_f(x, e);
    if (e >= -126) return sqrt(x);  // normal, zero, inf or NaN
    if ((e & 1) != 0) {
        m *= 2.0;
        e -= 1;
    }
    return scale_f(sqrt(m), e / 2);
}

// |x| (finite, nonzero, from its bits u) as a 24-bit integer significand m (top bit set, so that
// one subtraction reduces m modulo a smaller one) times 2^e, exactly.
uint significand_bits(uint u, out int e) {
    uint biased = u >> 23;
    if (biased != 0u) {
        e = int(biased) - 150;
        return (u & 0x7fffffu) | 0x800000u;
    }
    int shift = 23 - findMSB(u);  // subnormal: normalise
    e = -149 - shift;
    return u << shift;
}

// C's fmod: a - trunc(a / b) b, exact, by long division of the integer significands.
float fmod_f(float a, float b) {
    uint ua = floatBitsToUint(a) & 0x7fffffffu, ub = floatBitsToUint(b) & 0x7fffffffu;
    if (ua >= 0x7f800000u || ub == 0u || ub > 0x7f800000u) return uintBitsToFloat(0x7fc00000u);
    if (ub == 0x7f800000u || ua < ub) return a;  // |a| < |b| (b infinite included)
    int ea, eb;
    uint ma = significand_bits(ua, ea), mb = significand_bits(ub, eb);
    for (; ea > eb; ea--) {
        if (ma >= mb) ma -= mb;
        ma <<= 1;
    }
    if (ma >= mb) ma -= mb;
    return copysign_f(scale_f(float(ma), eb), a);
}

bool nonzero_f(float x) { return (floatBitsToUint(x) & 0x7fffffffu) != 0u; }

// Python's (and numpy's) modulo: the sign of the divisor.
float remainder_f(float a, float b) {
    float mod = fmod_f(a, b);
    if (!nonzero_f(mod)) return copysign_f(0.0, b);
    return signbit_f(b) != signbit_f(mod) ? mod + b : mod;
}

// numpy's floor_divide: (a - fmod(a, b)) / b, moved down where the remainder takes b's sign, and
// rounded to the nearest integer (the quotient is one up to rounding).
float floor_divide_f(float a, float b) {
    if (!nonzero_f(b)) return div_f(a, b);
    float mod = fmod_f(a, b);
    float quotient = div_f(a - mod, b);
    if (nonzero_f(mod) && signbit_f(b) != signbit_f(mod)) quotient -= 1.0;
    if (!nonzero_f(quotient)) return copysign_f(0.0, div_f(a, b));
    float whole = floor(quotient);
    return quotient - whole > 0.5 ? whole + 1.0 : whole;
}

// Comparisons, abs and negation from the bits, so that a device flushing subnormal operands still
// orders 4e-45 above 0 (for a device without DenormPreserve).
uint order_key(float x) {  // monotonic in x for non-NaN x (with -0 below +0: equal_f handles zeros)
    uint u = floatBitsToUint(x);
    return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}
bool equal_f(float a, float b) {
    return !isnan(a) && !isnan(b) && (floatBitsToUint(a) == floatBitsToUint(b) || !nonzero_f(a) && !nonzero_f(b));
}
bool less_f(float a, float b) {
    return !isnan(a) && !isnan(b) && !equal_f(a, b) && order_key(a) < order_key(b);
}
float abs_f(float x) { return uintBitsToFloat(floatBitsToUint(x) & 0x7fffffffu); }
float negate_f(float x) { return uintBitsToFloat(floatBitsToUint(x) ^ 0x80000000u); }

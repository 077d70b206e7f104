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

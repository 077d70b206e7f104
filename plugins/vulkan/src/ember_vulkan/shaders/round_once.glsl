// double -> float16 with one rounding. Drivers may convert through float32 (rounding twice), so round
// to float32 toward zero with a sticky last bit (round-to-odd): the float32 -> float16 rounding on the
// store then gives what a single rounding of the double would.
float round_to_odd(double d) {
    float f = float(d);
    if (double(f) != d && !isinf(f)) {
        if (abs(double(f)) > abs(d)) f = uintBitsToFloat(floatBitsToUint(f) - 1u);
        f = uintBitsToFloat(floatBitsToUint(f) | 1u);
    }
    return f;
}

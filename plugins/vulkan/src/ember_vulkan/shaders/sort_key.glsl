// sort_key(v): an unsigned key whose order is numpy's order of the values (ember-cpu's sort.c does the
// same): signed integers flip the sign bit; floats flip every bit of negatives and the sign bit of the
// others, -0 keys as +0 (they compare equal, so a stable sort keeps their input order) and every NaN
// as the largest key (last, in input order). Read from the bits: a flushing device keeps subnormals apart.
#if defined(A_IS_FLOAT)
uint64_t sort_key(float v) {
    uint u = floatBitsToUint(v), mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return ~uint64_t(0);
    if (mag == 0u) return uint64_t(0x80000000u);
    return uint64_t((u & 0x80000000u) != 0u ? ~u : u | 0x80000000u);
}
#elif defined(A_DTYPE_INT64)
uint64_t sort_key(int64_t v) { return uint64_t(v) ^ (uint64_t(1) << 63); }
#elif defined(A_IS_INT)
uint64_t sort_key(int v) { return uint64_t(uint(v) ^ 0x80000000u); }
#else
uint64_t sort_key(bool v) { return uint64_t(v ? 1u : 0u); }
#endif

// O_T convert(A_T): the value conversion of astype, between compute types.
#if defined(O_IS_BOOL)
bool convert(A_T v) {
  #if defined(A_IS_BOOL)
    return v;
  #else
    return v != A_T(0);  // NaN != 0: true, as in C
  #endif
}
#elif defined(O_IS_INT)
O_T convert(A_T v) {
  #if defined(A_IS_BOOL)
    return v ? O_T(1) : O_T(0);
  #elif defined(A_IS_INT)
    return O_T(v);  // wraps when narrowing
  #else
    // limit: 2**31 or 2**63, the first value beyond the range, exact in float (INT64_MAX is not:
    // it rounds up to 2**63), so the comparisons come before the conversion, whose result GLSL
    // leaves undefined for NaN and out-of-range values
    #if defined(O_DTYPE_INT32)
    const float limit = 2147483648.0;
    const O_T lo = O_T(0x80000000), hi = O_T(0x7fffffff);
    #else
    const float limit = 9223372036854775808.0;
    const O_T lo = O_T(0x8000000000000000l), hi = O_T(0x7fffffffffffffffl);
    #endif
    if (isnan(v)) return O_T(0);
    if (v >= limit) return hi;
    if (v < -limit) return lo;
    return O_T(v);  // truncates toward zero
  #endif
}
#else
  #if defined(A_DTYPE_FLOAT64) && defined(O_DTYPE_FLOAT16)
  #include "round_once.glsl"
  #endif
O_T convert(A_T v) {
  #if defined(A_IS_BOOL)
    return v ? O_T(1) : O_T(0);
  #elif defined(A_DTYPE_FLOAT64) && defined(O_DTYPE_FLOAT16)
    return round_to_odd(v);  // then rounded once more, to float16, by the store
  #else
    return O_T(v);  // int32 / int64 -> float32 / float64 rounds once; -> float16 is exact or overflows either way
  #endif
}
#endif

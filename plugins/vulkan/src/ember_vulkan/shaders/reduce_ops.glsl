// Accumulator type, identity and combine of the reductions (ROP_*, the specialization constant
// OP), shared by reduce.comp and reduce_serial.comp.
#if defined(O_IS_BOOL) || defined(A_IS_BOOL)
#define ACC_T uint  // any/all and bool max/min: 0 or 1
  #if defined(A_IS_BOOL)
  #define TO_ACC(v) ((v) ? 1u : 0u)
  #else
  #define TO_ACC(v) ((v) != A_T(0) ? 1u : 0u)
  #endif
#elif defined(O_DTYPE_FLOAT64)
#define ACC_T double
#define TO_ACC(v) double(v)
#else
#define ACC_T A_T
#define TO_ACC(v) (v)
#endif

ACC_T identity() {
#if defined(O_IS_BOOL) || defined(A_IS_BOOL)
    return (OP == ROP_ALL || OP == ROP_MIN || OP == ROP_PROD) ? 1u : 0u;
#elif defined(A_IS_FLOAT)
    const float inf = uintBitsToFloat(0x7f800000u);
    return OP == ROP_MAX ? -inf : OP == ROP_MIN ? inf : OP == ROP_PROD ? 1.0 : 0.0;
#elif defined(A_DTYPE_INT32)
    return OP == ROP_MAX ? int(0x80000000) : OP == ROP_MIN ? 0x7fffffff : OP == ROP_PROD ? 1 : 0;
#else
    return OP == ROP_MAX ? int64_t(0x8000000000000000l) : OP == ROP_MIN ? int64_t(0x7fffffffffffffffl)
         : OP == ROP_PROD ? int64_t(1) : int64_t(0);
#endif
}

ACC_T combine(ACC_T a, ACC_T b) {
    switch (OP) {
        case ROP_SUM: return a + b;
        case ROP_PROD: return a * b;
#if defined(A_IS_FLOAT) && !defined(O_IS_BOOL)
        case ROP_MAX: return isnan(a) ? a : isnan(b) ? b : max(a, b);  // NaN propagates
        case ROP_MIN: return isnan(a) ? a : isnan(b) ? b : min(a, b);
#else
        case ROP_MAX: return max(a, b);
        case ROP_MIN: return min(a, b);
#endif
    }
#if defined(O_IS_BOOL) || defined(A_IS_BOOL)
    return OP == ROP_ANY ? (a | b) : (a & b);
#else
    return a;
#endif
}

// The accumulator as the output stores it.
#if defined(O_IS_BOOL)
#define ACC_RESULT(acc) O_STORE((acc) != 0u)
#else
#define ACC_RESULT(acc) O_STORE(O_T(acc))
#endif

// O_T apply(A_T x): the unary op selected by the specialization constant OP.
#if defined(A_IS_FLOAT)
#include "floatmath.glsl"
#endif

#if defined(A_IS_BOOL)
bool apply(bool x) {
    return !x;  // logical_not and bitwise_invert
}
#elif defined(O_IS_BOOL)
bool apply(A_T x) {
  #if defined(A_IS_FLOAT)
    switch (OP) {
        case UOP_ISNAN: return isnan(x);
        case UOP_ISINF: return isinf(x);
        case UOP_ISFINITE: return !isnan(x) && !isinf(x);
        case UOP_SIGNBIT: return signbit_f(x);
    }
    return false;
  #else
    return OP == UOP_ISFINITE;  // integers are finite, never NaN or infinite
  #endif
}
#elif defined(A_IS_INT)
A_T apply(A_T x) {
    switch (OP) {
        case UOP_ABS: return x < A_T(0) ? -x : x;  // abs(MIN) wraps to MIN, as numpy
        case UOP_NEGATIVE: return -x;
        case UOP_SQUARE: return x * x;
        case UOP_SIGN: return A_T(x > A_T(0)) - A_T(x < A_T(0));
        case UOP_BITWISE_INVERT: return ~x;
        case UOP_IMAG: return A_T(0);
    }
    return x;  // positive, conj, real, floor, ceil, trunc, round
}
#else
float apply(float x) {
    switch (OP) {
        case UOP_ABS: return abs_f(x);  // bit operations: subnormals survive a flushing device
        case UOP_NEGATIVE: return negate_f(x);
        case UOP_POSITIVE: case UOP_CONJ: case UOP_REAL: return x;
        case UOP_IMAG: return 0.0;
        case UOP_SQUARE: return x * x;
        case UOP_SIGN: return isnan(x) ? x : (!nonzero_f(x) ? 0.0 : (signbit_f(x) ? -1.0 : 1.0));
        case UOP_FLOOR: return floor(x);
        case UOP_CEIL: return ceil(x);
        case UOP_TRUNC: return trunc(x);
        case UOP_ROUND: return roundEven(x);
        case UOP_SQRT: return sqrt_f(x);
        case UOP_EXP: return exp(x);
        case UOP_EXPM1: return expm1_f(x);
        case UOP_LOG: return log_f(x);
        case UOP_LOG1P: return log1p_f(x);
        case UOP_LOG2: return log_base(x, 1);
        case UOP_LOG10: return log_base(x, 2);
        case UOP_SIN: return trig_f(x, 0);
        case UOP_COS: return trig_f(x, 1);
        case UOP_TAN: return trig_f(x, 2);
        case UOP_ASIN: return asin_f(x);
        case UOP_ACOS: return acos_f(x);
        case UOP_ATAN: return atan_f(x);
        case UOP_SINH: return sinh_f(x);
        case UOP_COSH: return cosh_f(x);
        case UOP_TANH: return tanh_f(x);
        case UOP_ASINH: return asinh_f(x);
        case UOP_ACOSH: return acosh_f(x);
        case UOP_ATANH: return atanh_f(x);
        case UOP_SIGMOID: return sigmoid_f(x);
        case UOP_ERF: return erf_f(x);
        case UOP_ERFC: return erfc_f(x);
        case UOP_RECIPROCAL: return div_f(1.0, x);
    }
    return x;
}
#endif

// O_T apply(A_T a, A_T b): the binary op selected by the specialization constant OP.
#if defined(A_IS_FLOAT)
#include "floatmath.glsl"
#endif

#if defined(A_IS_BOOL)
bool apply(bool a, bool b) {
    switch (OP) {
        case BOP_LOGICAL_AND: case BOP_BITWISE_AND: return a && b;
        case BOP_LOGICAL_OR: case BOP_BITWISE_OR: return a || b;
        case BOP_EQUAL: return a == b;
    }
    return a != b;  // logical_xor, bitwise_xor, not_equal
}
#elif defined(O_IS_BOOL)
bool apply(A_T a, A_T b) {
  #if defined(A_IS_FLOAT)
    switch (OP) {  // from the bits: subnormals compare correctly on a flushing device
        case BOP_EQUAL: return equal_f(a, b);
        case BOP_NOT_EQUAL: return !equal_f(a, b);
        case BOP_LESS: return less_f(a, b);
        case BOP_LESS_EQUAL: return less_f(a, b) || equal_f(a, b);
        case BOP_GREATER: return less_f(b, a);
    }
    return less_f(b, a) || equal_f(a, b);
  #else
    switch (OP) {
        case BOP_EQUAL: return a == b;
        case BOP_NOT_EQUAL: return a != b;  // true when either is NaN
        case BOP_LESS: return a < b;
        case BOP_LESS_EQUAL: return a <= b;
        case BOP_GREATER: return a > b;
    }
    return a >= b;
  #endif
}
#elif defined(A_IS_INT)
  #if defined(A_DTYPE_INT64)
    #define BIT_WIDTH 64
  #else
    #define BIT_WIDTH 32
  #endif
A_T apply(A_T a, A_T b) {
    const A_T zero = A_T(0), minus_one = A_T(-1);
    switch (OP) {
        case BOP_ADD: return a + b;  // wraps
        case BOP_SUBTRACT: return a - b;
        case BOP_MULTIPLY: return a * b;
        case BOP_MAXIMUM: return max(a, b);
        case BOP_MINIMUM: return min(a, b);
        case BOP_BITWISE_AND: return a & b;
        case BOP_BITWISE_OR: return a | b;
        case BOP_BITWISE_XOR: return a ^ b;
        // shift counts outside [0, width) give 0 (left) or the sign (right), as ember-cpu
        case BOP_BITWISE_LEFT_SHIFT: return b >= zero && b < A_T(BIT_WIDTH) ? a << b : zero;
        case BOP_BITWISE_RIGHT_SHIFT: return b >= zero && b < A_T(BIT_WIDTH) ? a >> b : (a < zero ? minus_one : zero);
        case BOP_FLOOR_DIVIDE: {  // x // 0 = 0 and MIN // -1 = MIN (wraps), as ember-cpu
            if (b == zero) return zero;
            if (b == minus_one) return -a;
            A_T q = a / b;  // truncates toward zero
            return (a - q * b != zero && (a < zero) != (b < zero)) ? q - A_T(1) : q;
        }
        case BOP_REMAINDER: {  // the sign of the divisor; x % 0 = 0
            if (b == zero || b == minus_one) return zero;
            A_T r = a - (a / b) * b;
            return (r != zero && (r < zero) != (b < zero)) ? r + b : r;
        }
        case BOP_POW: {  // wraps; a negative exponent gives 1 for base 1, +-1 for base -1, else 0 (as ember-cpu)
            const A_T one = A_T(1);
            if (b < zero) return a == one ? one : (a == minus_one ? ((b & one) != zero ? minus_one : one) : zero);
            A_T r = one, p = a;
            for (A_T e = b; e > zero; e >>= 1) {
                if ((e & one) != zero) r *= p;
                p *= p;
            }
            return r;
        }
    }
    return a;
}
#elif defined(A_DTYPE_FLOAT64)
double apply(double a, double b) {  // add, subtract, multiply: the device's IEEE double arithmetic
    switch (OP) {
        case BOP_ADD: return a + b;
        case BOP_SUBTRACT: return a - b;
    }
    return a * b;
}
#else
float apply(float a, float b) {
    const float nan = uintBitsToFloat(0x7fc00000u);
    switch (OP) {
        case BOP_ADD: return a + b;
        case BOP_SUBTRACT: return a - b;
        case BOP_MULTIPLY: return mul_f(a, b);
        case BOP_DIVIDE: return div_f(a, b);
        case BOP_MAXIMUM: return isnan(a) || isnan(b) ? nan : (less_f(a, b) ? b : a);
        case BOP_MINIMUM: return isnan(a) || isnan(b) ? nan : (less_f(b, a) ? b : a);
        case BOP_COPYSIGN: return copysign_f(a, b);
        case BOP_ATAN2: return atan2_f(a, b);
        case BOP_FLOOR_DIVIDE: return floor_divide_f(a, b);
        case BOP_REMAINDER: return remainder_f(a, b);
        case BOP_HYPOT: {
            if (isinf(a) || isinf(b)) return uintBitsToFloat(0x7f800000u);
            if (isnan(a) || isnan(b)) return nan;
            float hi = max(abs(a), abs(b)), lo = min(abs(a), abs(b));
            if (hi == 0.0) return 0.0;
            float r = lo / hi;
            precise float scaled = hi * sqrt(1.0 + r * r);
            return scaled;
        }
        case BOP_LOGADDEXP: {
            if (isnan(a) || isnan(b)) return nan;
            if (a == b) return a + LN2;  // also both infinite of one sign
            float hi = max(a, b);
            if (isinf(hi)) return hi;
            return hi + log1p_f(exp(-abs(a - b)));
        }
    }
    return a;
}
#endif

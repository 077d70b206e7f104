// out = pow(a, b) for float16 / float32 with C's special cases (what numpy's pow gives): the value is
// exp(b log|a|) in double precision, rounded once to float. GLSL has no double log or exp, so both are
// series here (about one double ulp each: the float result is numpy's but for rare ties). Needs
// shaderFloat64: the host declines pow on a device without it. float16 computes in float32 throughout.
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, params_addr; uint n, run; } pc;

#include "floatmath.glsl"

const double LN2_D = 0.69314718055994530942lf;

// log(a) for finite a > 0, subnormals included (split from the bits): 2 atanh(s), s = (m - 1) / (m + 1).
double log_d(float a) {
    int e;
    double m = double(split_f(a, e));
    if (m > 1.4142135623730951lf) {
        m *= 0.5lf;
        e += 1;
    }
    double s = (m - 1.0lf) / (m + 1.0lf), s2 = s * s, poly = 0.0lf;
    for (int i = 12; i >= 1; i--) poly = poly * s2 + 1.0lf / double(2 * i + 1);
    return double(e) * LN2_D + 2.0lf * s * (1.0lf + s2 * poly);
}

// exp(t) rounded to float: t = k ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series.
float exp_to_float(double t) {
    if (t > 89.0lf) return INF_F;
    if (t < -104.0lf) return 0.0;  // below half the smallest subnormal
    int k = int(round(t / LN2_D));
    double r = t - double(k) * LN2_D, p = 1.0lf;
    for (int i = 17; i >= 1; i--) p = 1.0lf + p * r / double(i);
    return float(ldexp(p, k));
}

// Signs, zeros and integer tests read from the bits: a flushing device sees a subnormal as zero.
float pow_f(float x, float y) {
    if (!nonzero_f(y) || x == 1.0) return 1.0;
    if (isnan(x) || isnan(y)) return NAN_F;
    float ax = abs_f(x);
    if (isinf(y)) return ax == 1.0 ? 1.0 : ((ax > 1.0) == !signbit_f(y) ? INF_F : 0.0);
    bool y_int = abs_f(y) >= 1.0 && floor(y) == y;
    bool odd = y_int && abs_f(y) < 16777216.0 && (int(abs_f(y)) & 1) == 1;
    bool flip = signbit_f(x) && odd;  // a negative base to an odd power
    float r;
    if (!nonzero_f(x) || isinf(x)) r = signbit_f(y) != isinf(x) ? INF_F : 0.0;  // 0^-y, inf^y: inf
    else if (signbit_f(x) && !y_int) return NAN_F;
    else r = exp_to_float(double(y) * log_d(ax));
    return flip ? negate_f(r) : r;
}

#define OPERANDS 3
void element(int at[OPERANDS]) {
    float a = A_LOAD(A_BUF(pc.a_addr).v[at[1]]);
    float b = B_LOAD(B_BUF(pc.b_addr).v[at[2]]);
    O_BUF(pc.out_addr).v[at[0]] = O_STORE(pow_f(a, b));
}

#include "elementwise_walk.glsl"

// Drivers may reassociate float math that is not `precise` ((1 + x) - 1 -> x), which would undo
// the error compensation below: every compensated step is `precise`.
// float32 functions GLSL lacks, or whose GLSL versions drivers may compute to an *absolute*
// error only (Vulkan allows it for log near 1, asin, acos...; lavapipe's asin is off by 1e-4):
// log, atan, asin and acos are computed here to a few ulp, and the rest is built on them and exp.
const float LN2 = 0.693147180559945309;
const float PI_2 = 1.57079632679489662;
#define NAN_F uintBitsToFloat(0x7fc00000u)
#define INF_F uintBitsToFloat(0x7f800000u)
#include "ieee.glsl"

// log(x) = e ln2 + log(m), x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s) with
// s = (m - 1) / (m + 1), written f - s (f - 2 s^2 P) so that f = m - 1 stays exact.
// `base` scales the result: 0 -> natural log, 1 -> log2, 2 -> log10.
float log_base(float x, int base) {
    uint u = floatBitsToUint(x);  // signs from the bits: a flushing device sees -4e-45 as -0
    if (u >= 0x80000000u) return u == 0x80000000u ? -INF_F : NAN_F;
    if (u == 0u || u >= 0x7f800000u) return u == 0u ? -INF_F : x;
    int e;
    float m = split_f(x, e);  // subnormals included
    if (m > 1.41421356) {
        m *= 0.5;
        e += 1;
    }
    precise float f = m - 1.0, s = f / (2.0 + f), s2 = s * s;
    float poly = 0.0;
    for (int i = 7; i >= 1; i--) poly = poly * s2 + 1.0 / float(2 * i + 1);
    precise float log_m = f - s * (f - 2.0 * poly * s2);
    if (base == 1) return float(e) + log_m * 1.44269504088896341;
    if (base == 2) return float(e) * 0.301029995663981195 + log_m * 0.434294481903251828;
    return float(e) * 0.693145752 + (float(e) * 1.42860677e-06 + log_m);  // ln2 split in two parts
}
float log_f(float x) { return log_base(x, 0); }

// atan on [0, 1] reduced to |t| <= tan(pi/8) where the odd series converges quickly.
float atan_f(float x) {
    if (isnan(x)) return x;
    float a = abs(x), base = 0.0;
    bool inverted = a > 1.0;
    if (inverted) a = 1.0 / a;
    if (a > 0.414213562) {
        a = (a - 1.0) / (a + 1.0);
        base = 0.785398163;
    }
    float a2 = a * a, poly = 0.0;
    for (int i = 10; i >= 0; i--) poly = poly * a2 + (i % 2 == 0 ? 1.0 : -1.0) / float(2 * i + 1);
    float r = base + a * poly;
    return copysign_f(inverted ? PI_2 - r : r, x);
}

// atan2 with C's special cases (signed zeros, infinities); the quadrant from the signs.
float atan2_f(float y, float x) {
    if (isnan(x) || isnan(y)) return NAN_F;
    float ay = abs(y), ax = abs(x), r;
    if (isinf(ax) && isinf(ay)) r = 0.785398163;
    else if (isinf(ax) || !nonzero_f(ay)) r = 0.0;
    else if (isinf(ay) || !nonzero_f(ax)) r = PI_2;
    else r = atan_f(div_f(ay, ax));
    if (signbit_f(x)) {
        precise float mirrored = (3.14159274 - r) - 8.74227766e-08;  // pi - r with pi in two parts
        r = mirrored;
    }
    return copysign_f(r, y);
}

// asin of |x| <= 1/2 through atan; beyond, asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)).
float asin_small(float a) {
    precise float c = 1.0 - a * a;
    return atan_f(a / sqrt(c));
}

float asin_f(float x) {
    float a = abs(x);
    if (!(a <= 1.0)) return NAN_F;
    precise float half_gap = 0.5 * (1.0 - a);
    float r = a <= 0.5 ? asin_small(a) : PI_2 - 2.0 * asin_small(sqrt(half_gap));
    return copysign_f(r, x);
}

float acos_f(float x) {
    if (!(abs(x) <= 1.0)) return NAN_F;
    if (abs(x) <= 0.5) return PI_2 - asin_small(x);
    precise float half_gap = 0.5 * (1.0 - abs(x));
    float r = 2.0 * asin_small(sqrt(half_gap));
    return x > 0.0 ? r : 3.14159265358979324 - r;
}

float expm1_f(float x) {
    if (abs(x) < 1e-5) return x + 0.5 * x * x;
    float u = exp(x);
    if (u == 1.0 || isinf(u)) return u == 1.0 ? x : u;
    precise float um1 = u - 1.0;
    if (um1 == -1.0) return -1.0;
    return um1 * x / log_f(u);  // Kahan: the rounding error of u cancels
}

float log1p_f(float x) {
    if (abs(x) >= 16777216.0) return log_f(x);  // 1 + x == x (and u - 1 may be beyond OpFDiv's range)
    precise float u = 1.0 + x;
    if (u == 1.0) return x;
    if (u == INF_F) return u;
    precise float um1 = u - 1.0;
    return log_f(u) * (x / um1);  // Kahan's log1p; NaN below -1 and for -inf
}

float sinh_f(float x) {
    float a = abs(x), r;
    if (a < 1.0) {
        float e = expm1_f(a);
        r = 0.5 * (e + e / (e + 1.0));
    } else if (a < 88.0) {
        float e = exp(a);
        r = 0.5 * (e - 1.0 / e);
    } else {
        float e = exp(0.5 * a);  // e^a / 2 without overflowing early
        r = (0.5 * e) * e;
    }
    return copysign_f(r, x);
}

float cosh_f(float x) {
    float a = abs(x);
    if (a < 88.0) {
        float e = exp(a);
        return 0.5 * (e + 1.0 / e);
    }
    float e = exp(0.5 * a);
    return (0.5 * e) * e;
}

float tanh_f(float x) {
    if (isnan(x)) return x;
    float a = abs(x);
    float r = 1.0;
    if (a < 9.1) {
        float e = expm1_f(2.0 * a);
        r = e / (e + 2.0);
    }
    return copysign_f(r, x);
}

float asinh_f(float x) {
    float a = abs(x);
    float r = a > 1e18 ? log_f(a) + LN2 : log1p_f(a + a * a / (1.0 + sqrt(1.0 + a * a)));
    return copysign_f(r, x);
}

float acosh_f(float x) {
    if (x < 1.0) return NAN_F;
    if (x > 1e18) return log_f(x) + LN2;
    precise float t = x - 1.0;
    return log1p_f(t + sqrt(2.0 * t + t * t));
}

float atanh_f(float x) {
    float a = abs(x);
    if (a > 1.0) return NAN_F;
    precise float gap = 1.0 - a;
    return copysign_f(0.5 * log1p_f(2.0 * a / gap), x);
}

float sigmoid_f(float x) {
    if (x < 0.0) {
        float e = exp(x);  // tiny for very negative x instead of 1 / (1 + inf)
        return e / (1.0 + e);
    }
    return 1.0 / (1.0 + exp(-x));
}

// erf: the Maclaurin series below 1 (relative accuracy near 0), Abramowitz & Stegun 7.1.26
// above (absolute error 1.5e-7 where erf is within 16% of 1).
float erf_f(float x) {
    float a = abs(x);
    if (isnan(x)) return x;
    if (a < 1.0) {
        float x2 = a * a, term = a, sum = a;
        for (int n = 1; n <= 12; n++) {
            term *= -x2 / float(n);
            sum += term / float(2 * n + 1);
        }
        return copysign_f(1.1283791670955126 * sum, x);
    }
    if (a > 4.0) return copysign_f(1.0, x);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return copysign_f(1.0 - poly * exp(-a * a), x);
}

// erfc to a few ulp on [0.6, 10.05] (the float32 range): exp(-x^2) / sqrt(pi) over the continued
// fraction x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))), 128 terms evaluated backwards (truncation
// below 4e-8 relative from 0.6 on), with x^2 split in two exact parts before an accurate exp.
// Below 0.6, 1 - erf(x) is at least 0.39: little cancels.
// exp(y) = returned * 2^k to ~1 ulp (Vulkan bounds the built-in by 3 + 2|y| ulp): y = k ln2 + r with
// ln2 in two parts (k ln2_hi exact for |k| < 256), |r| <= ln2 / 2, Taylor to r^9.
float exp_parts(float y, out int k) {
    float kf = roundEven(y * 1.44269504);
    precise float r = (y - kf * 0.693145752) - kf * 1.42860677e-06;
    float poly = 1.0;
    for (int n = 9; n >= 1; n--) poly = 1.0 + poly * r / float(n);
    k = int(kf);
    return poly;
}

float erfc_tail(float a) {
    float k = 0.0;
    for (int n = 128; n >= 1; n--) k = (0.5 * float(n)) / (a + k);  // k: the fraction's tail
    float hi = uintBitsToFloat(floatBitsToUint(a) & 0xfffff000u);  // 12 bits: hi * hi is exact
    precise float lo_square = (a - hi) * (a + hi);
    int k_hi, k_lo;
    float e_hi = exp_parts(-hi * hi, k_hi), e_lo = exp_parts(-lo_square, k_lo);
    return scale_f(e_hi * e_lo * 0.564189584 / (a + k), k_hi + k_lo);  // one rounding into subnormals
}

float erfc_f(float x) {
    if (isnan(x)) return x;
    if (abs(x) < 0.6) return 1.0 - erf_f(x);
    float tail = abs(x) > 10.1 ? 0.0 : erfc_tail(abs(x));
    return x > 0.0 ? tail : 2.0 - tail;
}

#include "trig.glsl"

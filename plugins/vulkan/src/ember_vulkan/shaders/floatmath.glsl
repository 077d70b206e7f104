// float32 functions GLSL lacks or computes with cancellation (sinh near 0, asinh of large
// negatives...).  Each is built on exp/log, which drivers provide to a few ulp.
const float LN2 = 0.693147180559945309;

float expm1_f(float x) {
    if (abs(x) < 1e-5) return x + 0.5 * x * x;
    float u = exp(x);
    if (u == 1.0 || isinf(u)) return u == 1.0 ? x : u;
    float um1 = u - 1.0;
    if (um1 == -1.0) return -1.0;
    return um1 * x / log(u);  // Kahan: the rounding error of u cancels
}

float log1p_f(float x) {
    float u = 1.0 + x;
    if (u == 1.0 || isinf(u)) return u == 1.0 ? x : u;
    return log(u) * x / (u - 1.0);  // Kahan's log1p
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
    float r = a > 1e18 ? log(a) + LN2 : log1p_f(a + a * a / (1.0 + sqrt(1.0 + a * a)));
    return copysign_f(r, x);
}

float acosh_f(float x) {
    if (x < 1.0) return uintBitsToFloat(0x7fc00000u);
    if (x > 1e18) return log(x) + LN2;
    float t = x - 1.0;
    return log1p_f(t + sqrt(2.0 * t + t * t));
}

float atanh_f(float x) {
    float a = abs(x);
    return copysign_f(0.5 * log1p_f(2.0 * a / (1.0 - a)), x);
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

// Normal floats by Box-Muller in double precision: elements 2k and 2k + 1 use block k, u1 from
// (w0, w1) and u2 from (w2, w3) with 53 bits each; r = sqrt(-2 log(1 - u1)), t = 2 pi u2;
// values mean + (std r) cos t and mean + (std r) sin t, rounded once to the output dtype.
// GLSL has no double log / sin / cos, so they are computed here to about one double ulp, which
// makes the rounded float32 / float16 results equal to the C library's.  Needs shaderFloat64.
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, offset; double mean, std; uint n, k0, k1; } pc;

#include "philox.glsl"

#if defined(O_DTYPE_FLOAT16)
#include "round_once.glsl"
#define ROUND_ONCE(v) float16_t(round_to_odd(v))
#else
#define ROUND_ONCE(v) float(v)
#endif

const double LN2_HI = 6.93147180369123816490e-01lf, LN2_LO = 1.90821492927058770002e-10lf;
const double PIO2_HI = 1.57079632679489655800e+00lf, PIO2_LO = 6.12323399573676603587e-17lf;

// log(x) for 0 < x <= 1: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1).
double log_d(double x) {
    int e;
    double m = frexp(x, e);
    if (m < 0.70710678118654752440lf) {
        m *= 2.0lf;
        e -= 1;
    }
    precise double f = m - 1.0lf;
    precise double s = f / (2.0lf + f), s2 = s * s;
    double poly = 0.0lf;
    for (int k = 12; k >= 1; k--) poly = poly * s2 + 1.0lf / double(2 * k + 1);
    precise double log_m = f - s * (f - 2.0lf * poly * s2);  // = 2s + 2s^3 poly, arranged to keep f exact
    precise double result = double(e) * LN2_HI + (double(e) * LN2_LO + log_m);
    return result;
}

// sin and cos of t in [0, 2 pi): t = k pi/2 + r with |r| <= pi/4, Taylor series of r.
void sincos_d(double t, out double s, out double c) {
    double k = roundEven(t * 0.63661977236758134308lf);
    precise double r = fma(-k, PIO2_HI, t);
    r = fma(-k, PIO2_LO, r);
    precise double r2 = r * r;
    double sp = 0.0lf, cp = 0.0lf, sf = 1.0lf, cf = 1.0lf;
    // coefficients (-1)^i / (2i+1)! and (-1)^i / (2i)!, summed from the smallest term up
    double sin_terms[10], cos_terms[10];
    for (int i = 0; i < 10; i++) {
        sin_terms[i] = sf;
        cos_terms[i] = cf;
        sf = -sf / double((2 * i + 2) * (2 * i + 3));
        cf = -cf / double((2 * i + 1) * (2 * i + 2));
    }
    for (int i = 9; i >= 1; i--) {
        sp = sp * r2 + sin_terms[i];
        cp = cp * r2 + cos_terms[i];
    }
    precise double sr = r + r * (r2 * sp), cr = 1.0lf + r2 * cp;
    int q = int(k) & 3;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

double unit(uint hi, uint lo) {
    precise double u = (double(hi >> 5) * 67108864.0lf + double(lo >> 6)) / 9007199254740992.0lf;
    return u;
}

void main() {
    uint blocks = (pc.n + 1u) / 2u;
    for (uint j = gl_GlobalInvocationID.x; j < blocks; j += gl_NumWorkGroups.x * WG) {
        uvec4 w = philox_block(pc.offset, uint64_t(j), pc.k0, pc.k1);
        double u1 = unit(w.x, w.y), u2 = unit(w.z, w.w);
        precise double r = sqrt(-2.0lf * log_d(1.0lf - u1));
        precise double scaled = pc.std * r;
        double s, c;
        sincos_d(6.283185307179586lf * u2, s, c);
        precise double first = pc.mean + scaled * c;
        precise double second = pc.mean + scaled * s;
        O_BUF(pc.out_addr).v[2u * j] = ROUND_ONCE(first);
        if (2u * j + 1u < pc.n) O_BUF(pc.out_addr).v[2u * j + 1u] = ROUND_ONCE(second);
    }
}

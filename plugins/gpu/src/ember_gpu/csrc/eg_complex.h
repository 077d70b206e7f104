/*
 * eg_complex.h -- complex64 / complex128 as (re, im) structs with __host__ __device__ arithmetic
 * and the functions the elementwise ops need, following ember-cpu (glibc) and C99 Annex G:
 *   - a + b, a - b, -a: per part;  a * b: the textbook product with one fma per part and a / b:
 *     libgcc's algorithms, both as ember-cpu computes them (to the bit);
 *   - exp, log, sqrt, sinh, cosh, tanh, asinh, acosh, atanh and (through them: sin z =
 *     -i sinh(iz), ...) sin, cos, tan, asin, atan; acos by its own formula: every Annex G special
 *     value (infinities, NaN, signed zeros); finite arguments by Kahan's formulas ("Branch cuts for
 *     complex elementary functions", 1987), which keep the signs of zeros on the branch cuts.
 * complex64 functions compute in double and round once: float results within half an ulp of the
 * double ones, without float-specific overflow handling.
 */
#ifndef EG_COMPLEX_H
#define EG_COMPLEX_H

struct EG_ALIGN(8) eg_c64 { float re, im; };
struct EG_ALIGN(16) eg_c128 { double re, im; };

static EG_HD EG_INLINE eg_c64 eg_cmplx(float re, float im) { eg_c64 z = {re, im}; return z; }
static EG_HD EG_INLINE eg_c128 eg_cmplx(double re, double im) { eg_c128 z = {re, im}; return z; }
static EG_HD EG_INLINE float eg_creal(eg_c64 z) { return z.re; }
static EG_HD EG_INLINE double eg_creal(eg_c128 z) { return z.re; }
static EG_HD EG_INLINE float eg_cimag(eg_c64 z) { return z.im; }
static EG_HD EG_INLINE double eg_cimag(eg_c128 z) { return z.im; }
static EG_HD EG_INLINE eg_c128 eg_widen(eg_c64 z) { return eg_cmplx((double)z.re, (double)z.im); }
static EG_HD EG_INLINE eg_c64 eg_narrow(eg_c128 z) { return eg_cmplx((float)z.re, (float)z.im); }

/* a * b: the textbook product with one fused multiply-add per part, as ember-cpu computes it (gcc
 * contracts ar * br - ai * bi into fma(ar, br, -(ai * bi)) on every machine with FMA, and numpy's
 * SIMD loops do the same), so the bits agree; the fma also keeps a part finite where one of its
 * products alone would overflow. */
#define EG_COMPLEX_ARITHMETIC(C, f)                                                                  \
    static EG_HD EG_INLINE C operator+(C a, C b) { return eg_cmplx(a.re + b.re, a.im + b.im); }     \
    static EG_HD EG_INLINE C operator-(C a, C b) { return eg_cmplx(a.re - b.re, a.im - b.im); }     \
    static EG_HD EG_INLINE C operator-(C a) { return eg_cmplx(-a.re, -a.im); }                      \
    static EG_HD EG_INLINE C operator*(C a, C b)                                                    \
    {                                                                                               \
        return eg_cmplx(fma##f(a.re, b.re, -(a.im * b.im)), fma##f(a.re, b.im, a.im * b.re));        \
    }                                                                                               \
    static EG_HD EG_INLINE bool operator==(C a, C b) { return a.re == b.re && a.im == b.im; }       \
    static EG_HD EG_INLINE bool operator!=(C a, C b) { return !(a == b); }                          \
    static EG_HD EG_INLINE C eg_conj(C z) { return eg_cmplx(z.re, -z.im); }
EG_COMPLEX_ARITHMETIC(eg_c64, f)
EG_COMPLEX_ARITHMETIC(eg_c128, )
#undef EG_COMPLEX_ARITHMETIC

/* a / b as ember-cpu divides: C's operator, that is libgcc's __divsc3 / __divdc3 (GCC 12 and
 * later), so the bits agree, NaN and infinity placement included.  The quotient is computed as
 * (x, y); where both came out NaN, Annex G's infinities and zeros are recovered from the
 * operands: nonzero / 0, infinite / finite, finite / infinite. */
template <class R>
static EG_HD EG_INLINE void eg_div_recover(R a, R b, R c, R d, R &x, R &y)
{
    if (!(eg_isnan(x) && eg_isnan(y))) return;
    const R inf = (R)EG_INF, zero = 0, one = 1;
    if (c == 0 && d == 0 && (!eg_isnan(a) || !eg_isnan(b))) {
        x = copysign(inf, c) * a;
        y = copysign(inf, c) * b;
    } else if ((eg_isinf(a) || eg_isinf(b)) && eg_isfinite(c) && eg_isfinite(d)) {
        a = copysign(eg_isinf(a) ? one : zero, a);
        b = copysign(eg_isinf(b) ? one : zero, b);
        x = inf * (a * c + b * d);
        y = inf * (b * c - a * d);
    } else if ((eg_isinf(c) || eg_isinf(d)) && eg_isfinite(a) && eg_isfinite(b)) {
        c = copysign(eg_isinf(c) ? one : zero, c);
        d = copysign(eg_isinf(d) ? one : zero, d);
        x = zero * (a * c + b * d);
        y = zero * (b * c - a * d);
    }
}

/* complex128: Smith's method as McGehearty improved it ("Improved complex division", the
 * algorithm of GCC 12's __divdc3): the operands are scaled down by 2 when the denominator nears
 * the largest double, up by 2**52 when it (or, with it, the numerator) is tiny, and a subnormal
 * ratio takes the other order of operations. */
#define EG_DIV_BIG 0x1.fffffffffffffp+1022    /* DBL_MAX / 2 */
#define EG_DIV_MAX2 0x1.fffffffffffffp+970    /* EG_DIV_BIG * DBL_EPSILON */
#define EG_DIV_MIN 0x1p-1022                  /* DBL_MIN */
#define EG_DIV_EPS 0x1p-52                    /* DBL_EPSILON */
static EG_HD EG_INLINE eg_c128 operator/(eg_c128 n, eg_c128 q)
{
    double a = n.re, b = n.im, c = q.re, d = q.im;
    const bool turn = fabs(c) < fabs(d);   /* false for NaN, as the comparisons below */
    const double larger = turn ? fabs(d) : fabs(c);
    double scale = 1;
    if (larger >= EG_DIV_BIG) scale = 0.5;
    else if (larger < EG_DIV_EPS || (larger < EG_DIV_MAX2 && ((fabs(a) < EG_DIV_MIN && fabs(b) < EG_DIV_MAX2) ||
                                                              (fabs(b) < EG_DIV_MIN && fabs(a) < EG_DIV_MAX2))))
        scale = 1 / EG_DIV_EPS;
    a *= scale; b *= scale; c *= scale; d *= scale;
    /* the larger part of the denominator as its real part: n / q = (-i n) / (-i q), exactly */
    const double p = turn ? b : a, s = turn ? -a : b, r = turn ? d : c, t = turn ? -c : d;
    const double ratio = t / r, denom = t * ratio + r;
    double x, y;
    if (fabs(ratio) > EG_DIV_MIN) {
        x = (s * ratio + p) / denom;
        y = (s - p * ratio) / denom;
    } else {
        x = (p + t * (s / r)) / denom;
        y = (s - t * (p / r)) / denom;
    }
    eg_div_recover(a, b, c, d, x, y);
    return eg_cmplx(x, y);
}
#undef EG_DIV_BIG
#undef EG_DIV_MAX2
#undef EG_DIV_MIN
#undef EG_DIV_EPS

/* complex64: the plain formula in double (__divsc3 where the hardware has doubles), rounded to
 * float, the recovery in float. */
static EG_HD EG_INLINE eg_c64 operator/(eg_c64 n, eg_c64 q)
{
    const double a = n.re, b = n.im, c = q.re, d = q.im, denom = c * c + d * d;
    float x = (float)((a * c + b * d) / denom), y = (float)((b * c - a * d) / denom);
    eg_div_recover(n.re, n.im, q.re, q.im, x, y);
    return eg_cmplx(x, y);
}

/* a * b as C's operator multiplies without contraction (glibc's cpow, libgcc's __mulsc3 /
 * __muldc3): the textbook product, and where both parts come out NaN the infinities Annex G asks
 * for. */
template <class C>
static EG_HD EG_INLINE C eg_cmul_annex_g(C u, C v)
{
    typedef decltype(u.re) R;
    const R zero = 0, one = 1, inf = (R)EG_INF;
    R a = u.re, b = u.im, c = v.re, d = v.im;
    const R ac = a * c, bd = b * d, ad = a * d, bc = b * c;
    R x = ac - bd, y = ad + bc;
    if (eg_isnan(x) && eg_isnan(y)) {
        bool recalc = false;
        if (eg_isinf(a) || eg_isinf(b)) {   /* box the infinity, NaNs of the other factor to 0 */
            a = copysign(eg_isinf(a) ? one : zero, a);
            b = copysign(eg_isinf(b) ? one : zero, b);
            if (eg_isnan(c)) c = copysign(zero, c);
            if (eg_isnan(d)) d = copysign(zero, d);
            recalc = true;
        }
        if (eg_isinf(c) || eg_isinf(d)) {
            c = copysign(eg_isinf(c) ? one : zero, c);
            d = copysign(eg_isinf(d) ? one : zero, d);
            if (eg_isnan(a)) a = copysign(zero, a);
            if (eg_isnan(b)) b = copysign(zero, b);
            recalc = true;
        }
        if (!recalc && (eg_isinf(ac) || eg_isinf(bd) || eg_isinf(ad) || eg_isinf(bc))) {   /* overflow */
            if (eg_isnan(a)) a = copysign(zero, a);
            if (eg_isnan(b)) b = copysign(zero, b);
            if (eg_isnan(c)) c = copysign(zero, c);
            if (eg_isnan(d)) d = copysign(zero, d);
            recalc = true;
        }
        if (recalc) {
            x = inf * (a * c - b * d);
            y = inf * (a * d + b * c);
        }
    }
    return eg_cmplx(x, y);
}

/* a * b as C's operator compiles in ember-cpu's reductions and scans: gcc expands the product
 * and contracts it into fma(ar, br, -(ai * bi)) + i fma(ai, br, ar * bi) (the other product of
 * the imaginary part than the textbook code's), calling __mulsc3 / __muldc3 where both parts are
 * NaN. */
template <class C>
static EG_HD EG_INLINE C eg_cmul_c(C u, C v)
{
    const C r = eg_cmplx(fma(u.re, v.re, -(u.im * v.im)), fma(u.im, v.re, u.re * v.im));
    return eg_isnan(r.re) && eg_isnan(r.im) ? eg_cmul_annex_g(u, v) : r;
}

/* ---- exp, log, sqrt ------------------------------------------------------------------------------ */

#define EG_LN2 0.6931471805599453
#define EG_PI 3.141592653589793
#define EG_PI_2 1.5707963267948966
#define EG_PI_4 0.7853981633974483

/* e**x * (c, s) without overflowing where the product is finite (x up to ~1420); c and s carry
 * any exact scale (sinh and cosh pass halves). */
static EG_HD EG_INLINE eg_c128 eg_exp_cis(double x, double c, double s)
{
    if (x > 709.0) {
        double h = exp(x * 0.5);
        return eg_cmplx(c * h * h, s * h * h);
    }
    double e = exp(x);
    return eg_cmplx(e * c, e * s);
}

static EG_HD EG_NOINLINE eg_c128 eg_cexp(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (y == 0) return eg_cmplx(exp(x), y);                      /* NaN + i0 too */
    if (!eg_isfinite(y)) {
        if (x == EG_INF) return eg_cmplx(x, y - y);              /* +inf + iNaN */
        if (x == -EG_INF) return eg_cmplx(0.0, copysign(0.0, y));
        return eg_cmplx(EG_NAN, EG_NAN);
    }
    if (eg_isnan(x)) return eg_cmplx(x, x);
    return eg_exp_cis(x, cos(y), sin(y));
}

/* log |z| for finite z, accurate near |z| = 1 (where it is small): x*x + y*y - 1 in double-double. */
static EG_HD EG_INLINE double eg_log_abs(double x, double y)
{
    double ax = fabs(x), ay = fabs(y);
    if (ax < ay) { double t = ax; ax = ay; ay = t; }
    if (ax > 1e300) return log(hypot(ax * 0.25, ay * 0.25)) + 2 * EG_LN2;
    if (ax >= 0.5 && ax <= 2.0 && ay < 1.0) {
        double px = ax * ax, ex = fma(ax, ax, -px), py = ay * ay, ey = fma(ay, ay, -py);
        double a = px - 1.0, s = a + py;                         /* px - 1 is exact here */
        double bv = s - a, err = (a - (s - bv)) + (py - bv);     /* two-sum */
        return 0.5 * log1p(s + (err + ex + ey));
    }
    return log(hypot(ax, ay));
}

static EG_HD EG_NOINLINE eg_c128 eg_clog(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (eg_isinf(x) || eg_isinf(y)) return eg_cmplx(EG_INF, atan2(y, x));
    if (eg_isnan(x) || eg_isnan(y)) return eg_cmplx(EG_NAN, EG_NAN);
    return eg_cmplx(eg_log_abs(x, y), atan2(y, x));
}

static EG_HD EG_NOINLINE eg_c128 eg_csqrt(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (x == 0 && y == 0) return eg_cmplx(0.0, y);
    if (eg_isinf(y)) return eg_cmplx(EG_INF, y);
    if (eg_isnan(x)) return eg_cmplx(x, x);
    if (eg_isinf(x)) {
        if (x > 0) return eg_cmplx(x, eg_isnan(y) ? y : copysign(0.0, y));
        return eg_cmplx(eg_isnan(y) ? y : 0.0, copysign(EG_INF, y));
    }
    if (eg_isnan(y)) return eg_cmplx(y, y);
    /* scale so that |x| + |z| neither overflows nor loses subnormal bits; powers of 4 scale the
     * root exactly */
    double scale = 1.0;
    if (fabs(x) > 0x1p1020 || fabs(y) > 0x1p1020) {
        x *= 0x1p-4; y *= 0x1p-4; scale = 0x1p2;
    } else if (fabs(x) < 0x1p-1000 && fabs(y) < 0x1p-1000) {
        x *= 0x1p600; y *= 0x1p600; scale = 0x1p-300;
    }
    double t = sqrt((fabs(x) + hypot(x, y)) * 0.5);
    if (x >= 0) return eg_cmplx(t * scale, y / (2 * t) * scale);
    return eg_cmplx(fabs(y) / (2 * t) * scale, copysign(t, y) * scale);
}

/* ---- hyperbolic functions (and through them the circular ones) -------------------------------------- */

static EG_HD EG_NOINLINE eg_c128 eg_csinh(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (y == 0) return eg_cmplx(sinh(x), y);
    if (!eg_isfinite(y)) {
        if (x == 0) return eg_cmplx(x, y - y);                   /* +-0 + iNaN */
        if (eg_isinf(x)) return eg_cmplx(EG_INF, y - y);         /* +inf + iNaN (the sign is glibc's) */
        return eg_cmplx(EG_NAN, EG_NAN);
    }
    if (eg_isnan(x)) return eg_cmplx(x, x);
    double c = cos(y), s = sin(y);
    if (fabs(x) > 20.0) {   /* sinh and cosh agree to double precision: e**|x| / 2 */
        eg_c128 r = eg_exp_cis(fabs(x), c * 0.5, s * 0.5);
        return eg_cmplx(copysign(1.0, x) * r.re, r.im);
    }
    return eg_cmplx(sinh(x) * c, cosh(x) * s);
}

static EG_HD EG_NOINLINE eg_c128 eg_ccosh(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (y == 0) return eg_cmplx(cosh(x), eg_isnan(x) ? y : y * copysign(1.0, x));
    if (!eg_isfinite(y)) {
        if (x == 0) return eg_cmplx(y - y, x);                   /* NaN +- i0 */
        if (eg_isinf(x)) return eg_cmplx(EG_INF, y - y);         /* +inf + iNaN */
        return eg_cmplx(EG_NAN, EG_NAN);
    }
    if (eg_isnan(x)) return eg_cmplx(x, x);
    double c = cos(y), s = sin(y);
    if (fabs(x) > 20.0) {
        eg_c128 r = eg_exp_cis(fabs(x), c * 0.5, s * 0.5);
        return eg_cmplx(r.re, copysign(1.0, x) * r.im);
    }
    return eg_cmplx(cosh(x) * c, sinh(x) * s);
}

static EG_HD EG_NOINLINE eg_c128 eg_ctanh(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (eg_isinf(x)) {   /* 1 +- i0, the zero with the sign of sin(2y) */
        double im = eg_isfinite(y) ? copysign(0.0, sin(y) * cos(y)) : copysign(0.0, y);
        return eg_cmplx(copysign(1.0, x), im);
    }
    if (eg_isnan(x)) return eg_cmplx(x, y == 0 ? y : x);
    if (!eg_isfinite(y)) return eg_cmplx(x == 0 ? x : y - y, y - y);
    if (fabs(x) > 22.0) {   /* tanh x is +-1 to double precision */
        double e = exp(-2.0 * fabs(x));
        return eg_cmplx(copysign(1.0, x), 4.0 * sin(y) * cos(y) * e);
    }
    double t = tan(y), b = 1.0 + t * t, s = sinh(x), r = sqrt(1.0 + s * s), d = 1.0 + b * s * s;
    return eg_cmplx(b * r * s / d, t / d);
}

/* 1 - z, 1 + z, z - 1, z + 1 with a REAL 1: the imaginary part is -y or y, never 0 - y (Kahan's
 * formulas rely on it: 0 - (+0) would lose the sign of a zero on the branch cuts). */
static EG_HD EG_INLINE eg_c128 eg_one_minus(eg_c128 z) { return eg_cmplx(1.0 - z.re, -z.im); }
static EG_HD EG_INLINE eg_c128 eg_one_plus(eg_c128 z) { return eg_cmplx(1.0 + z.re, z.im); }
static EG_HD EG_INLINE eg_c128 eg_minus_one(eg_c128 z) { return eg_cmplx(z.re - 1.0, z.im); }

/* f(z) = -i g(iz) (sin from sinh, tan from tanh, asin from asinh, atan from atanh) */
static EG_HD EG_INLINE eg_c128 eg_times_i(eg_c128 z) { return eg_cmplx(-z.im, z.re); }
static EG_HD EG_INLINE eg_c128 eg_times_minus_i(eg_c128 z) { return eg_cmplx(z.im, -z.re); }

static EG_HD EG_INLINE eg_c128 eg_csin(eg_c128 z)
{
    if (eg_isinf(z.im) && !eg_isfinite(z.re)) return eg_cmplx(z.re - z.re, EG_INF);   /* glibc's sign */
    return eg_times_minus_i(eg_csinh(eg_times_i(z)));
}
static EG_HD EG_INLINE eg_c128 eg_ccos(eg_c128 z) { return eg_ccosh(eg_times_i(z)); }
static EG_HD EG_INLINE eg_c128 eg_ctan(eg_c128 z) { return eg_times_minus_i(eg_ctanh(eg_times_i(z))); }

/* ---- inverse functions -------------------------------------------------------------------------------- */

/* asinh for z with finite parts: Kahan's asin(w) = atan(re w / re(sqrt(1-w) sqrt(1+w)))
 *   + i asinh(im(conj(sqrt(1-w)) sqrt(1+w))), w = iz, rotated back. */
static EG_HD EG_INLINE eg_c128 eg_casinh_finite(eg_c128 z)
{
    eg_c128 w = eg_times_i(z), s1 = eg_csqrt(eg_one_minus(w)), s2 = eg_csqrt(eg_one_plus(w));
    double re = atan(w.re / (s1.re * s2.re - s1.im * s2.im));
    double im = asinh(s1.re * s2.im - s1.im * s2.re);
    return eg_times_minus_i(eg_cmplx(re, im));
}

static EG_HD EG_NOINLINE eg_c128 eg_casinh(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (eg_isinf(x) || eg_isinf(y)) {
        if (eg_isnan(x)) return eg_cmplx(copysign(EG_INF, x), x);   /* NaN + i inf: glibc's sign */
        if (eg_isnan(y)) return eg_cmplx(x, y);                  /* +-inf + iNaN */
        double im = eg_isinf(x) ? (eg_isinf(y) ? EG_PI_4 : 0.0) : EG_PI_2;
        return eg_cmplx(copysign(EG_INF, x), copysign(im, y));
    }
    if (eg_isnan(x)) return eg_cmplx(x, y == 0 ? y : x);
    if (eg_isnan(y)) return eg_cmplx(y, y);
    return eg_casinh_finite(z);
}

static EG_HD EG_NOINLINE eg_c128 eg_cacos(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (eg_isinf(x) || eg_isinf(y)) {
        if (eg_isnan(x)) return eg_cmplx(x, -y);                 /* NaN -+ i inf */
        if (eg_isnan(y)) return eg_cmplx(y, -copysign(EG_INF, y));   /* NaN -+ i inf: glibc's sign */
        double re = eg_isinf(y) ? (eg_isinf(x) ? (x > 0 ? EG_PI_4 : 3 * EG_PI_4) : EG_PI_2)
                                : (x > 0 ? 0.0 : EG_PI);
        return eg_cmplx(re, -copysign(EG_INF, y));
    }
    if (eg_isnan(x)) return eg_cmplx(x, x);
    if (eg_isnan(y)) return eg_cmplx(x == 0 ? EG_PI_2 : y, y);
    /* Kahan: 2 atan(re sqrt(1-z) / re sqrt(1+z)) + i asinh(im(conj(sqrt(1+z)) sqrt(1-z))) */
    eg_c128 s1 = eg_csqrt(eg_one_minus(z)), s2 = eg_csqrt(eg_one_plus(z));
    return eg_cmplx(2 * atan(s1.re / s2.re), asinh(s2.re * s1.im - s2.im * s1.re));
}

static EG_HD EG_NOINLINE eg_c128 eg_cacosh(eg_c128 z)
{
    double x = z.re, y = z.im;
    if (eg_isinf(x) || eg_isinf(y)) {
        if (eg_isnan(x) || eg_isnan(y)) return eg_cmplx(EG_INF, EG_NAN);
        double im = eg_isinf(y) ? (eg_isinf(x) ? (x > 0 ? EG_PI_4 : 3 * EG_PI_4) : EG_PI_2)
                                : (x > 0 ? 0.0 : EG_PI);
        return eg_cmplx(EG_INF, copysign(im, y));
    }
    if (eg_isnan(x)) return eg_cmplx(x, x);
    if (eg_isnan(y)) return eg_cmplx(y, x == 0 ? EG_PI_2 : y);   /* +-0 + iNaN: NaN + i pi/2, glibc's */
    /* Kahan: asinh(re(conj(sqrt(z-1)) sqrt(z+1))) + 2i atan(im sqrt(z-1) / re sqrt(z+1)) */
    eg_c128 s1 = eg_csqrt(eg_minus_one(z)), s2 = eg_csqrt(eg_one_plus(z));
    return eg_cmplx(asinh(s1.re * s2.re + s1.im * s2.im), 2 * atan(s1.im / s2.re));
}

static EG_HD EG_NOINLINE eg_c128 eg_catanh(eg_c128 z)
{
    double x = z.re, y = z.im, ax = fabs(x), ay = fabs(y), re, im;
    if (eg_isinf(x) || eg_isinf(y)) {
        if (eg_isnan(x)) return eg_cmplx(copysign(0.0, x), copysign(EG_PI_2, y));
        if (eg_isnan(y)) return eg_cmplx(copysign(0.0, x), y);
        return eg_cmplx(copysign(0.0, x), copysign(EG_PI_2, y));
    }
    if (eg_isnan(x)) return eg_cmplx(x, x);
    if (eg_isnan(y)) return eg_cmplx(x == 0 ? x : y, y);
    if (ax > 1e150 || ay > 1e150) {   /* atanh z ~ 1/z: re x / |z|**2, im +-pi/2 */
        re = ax >= ay ? 1.0 / (ax + ay * (ay / ax)) : (ax / ay) / (ay + ax * (ax / ay));
        im = EG_PI_2;
    } else {
        double d = (1.0 - ax) * (1.0 - ax) + ay * ay;
        if (d == 0) re = ay == 0 ? EG_INF : (EG_LN2 - log(ay)) * 0.5;   /* |1 - z| underflowed */
        else re = 0.25 * log1p(4.0 * ax / d);
        im = 0.5 * atan2(2.0 * ay, (1.0 - ax) * (1.0 + ax) - ay * ay);
    }
    return eg_cmplx(copysign(re, x), copysign(im, y));
}

static EG_HD EG_INLINE eg_c128 eg_casin(eg_c128 z) { return eg_times_minus_i(eg_casinh(eg_times_i(z))); }
static EG_HD EG_INLINE eg_c128 eg_catan(eg_c128 z) { return eg_times_minus_i(eg_catanh(eg_times_i(z))); }

/* a ** b = exp(b log a), as glibc's cpow (the op table special-cases 0 and small integer powers) */
static EG_HD EG_INLINE eg_c128 eg_cpow(eg_c128 a, eg_c128 b) { return eg_cexp(eg_cmul_annex_g(b, eg_clog(a))); }

/* complex64: through complex128, rounded once */
#define EG_COMPLEX64_VIA_128(name)                                                                   \
    static EG_HD EG_INLINE eg_c64 name(eg_c64 z) { return eg_narrow(name(eg_widen(z))); }
EG_COMPLEX64_VIA_128(eg_cexp)
EG_COMPLEX64_VIA_128(eg_clog)
EG_COMPLEX64_VIA_128(eg_csqrt)
EG_COMPLEX64_VIA_128(eg_csinh)
EG_COMPLEX64_VIA_128(eg_ccosh)
EG_COMPLEX64_VIA_128(eg_ctanh)
EG_COMPLEX64_VIA_128(eg_csin)
EG_COMPLEX64_VIA_128(eg_ccos)
EG_COMPLEX64_VIA_128(eg_ctan)
EG_COMPLEX64_VIA_128(eg_casinh)
EG_COMPLEX64_VIA_128(eg_cacos)
EG_COMPLEX64_VIA_128(eg_cacosh)
EG_COMPLEX64_VIA_128(eg_catanh)
EG_COMPLEX64_VIA_128(eg_casin)
EG_COMPLEX64_VIA_128(eg_catan)
#undef EG_COMPLEX64_VIA_128
static EG_HD EG_INLINE eg_c64 eg_cpow(eg_c64 a, eg_c64 b) { return eg_narrow(eg_cpow(eg_widen(a), eg_widen(b))); }

#endif /* EG_COMPLEX_H */

/*
 * eg_half.h -- float16 and bfloat16 as 16-bit storage types (their bits); kernels compute in
 * float32 and round once on the way out.  Every conversion rounds to nearest even, as ember-cpu's
 * (F16C / _Float16) do:
 *   - CUDA: the hardware conversion instructions (cvt.rn.f16.f32, cvt.rn.f16.f64, cvt.rn.bf16.f32
 *     on sm_80+, cvt.rn.bf16.f64 on sm_90+), through inline PTX: no cuda_fp16.h needed;
 *   - host and HIP: exact integer implementations (the host ones are what CI tests bit for bit;
 *     the hardware instructions implement the same IEEE rounding).
 * NaN stays NaN (its payload may differ between the paths: never compare NaN bits).
 * double -> bfloat16 rounds once: round to odd into float32, then to nearest even (a float32
 * with 24 bits holds the 8 bits of bfloat16 plus enough to make the second rounding exact).
 */
#ifndef EG_HALF_H
#define EG_HALF_H

struct EG_ALIGN(2) eg_f16 { eg_u16 bits; };
struct EG_ALIGN(2) eg_bf16 { eg_u16 bits; };

/* ---- the exact integer implementations (host, HIP) --------------------------------------------- */

static EG_HD EG_INLINE float eg_f16_to_f32_soft(eg_u16 h)
{
    eg_u32 sign = (eg_u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return eg_f32_from_bits(sign | 0x7f800000u | (mant << 13));   /* inf, NaN */
    if (exp != 0) return eg_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
    float m = (float)mant * 5.9604644775390625e-08f;                               /* 2**-24 */
    return sign ? -m : m;
}

/* A magnitude m * 2**e2 (m's leading 1 at bit hb: a normal float or double's mantissa), known to
 * lie in (2**-25, 65520), rounded to nearest even binary16 bits. */
static EG_HD EG_INLINE eg_u16 eg_round_to_f16(eg_u64 m, int e2, int hb)
{
    int e = e2 + hb;                                       /* the value's binary exponent */
    int shift = (e < -14 ? -24 : e - 10) - e2;             /* in 13 .. 53: to the step of the result */
    eg_u64 q = m >> shift, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    /* subnormal: q steps of 2**-24; normal: (biased exponent - 1) << 10 plus q in [2**10, 2**11],
     * so a carry to 2**11 moves into the exponent */
    return (eg_u16)(e < -14 ? q : ((eg_u64)(e + 14) << 10) + q);
}

static EG_HD EG_INLINE eg_u16 eg_f32_to_f16_soft(float f)
{
    eg_u32 x = eg_f32_bits(f), a = x & 0x7fffffffu;
    eg_u16 sign = (eg_u16)((x >> 16) & 0x8000u);
    if (a > 0x7f800000u) return (eg_u16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));   /* quiet NaN */
    if (a >= 0x477ff000u) return (eg_u16)(sign | 0x7c00u);                           /* >= 65520 */
    if (a <= 0x33000000u) return sign;                                               /* <= 2**-25 */
    eg_u32 e = a >> 23;
    return (eg_u16)(sign | eg_round_to_f16((a & 0x7fffffu) | 0x800000u, (int)e - 150, 23));
}

static EG_HD EG_INLINE eg_u16 eg_f64_to_f16_soft(double d)
{
    eg_u64 x = eg_f64_bits(d), a = x & 0x7fffffffffffffffull;
    eg_u16 sign = (eg_u16)((x >> 48) & 0x8000u);
    if (a > 0x7ff0000000000000ull) return (eg_u16)(sign | 0x7e00u | ((a >> 42) & 0x3ffu));
    if (a >= 0x40effe0000000000ull) return (eg_u16)(sign | 0x7c00u);                 /* >= 65520 */
    if (a <= 0x3e60000000000000ull) return sign;                                     /* <= 2**-25 */
    eg_u64 e = a >> 52;
    return (eg_u16)(sign | eg_round_to_f16((a & 0xfffffffffffffull) | 0x10000000000000ull, (int)e - 1075, 52));
}

static EG_HD EG_INLINE float eg_bf16_to_f32(eg_u16 h) { return eg_f32_from_bits((eg_u32)h << 16); }

static EG_HD EG_INLINE eg_u16 eg_f32_to_bf16_soft(float f)
{
    eg_u32 x = eg_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (eg_u16)((x >> 16) | 0x40u);   /* quiet NaN */
    return (eg_u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* double -> float rounded to odd: the nearest float toward zero, its last bit set if inexact. */
static EG_HD EG_INLINE float eg_f64_to_f32_odd(double d)
{
    float f = (float)d;
    if (eg_isfinite(f) && (double)f != d) {
        eg_u32 bits = eg_f32_bits(f);
        if (!(bits & 1u)) bits += fabs((double)f) > fabs(d) ? 0xffffffffu : 1u;
        f = eg_f32_from_bits(bits);
    }
    return f;
}

/* ---- the conversions kernels call -------------------------------------------------------------- */

#if defined(__CUDA_ARCH__)
static __device__ EG_INLINE float eg_f16_to_f32(eg_u16 h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
static __device__ EG_INLINE eg_u16 eg_f32_to_f16(float f)
{
    eg_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
static __device__ EG_INLINE eg_u16 eg_f64_to_f16(double d)
{
    eg_u16 h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
    return h;
}
static __device__ EG_INLINE eg_u16 eg_f32_to_bf16(float f)
{
#if __CUDA_ARCH__ >= 800
    eg_u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return eg_f32_to_bf16_soft(f);
#endif
}
static __device__ EG_INLINE eg_u16 eg_f64_to_bf16(double d)
{
#if __CUDA_ARCH__ >= 900
    eg_u16 h;
    asm("cvt.rn.bf16.f64 %0, %1;" : "=h"(h) : "d"(d));
    return h;
#else
    return eg_f32_to_bf16(eg_f64_to_f32_odd(d));
#endif
}
#else
static EG_HD EG_INLINE float eg_f16_to_f32(eg_u16 h) { return eg_f16_to_f32_soft(h); }
static EG_HD EG_INLINE eg_u16 eg_f32_to_f16(float f) { return eg_f32_to_f16_soft(f); }
static EG_HD EG_INLINE eg_u16 eg_f64_to_f16(double d) { return eg_f64_to_f16_soft(d); }
static EG_HD EG_INLINE eg_u16 eg_f32_to_bf16(float f) { return eg_f32_to_bf16_soft(f); }
static EG_HD EG_INLINE eg_u16 eg_f64_to_bf16(double d) { return eg_f32_to_bf16_soft(eg_f64_to_f32_odd(d)); }
#endif

#endif /* EG_HALF_H */

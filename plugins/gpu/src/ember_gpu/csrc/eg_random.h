/*
 * eg_random.h -- the random ops on ember's Philox4x32-10 stream, bit for bit the stream that
 * plugins/cpu/src/ember_cpu/csrc/random.c specifies (its header is the contract: key from the
 * seed, block j's counter = offset + j as a 128-bit number, the element-to-word mapping of each
 * kind).  One thread computes one Philox block and writes the elements that block serves, so
 * every element is a pure function of (seed, offset, i) whatever the grid.  The build compiles
 * without floating-point contraction, as the contract requires (a + (b - a) * u rounds twice).
 */
#ifndef EG_RANDOM_H
#define EG_RANDOM_H

#define EG_PHILOX_M0 0xD2511F53u
#define EG_PHILOX_M1 0xCD9E8D57u
#define EG_PHILOX_W0 0x9E3779B9u
#define EG_PHILOX_W1 0xBB67AE85u

/* block j of the stream keyed by seed, starting at offset: its four output words */
static EG_HD EG_INLINE void eg_philox_block(eg_u64 seed, eg_u64 offset, eg_u64 j, eg_u32 w[4])
{
    eg_u64 low = offset + j;
    eg_u32 c0 = (eg_u32)low, c1 = (eg_u32)(low >> 32), c2 = low < offset ? 1u : 0u, c3 = 0;
    eg_u32 k0 = (eg_u32)seed, k1 = (eg_u32)(seed >> 32);
EG_UNROLL
    for (int round = 0; round < 10; round++) {
        eg_u64 p0 = (eg_u64)EG_PHILOX_M0 * c0, p1 = (eg_u64)EG_PHILOX_M1 * c2;
        eg_u32 n0 = (eg_u32)(p1 >> 32) ^ c1 ^ k0, n2 = (eg_u32)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (eg_u32)p1;
        c2 = n2;
        c3 = (eg_u32)p0;
        k0 += EG_PHILOX_W0;
        k1 += EG_PHILOX_W1;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* the 53-bit uniform double in [0, 1) from two words */
static EG_HD EG_INLINE double eg_u53(eg_u32 x, eg_u32 y)
{
    return ((double)(x >> 5) * 67108864.0 + (double)(y >> 6)) / 9007199254740992.0;
}

/* float32 -> T (float16, bfloat16, float32), one rounding */
template <class T> static EG_HD EG_INLINE T eg_from_f32(float v)
{
    if constexpr (eg_same<T, eg_f16>::value) return eg_f16{eg_f32_to_f16(v)};
    else if constexpr (eg_same<T, eg_bf16>::value) return eg_bf16{eg_f32_to_bf16(v)};
    else return v;
}

/* a normal draw (double) -> T as the contract rounds it: once, except bfloat16 (through float32) */
template <class T> static EG_HD EG_INLINE T eg_normal_round(double v)
{
    if constexpr (eg_same<T, eg_f16>::value) return eg_f16{eg_f64_to_f16(v)};
    else if constexpr (eg_same<T, eg_bf16>::value) return eg_bf16{eg_f32_to_bf16((float)v)};
    else return (T)v;
}

/* Element makers: P elements per Philox block; element k (< P) of a block from its words. */

template <class T, int BITS> struct eg_uniform_narrow {   /* float16 / bfloat16 / float32 */
    enum { P = 4 };
    float lo, span;
    EG_HD eg_uniform_narrow(const eg_random_args &a) : lo((float)a.a), span((float)a.b - (float)a.a) {}
    EG_HD EG_INLINE T operator()(const eg_u32 w[4], int k) const
    {
        float u = (float)(w[k] >> (32 - BITS)) * (1.0f / (float)(1u << BITS));
        return eg_from_f32<T>(lo + span * u);
    }
};

struct eg_uniform_f64 {
    enum { P = 2 };
    double lo, span;
    EG_HD eg_uniform_f64(const eg_random_args &a) : lo(a.a), span(a.b - a.a) {}
    EG_HD EG_INLINE double operator()(const eg_u32 w[4], int k) const { return lo + span * eg_u53(w[2 * k], w[2 * k + 1]); }
};

template <class T> struct eg_normal {   /* Box-Muller in double: cos for element 2j, sin for 2j + 1 */
    enum { P = 2 };
    double mean, std;
    EG_HD eg_normal(const eg_random_args &a) : mean(a.a), std(a.b) {}
    EG_HD EG_INLINE T operator()(const eg_u32 w[4], int k) const
    {
        double r = sqrt(-2.0 * log(1.0 - eg_u53(w[0], w[1]))), t = 6.283185307179586 * eg_u53(w[2], w[3]);
        double sr = std * r;
        return eg_normal_round<T>(mean + sr * (k == 0 ? cos(t) : sin(t)));
    }
};

template <class T> struct eg_integers {   /* T: the unsigned type of the dtype's width */
    enum { P = 2 };
    eg_u64 low, range;
    EG_HD eg_integers(const eg_random_args &a) : low((eg_u64)a.ilow), range((eg_u64)a.ihigh - (eg_u64)a.ilow) {}
    EG_HD EG_INLINE T operator()(const eg_u32 w[4], int k) const
    {
        eg_u64 v = (eg_u64)w[2 * k] << 32 | w[2 * k + 1];
        return (T)(low + v % range);
    }
};

template <class Make, class T, class I>
static __device__ EG_INLINE void eg_random(const eg_random_args a)
{
    const Make make(a);
    constexpr int P = Make::P;
    T *EG_RESTRICT out = (T *)a.out;
    const I n = (I)a.n, blocks = n / P + (n % P != 0);
    const I first = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x, step = (I)gridDim.x * (I)blockDim.x;
    for (I j = first; j < blocks; j += step) {
        eg_u32 w[4];
        eg_philox_block(a.seed, a.offset, j, w);
EG_UNROLL
        for (int k = 0; k < P; k++) {
            const I i = j * P + k;
            if (i < n) out[i] = make(w, k);
        }
    }
}

#define EG_RANDOM_KERNELS(name, Make, T)                                                             \
    EG_KERNEL(name##_flat32, eg_random_args) { eg_random<Make, T, eg_u32>(args); }                   \
    EG_KERNEL(name##_flat64, eg_random_args) { eg_random<Make, T, eg_u64>(args); }

#endif /* EG_RANDOM_H */

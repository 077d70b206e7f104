/*
 * Random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11; the Random123 reference).  THIS STREAM IS A CROSS-BACKEND CONTRACT: every backend
 * must produce these exact bits, so change nothing here without changing all of them (and
 * ember_core/random.py, which advances the stream).
 *
 * Generator
 *   key = (k0, k1) = (seed & 0xffffffff, seed >> 32).
 *   Block j of a draw starting at `offset` encrypts the 128-bit counter value offset + j, as
 *   four 32-bit words, least significant first: c0 = low 32 bits, c1 = next 32, c2 = the carry
 *   out of the 64-bit sum (0 until offset + j reaches 2^64), c3 = 0.
 *   One round: (hi0, lo0) = 0xD2511F53 * c0, (hi1, lo1) = 0xCD9E8D57 * c2 (32x32 -> 64 bits);
 *              (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0).
 *   Ten rounds; between rounds k0 += 0x9E3779B9, k1 += 0xBB67AE85 (mod 2^32).  The block's
 *   output words are w0..w3 = the final c0..c3.
 *   Known answer: counter (0,0,0,0), key (0,0) -> 0x6627e8d5 0xe169c58d 0xbc57ac4c 0x9b00dbd8.
 *
 * Element i of out (out is contiguous, i in C order):
 *   UNIFORM float16 / bfloat16 / float32, p = 11 / 8 / 24:
 *     w = word i % 4 of block i / 4;  u = (w >> (32 - p)) * 2^-p, in [0, 1);
 *     value = fl32(fl32(a) + fl32(fl32(fl32(b) - fl32(a)) * u))  -- float32 arithmetic, each
 *     operation rounded separately (no fused multiply-add), then rounded to nearest even
 *     float16 / bfloat16.                          The draw consumes ceil(n / 4) blocks.
 *   UNIFORM float64:
 *     (x, y) = words (2*(i%2), 2*(i%2)+1) of block i / 2;
 *     u = ((x >> 5) * 67108864.0 + (y >> 6)) / 9007199254740992.0   (53 bits, exact);
 *     value = a + (b - a) * u in double, no fused multiply-add.   Consumes ceil(n / 2) blocks.
 *   NORMAL (float16, bfloat16, float32, float64), a = mean, b = std:
 *     elements 2k and 2k+1 use block k: u1 from (w0, w1), u2 from (w2, w3), as u above;
 *     r = sqrt(-2 * log(1 - u1)), t = 6.283185307179586 * u2   (double, no fused ops);
 *     element 2k = a + (b * r) * cos(t), element 2k+1 = a + (b * r) * sin(t), in double,
 *     then rounded once to float32 / float16; bfloat16 rounds to float32 and then to bfloat16.
 *     (log/sin/cos are the C library's: backends agree to within their last-bit accuracy.)
 *                                                                 Consumes ceil(n / 2) blocks.
 *   INTEGERS (int8..int64, uint8; bool with [0, 2)), range [ilow, ihigh), ihigh > ilow:
 *     (x, y) = words (2*(i%2), 2*(i%2)+1) of block i / 2;  v = (uint64)x << 32 | y;
 *     value = ilow + (int64)(v % (uint64)(ihigh - ilow)).          Consumes ceil(n / 2) blocks.
 *
 * Every element is a pure function of (seed, offset, i), so threads split the element range
 * freely and the output does not depend on the thread count.
 */

/* The contract forbids fused multiply-adds (numpy and the other backends round each operation);
 * -march=native would otherwise let the compiler contract a + (b - a) * u. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <omp.h>

#include "common.h"
#include "ember_cpu.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define TWO_PI 6.283185307179586

/* Blocks generated per call of philox_chunk; the fills below work chunk by chunk. */
#define CHUNK_BLOCKS 64

typedef struct {
    uint32_t k0, k1;
    uint64_t offset;
    /* the kind's parameters, in the precisions the contract computes them in */
    float lo32, span32;
    double lo64, span64, mean, std;
    uint64_t ilow, range;
} draw;

/* The reference: one block, counter (c[0], c[1], c[2], c[3]) -> output words in place. */
static inline void philox_block(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
        uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = (uint32_t)p1;
        c[2] = n2;
        c[3] = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
}

/* The counter of block j of the draw: offset + j as a 128-bit number, least significant word
 * first (j < 2^63, so the carry into word 2 is 0 or 1). */
static inline void block_counter(const draw *d, uint64_t j, uint32_t c[4]) {
    uint64_t low = d->offset + j;
    c[0] = (uint32_t)low;
    c[1] = (uint32_t)(low >> 32);
    c[2] = low < d->offset;
    c[3] = 0;
}

#ifdef __AVX512F__
#include <immintrin.h>

/* (hi, lo) = m * x for 16 lanes of 32 bits: vpmuludq multiplies the even lanes, a shift brings
 * the odd lanes down, and blends put the halves back in place. */
static inline void mulhilo16(__m512i x, __m512i m, __m512i *hi, __m512i *lo) {
    __m512i even = _mm512_mul_epu32(x, m);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

/* Counters of blocks first .. first + 15 as four 16-lane words. */
static inline void counters16(const draw *d, uint64_t first, __m512i c[4]) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512i offset = _mm512_set1_epi64((long long)d->offset);
    __m512i lo8 = _mm512_add_epi64(_mm512_set1_epi64((long long)(d->offset + first)),
                                   _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    __m512i hi8 = _mm512_add_epi64(lo8, _mm512_set1_epi64(8));
    __mmask16 carry = (__mmask16)(_mm512_cmplt_epu64_mask(lo8, offset) |
                                  (unsigned)_mm512_cmplt_epu64_mask(hi8, offset) << 8);
    c[0] = _mm512_permutex2var_epi32(lo8, even, hi8);
    c[1] = _mm512_permutex2var_epi32(lo8, odd, hi8);
    c[2] = _mm512_maskz_set1_epi32(carry, 1);
    c[3] = _mm512_setzero_si512();
}

/* Stores 16 blocks held as four word vectors in block order (w0..w3 of block 0, then 1, ...):
 * a 4 x 16 transpose. */
static inline void store16(const __m512i c[4], uint32_t *words) {
    __m512i t0 = _mm512_unpacklo_epi32(c[0], c[1]), t1 = _mm512_unpackhi_epi32(c[0], c[1]);
    __m512i t2 = _mm512_unpacklo_epi32(c[2], c[3]), t3 = _mm512_unpackhi_epi32(c[2], c[3]);
    /* each 128-bit lane q of u_r now holds block 4q + r */
    __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
    __m512i v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    _mm512_storeu_si512(words, _mm512_shuffle_i32x4(v0, v1, 0x88));
    _mm512_storeu_si512(words + 16, _mm512_shuffle_i32x4(v0, v1, 0xDD));
    _mm512_storeu_si512(words + 32, _mm512_shuffle_i32x4(v2, v3, 0x88));
    _mm512_storeu_si512(words + 48, _mm512_shuffle_i32x4(v2, v3, 0xDD));
}

/* philox_block for CHUNK_BLOCKS blocks at once: four independent groups of 16 lanes, so the
 * multiplier latency of one group hides behind the others. */
static void philox_chunk(const draw *d, uint64_t first, uint32_t *restrict words) {
    enum { GROUPS = CHUNK_BLOCKS / 16 };
    __m512i c[GROUPS][4];
    for (int g = 0; g < GROUPS; g++) counters16(d, first + 16 * (uint64_t)g, c[g]);
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
    uint32_t k0 = d->k0, k1 = d->k1;
    for (int round = 0; round < 10; round++) {
        __m512i key0 = _mm512_set1_epi32((int)k0), key1 = _mm512_set1_epi32((int)k1);
        for (int g = 0; g < GROUPS; g++) {
            __m512i hi0, lo0, hi1, lo1;
            mulhilo16(c[g][0], m0, &hi0, &lo0);
            mulhilo16(c[g][2], m1, &hi1, &lo1);
            c[g][0] = _mm512_ternarylogic_epi32(hi1, c[g][1], key0, 0x96);   /* a ^ b ^ c */
            c[g][1] = lo1;
            c[g][2] = _mm512_ternarylogic_epi32(hi0, c[g][3], key1, 0x96);
            c[g][3] = lo0;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    for (int g = 0; g < GROUPS; g++) store16(c[g], words + 64 * g);
}

#else

/* Words of blocks first .. first + CHUNK_BLOCKS - 1: block l's w0..w3 at words[4l .. 4l+3]. */
static void philox_chunk(const draw *d, uint64_t first, uint32_t *restrict words) {
    for (int l = 0; l < CHUNK_BLOCKS; l++) {
        block_counter(d, first + (uint64_t)l, words + 4 * l);
        philox_block(words + 4 * l, d->k0, d->k1);
    }
}

#endif

/* The 53-bit uniform double in [0, 1) from two words. */
static inline double u53(uint32_t x, uint32_t y) {
    return ((double)(x >> 5) * 67108864.0 + (double)(y >> 6)) / 9007199254740992.0;
}

static inline float f32_of_double(double v) { return (float)v; }
static inline ember_f16 f16_of_double(double v) { return ember_f16_bits((_Float16)v); }  /* one rounding */
static inline ember_bf16 bf16_of_double(double v) { return ember_f32_to_bf16((float)v); }
static inline float same_f32(float v) { return v; }
static inline double same_f64(double v) { return v; }

/*
 * Each fill writes elements [e0, e1) of out, e0 a multiple of PER_BLOCK * CHUNK_BLOCKS, one
 * chunk of blocks at a time.  EMIT(o, w, n, d, ...) writes the chunk's first n elements o[0..n)
 * from the chunk's words w; the fill's own arguments to EMIT follow.  NAME##_per_block states
 * PER_BLOCK for the drivers.
 */
#define DEFINE_FILL(NAME, T, PER_BLOCK, EMIT, ...)                                                \
    enum { NAME##_per_block = PER_BLOCK };                                                        \
    static void NAME(const draw *d, void *out_, int64_t e0, int64_t e1) {                         \
        const int64_t chunk = (PER_BLOCK) * CHUNK_BLOCKS;                                         \
        T *out = (T *)out_;                                                                       \
        uint32_t w[4 * CHUNK_BLOCKS];                                                             \
        for (int64_t e = e0; e < e1; e += chunk) {                                                \
            philox_chunk(d, (uint64_t)(e / (PER_BLOCK)), w);                                      \
            EMIT(out + e, w, ember_min64(e1 - e, chunk), d, ##__VA_ARGS__);                       \
        }                                                                                         \
    }

/* UNIFORM with a p-bit mantissa: one element per word, float32 arithmetic. */
#define EMIT_UNIFORM_P(o, w, n, d, P, STORE)                                                      \
    do {                                                                                          \
        const float scale = 1.0f / (float)(1u << (P));                                            \
        for (int64_t i = 0; i < (n); i++) {                                                       \
            float u = (float)((w)[i] >> (32 - (P))) * scale;                                      \
            (o)[i] = STORE((d)->lo32 + (d)->span32 * u);                                          \
        }                                                                                         \
    } while (0)

/* UNIFORM float64: one element per word pair. */
#define EMIT_UNIFORM_F64(o, w, n, d)                                                              \
    do {                                                                                          \
        for (int64_t i = 0; i < (n); i++)                                                         \
            (o)[i] = (d)->lo64 + (d)->span64 * u53((w)[2 * i], (w)[2 * i + 1]);                   \
    } while (0)

/* NORMAL: Box-Muller, two elements (cos, sin) per block. */
#define EMIT_NORMAL(o, w, n, d, STORE)                                                            \
    do {                                                                                          \
        for (int64_t i = 0; i < (n); i += 2) {                                                    \
            const uint32_t *b = (w) + 2 * i;                                                      \
            double r = sqrt(-2.0 * log(1.0 - u53(b[0], b[1])));                                   \
            double t = TWO_PI * u53(b[2], b[3]);                                                  \
            double sr = (d)->std * r;                                                             \
            (o)[i] = STORE((d)->mean + sr * cos(t));                                              \
            if (i + 1 < (n)) (o)[i + 1] = STORE((d)->mean + sr * sin(t));                         \
        }                                                                                         \
    } while (0)

/* INTEGERS: one element per word pair; a power-of-two range masks instead of dividing
 * (the same result, without a 64-bit division per element). */
#define EMIT_INTEGERS(o, w, n, d, T)                                                              \
    do {                                                                                          \
        uint64_t range = (d)->range, mask = range - 1;                                            \
        int pow2 = (range & mask) == 0;                                                           \
        for (int64_t i = 0; i < (n); i++) {                                                       \
            uint64_t v = (uint64_t)(w)[2 * i] << 32 | (w)[2 * i + 1];                             \
            (o)[i] = (T)((d)->ilow + (pow2 ? v & mask : v % range));                              \
        }                                                                                         \
    } while (0)

/* X(name, storage, elements per block, emit, emit's arguments).  Integers are written through
 * the unsigned type of their width: two's complement wraps ilow + r (which lies in the dtype's
 * range) to the right bits. */
#define FILLS(X)                                                                                  \
    X(uniform_f16, ember_f16, 4, EMIT_UNIFORM_P, 11, ember_f32_to_f16)                            \
    X(uniform_bf16, ember_bf16, 4, EMIT_UNIFORM_P, 8, ember_f32_to_bf16)                          \
    X(uniform_f32, float, 4, EMIT_UNIFORM_P, 24, same_f32)                                        \
    X(uniform_f64, double, 2, EMIT_UNIFORM_F64)                                                   \
    X(normal_f16, ember_f16, 2, EMIT_NORMAL, f16_of_double)                                       \
    X(normal_bf16, ember_bf16, 2, EMIT_NORMAL, bf16_of_double)                                    \
    X(normal_f32, float, 2, EMIT_NORMAL, f32_of_double)                                           \
    X(normal_f64, double, 2, EMIT_NORMAL, same_f64)                                               \
    X(integers_8, uint8_t, 2, EMIT_INTEGERS, uint8_t)                                             \
    X(integers_16, uint16_t, 2, EMIT_INTEGERS, uint16_t)                                          \
    X(integers_32, uint32_t, 2, EMIT_INTEGERS, uint32_t)                                          \
    X(integers_64, uint64_t, 2, EMIT_INTEGERS, uint64_t)
FILLS(DEFINE_FILL)

typedef void (*fill_fn)(const draw *d, void *out, int64_t e0, int64_t e1);

/* The fill for (kind, dtype) and its elements per block; NULL when the pair is unsupported. */
static fill_fn fill_for(int kind, int dtype, int *per_block) {
#define FILL(name) (*per_block = name##_per_block, name)
    if (kind == EMBER_CPU_RANDOM_UNIFORM) {
        switch (dtype) {
        case EMBER_FLOAT16: return FILL(uniform_f16);
        case EMBER_BFLOAT16: return FILL(uniform_bf16);
        case EMBER_FLOAT32: return FILL(uniform_f32);
        case EMBER_FLOAT64: return FILL(uniform_f64);
        default: return NULL;
        }
    }
    if (kind == EMBER_CPU_RANDOM_NORMAL) {
        switch (dtype) {
        case EMBER_FLOAT16: return FILL(normal_f16);
        case EMBER_BFLOAT16: return FILL(normal_bf16);
        case EMBER_FLOAT32: return FILL(normal_f32);
        case EMBER_FLOAT64: return FILL(normal_f64);
        default: return NULL;
        }
    }
    if (kind == EMBER_CPU_RANDOM_INTEGERS) {
        switch (dtype) {
        case EMBER_BOOL: case EMBER_INT8: case EMBER_UINT8: return FILL(integers_8);
        case EMBER_INT16: return FILL(integers_16);
        case EMBER_INT32: return FILL(integers_32);
        case EMBER_INT64: return FILL(integers_64);
        default: return NULL;
        }
    }
    return NULL;
#undef FILL
}

static void init_draw(draw *d, uint64_t seed, uint64_t offset, double a, double b, int64_t ilow,
                      int64_t ihigh) {
    d->k0 = (uint32_t)seed;
    d->k1 = (uint32_t)(seed >> 32);
    d->offset = offset;
    d->lo32 = (float)a;
    d->span32 = (float)b - (float)a;   /* rounded to float32 first, then subtracted in float32 */
    d->lo64 = a;
    d->span64 = b - a;
    d->mean = a;
    d->std = b;
    d->ilow = (uint64_t)ilow;
    d->range = (uint64_t)ihigh - (uint64_t)ilow;
}

int ember_cpu_random(int kind, const ember_tensor *out, uint64_t seed, uint64_t offset, double a,
                     double b, int64_t ilow, int64_t ihigh) {
    if (ember_check_desc(out) || kind < EMBER_CPU_RANDOM_UNIFORM || kind > EMBER_CPU_RANDOM_INTEGERS)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (kind == EMBER_CPU_RANDOM_INTEGERS && ihigh <= ilow) return EMBER_ERR_INVALID_ARGUMENT;
    int per_block;
    fill_fn fill = fill_for(kind, out->dtype, &per_block);
    if (!fill) return EMBER_ERR_UNSUPPORTED;
    int64_t n = ember_numel(out);
    if (n == 0) return EMBER_OK;   /* an empty tensor's strides are arbitrary */
    if (!ember_is_contiguous(out)) return EMBER_ERR_INVALID_ARGUMENT;

    draw d;
    init_draw(&d, seed, offset, a, b, ilow, ihigh);
    char *base = ember_base(out);
    /* thread ranges start on chunk boundaries, so each thread's chunks are whole */
    int64_t chunk = (int64_t)per_block * CHUNK_BLOCKS, nchunks = (n + chunk - 1) / chunk;
    int nt = ember_threads_for(n, nchunks);
    if (nt <= 1) {
        fill(&d, base, 0, n);
        return EMBER_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t t = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t e0 = nchunks * t / nth * chunk, e1 = nchunks * (t + 1) / nth * chunk;
        if (e1 > n) e1 = n;
        if (e0 < e1) fill(&d, base, e0, e1);
    }
    return EMBER_OK;
}

/* Helpers shared by the ember-cpu kernel files: descriptor checks, the thread-count rule, dtype
 * sizes, half-precision conversions, flat-index offsets and a strided N-d iterator.  Internal to
 * the plugin; not part of the ABI. */
#ifndef EMBER_CPU_COMMON_H
#define EMBER_CPU_COMMON_H

#include <complex.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "ember.h"
#include "ember_cpu.h"

typedef uint16_t ember_f16;   /* IEEE binary16 bits */
typedef uint16_t ember_bf16;  /* bfloat16 bits      */

static const int64_t ember_itemsize[EMBER_NUM_DTYPES] = {1, 1, 2, 4, 8, 1, 2, 2, 4, 8, 8, 16};

static inline int64_t ember_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ember_max64(int64_t a, int64_t b) { return a > b ? a : b; }

#if defined(__AVX512F__)
/* Lanes [lo, hi) of a 16- or 8-lane mask, clamped: the masked loads and stores of row edges. */
static inline __mmask16 lanes_16(int64_t lo, int64_t hi) {
    lo = ember_max64(lo, 0), hi = ember_min64(hi, 16);
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}
static inline __mmask8 lanes_8(int64_t lo, int64_t hi) {
    lo = ember_max64(lo, 0), hi = ember_min64(hi, 8);
    return hi <= lo ? 0 : (__mmask8)(((1u << hi) - 1) & ~((1u << lo) - 1));
}
#endif

/* An (H, W) float plane copied into the middle of a (H + 2 ph, W + 2 pw) one whose border is
 * zeroed: the padded images that the direct 3x3 kernels read their taps from without bounds checks. */
static inline void ember_pad_plane_f32(float *dst, const float *src, int64_t H, int64_t W, int64_t ph, int64_t pw) {
    int64_t Wp = W + 2 * pw;
    memset(dst, 0, (size_t)(ph * Wp) * sizeof(float));
    for (int64_t i = 0; i < H; i++) {
        float *row = dst + (ph + i) * Wp;
        memset(row, 0, (size_t)pw * sizeof(float));
        memcpy(row + pw, src + i * W, (size_t)W * sizeof(float));
        memset(row + pw + W, 0, (size_t)pw * sizeof(float));
    }
    memset(dst + (ph + H) * Wp, 0, (size_t)(ph * Wp) * sizeof(float));
}

/* ---- descriptors ----------------------------------------------------------------------------- */

/* EMBER_OK (0, so `if (ember_check_desc(t) || ...)` rejects) when every kernel can read t: the
 * core built it for this ABI (struct_size covers the fields we read; a newer minor only appends),
 * dtype and ndim are in range, no extent is negative and a non-empty tensor has data.  The core
 * never passes anything else; checking anyway turns a core bug into a status, not a crash. */
static inline ember_status ember_check_desc(const ember_tensor *t) {
    if (!t || t->struct_size < sizeof(ember_tensor) || t->dtype < 0 || t->dtype >= EMBER_NUM_DTYPES ||
        t->ndim < 0 || t->ndim > EMBER_MAX_NDIM)
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return EMBER_ERR_INVALID_ARGUMENT;
        n *= t->shape[d];
    }
    return n == 0 || t->data ? EMBER_OK : EMBER_ERR_INVALID_ARGUMENT;
}

/* The first n extents of a and b agree. */
static inline int ember_same_dims(const ember_tensor *a, const ember_tensor *b, int n) {
    for (int d = 0; d < n; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static inline int ember_same_shape(const ember_tensor *a, const ember_tensor *b) {
    return a->ndim == b->ndim && ember_same_dims(a, b, a->ndim);
}

static inline int64_t ember_numel(const ember_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* C order; an empty tensor counts whatever its strides (it has no element to misplace), as in the core. */
static inline int ember_is_contiguous(const ember_tensor *t) {
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expected) return ember_numel(t) == 0;
        expected *= t->shape[d];
    }
    return 1;
}

static inline char *ember_base(const ember_tensor *t) {
    return (char *)t->data + t->offset * ember_itemsize[t->dtype];
}

/* ---- windows (pooling, convolution) ------------------------------------------------------------ */

/* A window the kernels can walk: positive extents, strides and dilations, no negative padding. */
static inline int ember_valid_window(const ember_cpu_window *w) {
    return w && w->kh > 0 && w->kw > 0 && w->sh > 0 && w->sw > 0 && w->ph >= 0 && w->pw >= 0 && w->dh > 0 &&
           w->dw > 0;
}

/* The outputs ox in [first, last) of a row of `outputs` whose tap reads input column
 * ox * s + offset inside [0, n): a window kernel runs them without bounds checks. */
typedef struct {
    int64_t first, last;
} ember_run;

static inline ember_run ember_inside_run(int64_t outputs, int64_t n, int64_t offset, int64_t s) {
    ember_run r = {offset >= 0 ? 0 : (-offset + s - 1) / s, n - 1 - offset < 0 ? 0 : (n - 1 - offset) / s + 1};
    if (r.last > outputs) r.last = outputs;
    if (r.first > r.last) r.first = r.last;
    return r;
}

/* ---- threads ----------------------------------------------------------------------------------- */

/* The least work (elements, or their equivalent) worth one thread of a parallel region:
 * EMBER_CPU_THREAD_WORK, read once at load (runtime.c; default EMBER_THREAD_WORK_DEFAULT).  A region
 * goes parallel from twice this, and gets one thread per this much work, so that a tensor just
 * above the threshold wakes two threads, not all sixteen of a large machine. */
#define EMBER_THREAD_WORK_DEFAULT 16384
int64_t ember_cpu_thread_work(void);

/* Environment variable `name` as a non-negative integer; `fallback` when unset or unparsable. */
int64_t ember_cpu_env_int64(const char *name, int64_t fallback);

/* Work below which a kernel stays on one thread: waking a second costs more. */
static inline int64_t ember_parallel_grain(void) { return 2 * ember_cpu_thread_work(); }

/* The num_threads of every ember parallel region: 1 below ember_parallel_grain() of work, else
 * one thread per ember_cpu_thread_work() of work, but no more than the count
 * ember_cpu_set_num_threads stored, nor than `tasks`, the independent pieces the work comes in (a
 * team member with nothing to do still has to be woken).  At 2 threads this is exactly "2 from
 * the grain on".  The count is process-wide, whereas omp_set_num_threads only sets the default of
 * the OS thread that called it, and kernels run on whichever Python thread calls them. */
static inline int ember_threads_for(int64_t work, int64_t tasks) {
    int64_t per = ember_cpu_thread_work();
    if (work < 2 * per || tasks < 2 || omp_in_parallel()) return 1;   /* nested: one */
    return (int)ember_min64(ember_min64(ember_cpu_get_num_threads(), tasks), work / per);
}

/* ---- float16 and bfloat16 ---------------------------------------------------------------------- */

static inline float ember_bf16_to_f32(ember_bf16 h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline ember_bf16 ember_f32_to_bf16(float f) {   /* round to nearest even, NaN kept */
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (ember_bf16)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (ember_bf16)(bits >> 16);
}

/* One instruction with F16C, but GCC 12 never vectorizes it: loops use the two below. */
static inline float ember_f16_to_f32(ember_f16 h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

/* The bits of a _Float16: a conversion to it from any type rounds once, to nearest even. */
static inline ember_f16 ember_f16_bits(_Float16 v) {
    ember_f16 h;
    memcpy(&h, &v, 2);
    return h;
}

static inline ember_f16 ember_f32_to_f16(float f) { return ember_f16_bits((_Float16)f); }

/* float16 -> float32 with integer operations and selects only, so that GCC vectorizes the loops
 * it appears in.  Exact for every input: normal numbers rebias the exponent, Inf/NaN get the
 * all-ones exponent, zeros and subnormals are renormalized by one float subtraction
 * (2^-14 * (1 + m/1024) - 2^-14). */
static inline float ember_f16_to_f32_int(ember_f16 h) {
    uint32_t o = (uint32_t)(h & 0x7fff) << 13, exp = o & 0x0f800000u;
    o += (uint32_t)(127 - 15) << 23;
    o += exp == 0x0f800000u ? (uint32_t)(128 - 16) << 23 : 0u;
    uint32_t od = o + (1u << 23);
    float f, fd;
    memcpy(&f, &o, 4);
    memcpy(&fd, &od, 4);
    f = exp == 0 ? fd - 0x1p-14f : f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &u, 4);
    return f;
}

/* 16 float16 -> float32 with the hardware's conversions (AVX-512: one, F16C: two), or the
 * integer converter without either.  A whole vector of the reductions' leaves; kept free of any
 * remainder loop so that GCC still inlines those leaves into their callers. */
static inline void ember_f16x16_to_f32(float *dst, const ember_f16 *src) {
#if defined(__AVX512F__)
    _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)src)));
#elif defined(__F16C__)
    _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src)));
    _mm256_storeu_ps(dst + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 8))));
#else
    for (int j = 0; j < 16; j++) dst[j] = ember_f16_to_f32_int(src[j]);
#endif
}

/* n float16 -> float32 and back, 16 at a time as above and element by element for the rest.
 * Same results as the scalar conversions. */
static inline void ember_f16_to_f32_block(float *dst, const ember_f16 *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) ember_f16x16_to_f32(dst + i, src + i);
    for (; i < n; i++) dst[i] = ember_f16_to_f32_int(src[i]);
}

#define EMBER_ROUND_EVEN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static inline void ember_f32_to_f16_block(ember_f16 *dst, const float *src, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), EMBER_ROUND_EVEN));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), EMBER_ROUND_EVEN));
#endif
    for (; i < n; i++) dst[i] = ember_f32_to_f16(src[i]);
}

/* ---- elementwise inner loops: defined in the gen_*.c files, driven by elementwise.c ---------- */

/* One row: n elements, a byte stride per operand. */
typedef void (*ember_ew_loop1)(int64_t n, char *out, int64_t so, const char *x, int64_t sx);
typedef void (*ember_ew_loop2)(int64_t n, char *out, int64_t so, const char *a, int64_t sa,
                               const char *b, int64_t sb);

/* [op][input dtype]: the loop (NULL: unsupported) and the dtype of its result */
extern const ember_ew_loop1 ember_ew_unary_loops[EMBER_CPU_UNARY_COUNT][EMBER_NUM_DTYPES];
extern const int8_t ember_ew_unary_result[EMBER_CPU_UNARY_COUNT][EMBER_NUM_DTYPES];
extern const ember_ew_loop2 ember_ew_binary_loops[EMBER_CPU_BINARY_COUNT][EMBER_NUM_DTYPES];
extern const int8_t ember_ew_binary_result[EMBER_CPU_BINARY_COUNT][EMBER_NUM_DTYPES];
extern const ember_ew_loop1 ember_ew_copy_loops[EMBER_NUM_DTYPES][EMBER_NUM_DTYPES]; /* [dst][src] */

/* ---- flat indices -------------------------------------------------------------------------------- */

/* Offset of element `flat` (C order) of an n-d index space with the given strides (in whatever
 * unit the strides are).  The outermost dim needs no modulo, so a 1-d space costs one multiply. */
static inline int64_t ember_flat_offset(int n, const int64_t *shape, const int64_t *strides, int64_t flat) {
    int64_t off = 0;
    for (int d = n - 1; d > 0; d--) {
        off += (flat % shape[d]) * strides[d];
        flat /= shape[d];
    }
    return n > 0 ? off + flat * strides[0] : 0;
}

/* x and an out with x's leading dims, as rows along x's last dim: row r of x starts at byte
 * ember_flat_offset(nlead, shape, xs, r) from x's base, of out at (..., os, r).  A 0-d x is one
 * row of one element.  oinner is out's byte stride along its own last dim (scans and sorts,
 * where out has x's shape). */
typedef struct {
    int nlead;
    int64_t shape[EMBER_MAX_NDIM], xs[EMBER_MAX_NDIM], os[EMBER_MAX_NDIM];
    int64_t rows, n, xinner, oinner;
} ember_rows;

static inline void ember_rows_init(ember_rows *r, const ember_tensor *out, const ember_tensor *x) {
    int64_t xsz = ember_itemsize[x->dtype], osz = ember_itemsize[out->dtype];
    r->nlead = x->ndim > 0 ? x->ndim - 1 : 0;
    r->rows = 1;
    for (int d = 0; d < r->nlead; d++) {
        r->shape[d] = x->shape[d];
        r->xs[d] = x->strides[d] * xsz;
        r->os[d] = out->strides[d] * osz;
        r->rows *= x->shape[d];
    }
    r->n = x->ndim > 0 ? x->shape[x->ndim - 1] : 1;
    r->xinner = x->ndim > 0 ? x->strides[x->ndim - 1] * xsz : 0;
    r->oinner = out->ndim > 0 ? out->strides[out->ndim - 1] * osz : 0;
}

/*
 * Walks the outer dims (all but the last) of up to EMBER_ITER_MAX operands that share `shape`,
 * yielding byte pointers to the start of each innermost row.  Usage:
 *
 *     ember_iter it;
 *     ember_iter_init(&it, ndim, shape, nops, tensors);
 *     do { ...it.ptr[k] points at row start, it.inner_stride[k] is its byte stride,
 *          it.inner_n is the row length... } while (ember_iter_next(&it));
 *
 * Rows can be split across threads with ember_iter_seek(&it, row_index), or elements with
 * ember_split below.
 */
#define EMBER_ITER_MAX 4

typedef struct {
    int ndim, nops;
    int64_t inner_n, rows;
    int64_t shape[EMBER_MAX_NDIM];
    int64_t byte_strides[EMBER_ITER_MAX][EMBER_MAX_NDIM];
    int64_t index[EMBER_MAX_NDIM];
    char *base[EMBER_ITER_MAX];
    char *ptr[EMBER_ITER_MAX];
    int64_t inner_stride[EMBER_ITER_MAX];
} ember_iter;

static inline void ember_iter_seek(ember_iter *it, int64_t row) {
    for (int k = 0; k < it->nops; k++) it->ptr[k] = it->base[k];
    for (int d = it->ndim - 2; d >= 0; d--) {
        int64_t i = row % it->shape[d];
        row /= it->shape[d];
        it->index[d] = i;
        for (int k = 0; k < it->nops; k++) it->ptr[k] += i * it->byte_strides[k][d];
    }
}

/* A 0-d operand set iterates as one row of one element.  Returns 0 when there is nothing to do
 * (some dim is 0). */
static inline int ember_iter_init(ember_iter *it, int ndim, const int64_t *shape, int nops,
                                  const ember_tensor *const *ops) {
    it->ndim = ndim > 0 ? ndim : 1;
    it->nops = nops;
    it->rows = 1;
    for (int d = 0; d < it->ndim; d++) {
        it->shape[d] = ndim > 0 ? shape[d] : 1;
        for (int k = 0; k < nops; k++)
            it->byte_strides[k][d] = ndim > 0 ? ops[k]->strides[d] * ember_itemsize[ops[k]->dtype] : 0;
    }
    for (int d = 0; d < it->ndim - 1; d++) it->rows *= it->shape[d];
    it->inner_n = it->shape[it->ndim - 1];
    for (int k = 0; k < nops; k++) {
        it->base[k] = ember_base(ops[k]);
        it->inner_stride[k] = it->byte_strides[k][it->ndim - 1];
    }
    if (it->rows == 0 || it->inner_n == 0) return 0;  /* seeking would divide by a zero extent */
    ember_iter_seek(it, 0);
    return 1;
}

static inline int ember_iter_next(ember_iter *it) {
    for (int d = it->ndim - 2; d >= 0; d--) {
        for (int k = 0; k < it->nops; k++) it->ptr[k] += it->byte_strides[k][d];
        if (++it->index[d] < it->shape[d]) return 1;
        for (int k = 0; k < it->nops; k++) it->ptr[k] -= it->shape[d] * it->byte_strides[k][d];
        it->index[d] = 0;
    }
    return 0;
}

/* The elements of operands sharing a shape, cut into `nparts` C-order ranges of about equal size
 * (a range may start or end inside a row), one per thread:
 *
 *     ember_iter my;
 *     int64_t col, left = ember_split_seek(&s, part, &my, &col);
 *     while (left > 0) {
 *         int64_t len = ember_min64(my.inner_n - col, left);
 *         ...elements [col, col + len) of the row at my.ptr[k]...
 *         left -= len;
 *         col = 0;
 *         if (left > 0) ember_iter_next(&my);
 *     }
 */
typedef struct {
    ember_iter it;
    int64_t total;
    int nparts;
} ember_split;

/* nparts is ember_threads_for(total, max_parts) (INT64_MAX: as many as there are threads).
 * Returns 0 when there are no elements. */
static inline int ember_split_init(ember_split *s, int ndim, const int64_t *shape, int nops,
                                   const ember_tensor *const *ops, int64_t max_parts) {
    s->total = ember_iter_init(&s->it, ndim, shape, nops, ops) ? s->it.rows * s->it.inner_n : 0;
    s->nparts = ember_threads_for(s->total, max_parts);
    return s->total > 0;
}

/* Points `my` at the first element of range p; returns the range's length and the column of
 * its first element in *col. */
static inline int64_t ember_split_seek(const ember_split *s, int p, ember_iter *my, int64_t *col) {
    int64_t a = s->total * p / s->nparts, b = s->total * (p + 1) / s->nparts;
    *my = s->it;
    if (a < b) ember_iter_seek(my, a / s->it.inner_n);
    *col = a % s->it.inner_n;
    return b - a;
}

#endif /* EMBER_CPU_COMMON_H */

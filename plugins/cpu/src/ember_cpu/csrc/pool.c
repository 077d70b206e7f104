/* 2-d pooling over NCHW planes and the gradients of it, in one pass per plane where the core's
 * composites build one strided view per kernel tap and combine them op by op (a 2x2 max pool's
 * gradient took ~20 ops and their temporaries).
 *
 * The semantics are the composites' (ember_core/ops/nn_composites.py), value for value:
 *   - windows read a padded input: -inf for max, 0 for avg (padding and ceil_mode windows that
 *     reach past it never contribute);
 *   - max: NaN propagates; of equal values the first tap (row-major in the window) is kept;
 *   - max gradient: each window's gradient goes to the first tap strictly greater than every
 *     tap before it (tap 0 to start, padding counting as -inf), and nowhere if that tap is padding;
 *   - avg: the sum of the taps in window order, divided by PyTorch's divisor (the window clipped
 *     to the padded input with count_include_pad, else to the input).
 *
 * How: every plane of a call has the same geometry, so the call works it out once (a pool_plan:
 * which window rows of each output row, and which outputs of a row each window column reads,
 * lie inside the input).  A plane is then a walk over its output rows where each window tap is
 * one loop over the outputs it reads, with no bounds test and no division per tap, and with
 * the stride a compile-time constant for 1 and 2 (nearly every pool) so that gcc vectorizes it.
 * The max gradient walks the same way, keeping each output's best value and tap in a row of
 * scratch, then adds the row's gradients at those taps.
 * Planes (N * C of them) run in parallel; a plane's gradients accumulate on one thread, so
 * overlapping windows never race. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "common.h"

/* Taps of window index o along an axis: i = o * s - p + k * d for k in [0, taps). */
typedef struct {
    int64_t first, last;   /* taps whose input index lies in [0, n): first..last-1 */
} tap_range;

static tap_range in_range(int64_t o, int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
    int64_t start = o * s - p;
    tap_range r = {0, k};
    while (r.first < k && start + r.first * d < 0) r.first++;
    while (r.last > r.first && start + (r.last - 1) * d >= n) r.last--;
    return r;
}

/* PyTorch's avg_pool2d divisor along one axis for window o. */
static int64_t avg_span(int64_t o, int64_t n, int64_t k, int64_t s, int64_t p, int count_include_pad) {
    int64_t start = o * s - p, end = ember_min64(start + k, n + p);
    if (count_include_pad) return end - start;
    return ember_min64(end, n) - ember_max64(start, 0);
}

/* What every plane of one call shares: big is the input-sized tensor (N, C, H, W), small the
 * output-sized one (N, C, OH, OW).  One allocation holds the tables and the threads' scratch. */
typedef struct {
    int64_t planes, H, W, OH, OW;
    int threads;
    int overlapping;       /* windows share inputs (as the composite decides: then it adds)     */
    tap_range *rows;       /* per output row: the window rows that lie inside the input           */
    ember_run *runs;       /* per window column: the outputs of a row whose tap lies inside it    */
    int32_t *tap_at;       /* per tap (window order): its input offset from the window's origin   */
    int64_t *row_span;     /* avg, per output row: the divisor's factor along the column          */
    int64_t *col_span;     /* avg, per output column: the divisor's factor along the row          */
    char *col_padded;      /* avg, per output column: whether the window reaches padding          */
    char *scratch;         /* scratch_bytes per thread: one output row's working values           */
    size_t scratch_bytes;
} pool_plan;

static size_t round_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

static int plan_init(pool_plan *p, const ember_tensor *big, const ember_tensor *small, const ember_cpu_window *w,
                     int count_include_pad) {
    int64_t H = big->shape[2], W = big->shape[3], OH = small->shape[2], OW = small->shape[3];
    int64_t taps = w->kh * w->kw;
    /* tap offsets are int32 so the gradient's scratch vectorizes with float lanes */
    if (taps > INT32_MAX || (w->kh - 1) * w->dh * W + (w->kw - 1) * w->dw > INT32_MAX) return EMBER_ERR_UNSUPPORTED;
    *p = (pool_plan){.planes = big->shape[0] * big->shape[1], .H = H, .W = W, .OH = OH, .OW = OW};
    p->threads = ember_threads_for(p->planes * (H * W + OH * OW * taps), p->planes);
    p->overlapping = w->sh < w->dh * (w->kh - 1) + 1 || w->sw < w->dw * (w->kw - 1) + 1;
    p->scratch_bytes = round_up((size_t)OW * (sizeof(double) + sizeof(int32_t)));
    size_t sizes[] = {round_up((size_t)OH * sizeof(tap_range)), round_up((size_t)w->kw * sizeof(ember_run)),
                      round_up((size_t)taps * sizeof(int32_t)), round_up((size_t)OH * sizeof(int64_t)),
                      round_up((size_t)OW * sizeof(int64_t)), round_up((size_t)OW),
                      p->scratch_bytes * (size_t)p->threads};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) total += sizes[i];
    char *block = ember_cpu_alloc((int64_t)total);
    if (!block) return EMBER_ERR_OUT_OF_MEMORY;
    p->rows = (tap_range *)block;
    p->runs = (ember_run *)(block += sizes[0]);
    p->tap_at = (int32_t *)(block += sizes[1]);
    p->row_span = (int64_t *)(block += sizes[2]);
    p->col_span = (int64_t *)(block += sizes[3]);
    p->col_padded = block += sizes[4];
    p->scratch = block + sizes[5];
    for (int64_t oy = 0; oy < OH; oy++) {
        p->rows[oy] = in_range(oy, H, w->kh, w->sh, w->ph, w->dh);
        p->row_span[oy] = avg_span(oy, H, w->kh, w->sh, w->ph, count_include_pad);
    }
    for (int64_t kx = 0; kx < w->kw; kx++) p->runs[kx] = ember_inside_run(OW, W, kx * w->dw - w->pw, w->sw);
    for (int64_t ky = 0; ky < w->kh; ky++)
        for (int64_t kx = 0; kx < w->kw; kx++) p->tap_at[ky * w->kw + kx] = (int32_t)(ky * w->dh * W + kx * w->dw);
    for (int64_t ox = 0; ox < OW; ox++) {
        tap_range rx = in_range(ox, W, w->kw, w->sw, w->pw, w->dw);
        p->col_span[ox] = avg_span(ox, W, w->kw, w->sw, w->pw, count_include_pad);
        p->col_padded[ox] = rx.last - rx.first < w->kw;
    }
    return EMBER_OK;
}

static void plan_free(pool_plan *p) { ember_cpu_free(p->rows); }

#define INLINE static inline __attribute__((always_inline))

/* The window's origin (tap 0) of output row oy, column 0, as an offset into its input plane. */
static int64_t row_origin(int64_t oy, int64_t W, const ember_cpu_window *w) {
    return (oy * w->sh - w->ph) * W - w->pw;
}

/* Each run loop covers the outputs [r.first, r.last) of one row for one window tap; in[ox * s]
 * is output ox's tap. */
#define DEFINE_POOL(SUFFIX, T)                                                                     \
    /* written as max, then NaN's mask: gcc keeps both branch-free (vmaxss, a masked vmaxps) */    \
    INLINE void max_run_##SUFFIX(T *restrict o, const T *restrict in, ember_run r, int64_t s) {    \
        for (int64_t ox = r.first; ox < r.last; ox++) {                                            \
            T v = in[ox * s], cur = o[ox];                                                         \
            T larger = v > cur ? v : cur;                                                          \
            o[ox] = v != v ? v : larger;   /* NaN stays */                                         \
        }                                                                                          \
    }                                                                                              \
    INLINE void sum_run_##SUFFIX(T *restrict o, const T *restrict in, ember_run r, int64_t s) {    \
        for (int64_t ox = r.first; ox < r.last; ox++) o[ox] += in[ox * s];                         \
    }                                                                                              \
    /* added where windows overlap, else copied (-0 included), as the composite does */           \
    INLINE void spread_run_##SUFFIX(T *restrict in, const T *restrict g, ember_run r, int64_t s,   \
                                    int overlapping) {                                             \
        for (int64_t ox = r.first; ox < r.last; ox++) in[ox * s] = overlapping ? in[ox * s] + g[ox] : g[ox]; \
    }                                                                                              \
    /* tap 0 is taken whatever it holds; a later tap only when strictly greater (the tap's       \
     * select as integer masks: a float select in scalar code becomes a mispredicted branch) */  \
    INLINE void argmax_run_##SUFFIX(T *restrict best, int32_t *restrict at, const T *restrict in,  \
                                    ember_run r, int64_t s, int32_t tap) {                         \
        for (int64_t ox = r.first; ox < r.last; ox++) {                                            \
            T v = in[ox * s], b = best[ox];                                                        \
            int32_t greater = -(int32_t)(tap == 0 || v > b);                                       \
            at[ox] = (at[ox] & ~greater) | (tap & greater);                                        \
            best[ox] = tap == 0 || v > b ? v : b;                                                  \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void max_plane_##SUFFIX(T *restrict out, const T *restrict x, const pool_plan *p,       \
                                   const ember_cpu_window *w, char *scratch) {                     \
        (void)scratch;                                                                             \
        for (int64_t oy = 0; oy < p->OH; oy++) {                                                   \
            T *o = out + oy * p->OW;                                                               \
            for (int64_t ox = 0; ox < p->OW; ox++) o[ox] = -INFINITY;                              \
            const T *origin = x + row_origin(oy, p->W, w);                                         \
            for (int64_t ky = p->rows[oy].first; ky < p->rows[oy].last; ky++)                      \
                for (int64_t kx = 0; kx < w->kw; kx++)                                             \
                    max_run_##SUFFIX(o, origin + p->tap_at[ky * w->kw + kx], \
                                                            p->runs[kx], w->sw);                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void max_grad_plane_##SUFFIX(T *restrict gx, const T *restrict gout, const T *restrict x, \
                                        const pool_plan *p, const ember_cpu_window *w, char *scratch) { \
        T *best = (T *)scratch;                                                                    \
        int32_t *at = (int32_t *)(scratch + p->OW * sizeof(T));                                    \
        memset(gx, 0, (size_t)(p->H * p->W) * sizeof(T));                                          \
        for (int64_t oy = 0; oy < p->OH; oy++) {                                                   \
            /* a padded tap 0 starts the search at -inf, pointing nowhere; padding after it       \
             * (-inf) is never strictly greater, so only the input's taps are visited */           \
            for (int64_t ox = 0; ox < p->OW; ox++) {                                               \
                best[ox] = -INFINITY;                                                              \
                at[ox] = -1;                                                                       \
            }                                                                                      \
            int64_t origin = row_origin(oy, p->W, w);                                              \
            for (int64_t ky = p->rows[oy].first; ky < p->rows[oy].last; ky++)                      \
                for (int64_t kx = 0; kx < w->kw; kx++) {                                           \
                    int32_t tap = (int32_t)(ky * w->kw + kx);                                      \
                    argmax_run_##SUFFIX(best, at, x + origin + p->tap_at[tap], \
                                                               p->runs[kx], w->sw, tap);              \
                }                                                                                  \
            const T *g = gout + oy * p->OW;                                                        \
            for (int64_t ox = 0; ox < p->OW; ox++)                                                 \
                if (at[ox] >= 0) {   /* a single share is copied, -0 included, as the composite does */ \
                    T *dst = gx + origin + ox * w->sw + p->tap_at[at[ox]];                          \
                    *dst = p->overlapping ? *dst + g[ox] : g[ox];                                  \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* Windows that tile the planes exactly: every input element lies in one window, so each is   \
     * written once (the gradient at the window's first maximum, zero elsewhere), and all planes   \
     * run as one sequence of window rows. */                                                      \
    INLINE void max_grad_tiled_##SUFFIX(T *restrict gx, const T *restrict gout, const T *restrict x, \
                                        int64_t first_row, int64_t last_row, int64_t W, int64_t OW, \
                                        int64_t kh, int64_t kw) {                                  \
        for (int64_t r = first_row; r < last_row; r++) {                                          \
            const T *xr = x + r * kh * W, *g = gout + r * OW;                                      \
            T *gr = gx + r * kh * W;                                                               \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                const T *window = xr + ox * kw;                                                    \
                T best = window[0];   /* tap 0 is taken whatever it holds */                       \
                int64_t at = 0;                                                                    \
                for (int64_t i = 0; i < kh; i++)                                                   \
                    for (int64_t j = 0; j < kw; j++) {                                             \
                        T v = window[i * W + j];                                                   \
                        int64_t greater = -(int64_t)(v > best);   /* masks: see argmax_run */      \
                        at = (at & ~greater) | ((i * W + j) & greater);                            \
                        best = v > best ? v : best;                                                \
                    }                                                                              \
                /* zeros, then the share at the maximum: a select per tap compiles to branches     \
                 * that random data mispredicts (3x slower on rows too short to vectorise) */       \
                for (int64_t i = 0; i < kh; i++)                                                   \
                    for (int64_t j = 0; j < kw; j++) gr[ox * kw + i * W + j] = (T)0;               \
                gr[ox * kw + at] = g[ox];                                                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void avg_plane_##SUFFIX(T *restrict out, const T *restrict x, const pool_plan *p,       \
                                   const ember_cpu_window *w, char *scratch) {                     \
        (void)scratch;                                                                             \
        for (int64_t oy = 0; oy < p->OH; oy++) {                                                   \
            T *o = out + oy * p->OW;                                                               \
            for (int64_t ox = 0; ox < p->OW; ox++) o[ox] = (T)-0.0;   /* the sum's identity */     \
            tap_range ry = p->rows[oy];                                                            \
            const T *origin = x + row_origin(oy, p->W, w);                                         \
            for (int64_t ky = ry.first; ky < ry.last; ky++)                                        \
                for (int64_t kx = 0; kx < w->kw; kx++)                                             \
                    sum_run_##SUFFIX(o, origin + p->tap_at[ky * w->kw + kx], \
                                                            p->runs[kx], w->sw);                      \
            int rows_padded = ry.last - ry.first < w->kh;                                          \
            for (int64_t ox = 0; ox < p->OW; ox++) {                                               \
                /* the composite adds padding's zeros too: they only turn a -0 sum into +0 */      \
                T sum = rows_padded || p->col_padded[ox] ? o[ox] + (T)0 : o[ox];                   \
                o[ox] = sum / (T)(p->row_span[oy] * p->col_span[ox]);                              \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* grad_output / divisor, given to every tap of the window */                                  \
    static void avg_grad_plane_##SUFFIX(T *restrict gx, const T *restrict gout, const pool_plan *p, \
                                        const ember_cpu_window *w, char *scratch) {                \
        T *share = (T *)scratch;                                                                   \
        memset(gx, 0, (size_t)(p->H * p->W) * sizeof(T));                                          \
        for (int64_t oy = 0; oy < p->OH; oy++) {                                                   \
            for (int64_t ox = 0; ox < p->OW; ox++)                                                 \
                share[ox] = gout[oy * p->OW + ox] / (T)(p->row_span[oy] * p->col_span[ox]);        \
            T *origin = gx + row_origin(oy, p->W, w);                                              \
            for (int64_t ky = p->rows[oy].first; ky < p->rows[oy].last; ky++)                      \
                for (int64_t kx = 0; kx < w->kw; kx++)                                             \
                    spread_run_##SUFFIX(origin + p->tap_at[ky * w->kw + kx], share, p->runs[kx], w->sw, \
                                        p->overlapping);                                           \
        }                                                                                          \
    }

DEFINE_POOL(f32, float)
DEFINE_POOL(f64, double)

/* Windows that tile the input exactly (stride = kernel, no padding, no dilation, nothing left
 * over): every input element lies in one window. */
static int tiles_exactly(const ember_cpu_window *w, int64_t H, int64_t W, int64_t OH, int64_t OW) {
    return w->sh == w->kh && w->sw == w->kw && !w->ph && !w->pw && w->dh == 1 && w->dw == 1 && OH * w->kh == H &&
           OW * w->kw == W;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* float32 2x2 windows that tile the input, 16 windows per step: the two rows of a window row are
 * split into their even and odd columns, the windows' four taps in window order; masks cover rows
 * of fewer than 16 windows, so planes of any even width take this path. */
#define TARGET_2X2 __attribute__((target("avx512f")))

typedef struct {
    __mmask16 windows, first16, next16;   /* windows in the step; valid lanes of each row's 32 floats */
} step_2x2;

TARGET_2X2 static inline step_2x2 step_at(int64_t ox, int64_t OW) {
    int64_t n = ember_min64(16, OW - ox);
    return (step_2x2){(__mmask16)((1u << n) - 1), (__mmask16)(n >= 8 ? 0xffff : (1u << 2 * n) - 1),
                      (__mmask16)(n <= 8 ? 0 : (1u << 2 * (n - 8)) - 1)};
}

/* tap[k]: tap k of windows ox .. ox + 15 of the window row whose rows are top and bottom */
TARGET_2X2 static inline void load_taps_2x2(__m512 tap[4], const float *top, const float *bottom, int64_t ox,
                                            step_2x2 m) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512 t0 = _mm512_maskz_loadu_ps(m.first16, top + 2 * ox), t1 = _mm512_maskz_loadu_ps(m.next16, top + 2 * ox + 16);
    __m512 b0 = _mm512_maskz_loadu_ps(m.first16, bottom + 2 * ox);
    __m512 b1 = _mm512_maskz_loadu_ps(m.next16, bottom + 2 * ox + 16);
    tap[0] = _mm512_permutex2var_ps(t0, even, t1);
    tap[1] = _mm512_permutex2var_ps(t0, odd, t1);
    tap[2] = _mm512_permutex2var_ps(b0, even, b1);
    tap[3] = _mm512_permutex2var_ps(b0, odd, b1);
}

/* The inverse of load_taps_2x2: tap[k] of windows ox .. ox + 15 written to its place in the
 * window row whose rows are top and bottom. */
TARGET_2X2 static inline void store_taps_2x2(float *top, float *bottom, int64_t ox, step_2x2 m, const __m512 tap[4]) {
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
    _mm512_mask_storeu_ps(top + 2 * ox, m.first16, _mm512_permutex2var_ps(tap[0], low, tap[1]));
    _mm512_mask_storeu_ps(top + 2 * ox + 16, m.next16, _mm512_permutex2var_ps(tap[0], high, tap[1]));
    _mm512_mask_storeu_ps(bottom + 2 * ox, m.first16, _mm512_permutex2var_ps(tap[2], low, tap[3]));
    _mm512_mask_storeu_ps(bottom + 2 * ox + 16, m.next16, _mm512_permutex2var_ps(tap[2], high, tap[3]));
}

/* The max as the scalar walk takes it: a tap replaces the running value when greater or NaN. */
TARGET_2X2 static void max_tiled_2x2_avx512(float *restrict out, const float *restrict x, int64_t first_row,
                                            int64_t last_row, int64_t W, int64_t OW) {
    for (int64_t r = first_row; r < last_row; r++)
        for (int64_t ox = 0; ox < OW; ox += 16) {
            step_2x2 m = step_at(ox, OW);
            __m512 tap[4], best = _mm512_set1_ps(-INFINITY);
            load_taps_2x2(tap, x + r * 2 * W, x + r * 2 * W + W, ox, m);
            for (int k = 0; k < 4; k++)
                best = _mm512_mask_mov_ps(best, _mm512_cmp_ps_mask(tap[k], best, _CMP_GT_OQ) |
                                                    _mm512_cmp_ps_mask(tap[k], tap[k], _CMP_UNORD_Q), tap[k]);
            _mm512_mask_storeu_ps(out + r * OW + ox, m.windows, best);
        }
}

/* The average as avg_plane takes it, bit for bit: the taps added in window order, then divided
 * by 4 (a multiply by 0.25 rounds the same). */
TARGET_2X2 static void avg_tiled_2x2_avx512(float *restrict out, const float *restrict x, int64_t first_row,
                                            int64_t last_row, int64_t W, int64_t OW) {
    for (int64_t r = first_row; r < last_row; r++)
        for (int64_t ox = 0; ox < OW; ox += 16) {
            step_2x2 m = step_at(ox, OW);
            __m512 tap[4];
            load_taps_2x2(tap, x + r * 2 * W, x + r * 2 * W + W, ox, m);
            __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(tap[0], tap[1]), tap[2]), tap[3]);
            _mm512_mask_storeu_ps(out + r * OW + ox, m.windows, _mm512_mul_ps(sum, _mm512_set1_ps(0.25f)));
        }
}

/* The gradient as avg_grad_plane takes it: each tap gets a copy of its window's share,
 * grad_output / 4. */
TARGET_2X2 static void avg_grad_tiled_2x2_avx512(float *restrict gx, const float *restrict gout, int64_t first_row,
                                                 int64_t last_row, int64_t W, int64_t OW) {
    for (int64_t r = first_row; r < last_row; r++)
        for (int64_t ox = 0; ox < OW; ox += 16) {
            step_2x2 m = step_at(ox, OW);
            __m512 share = _mm512_mul_ps(_mm512_maskz_loadu_ps(m.windows, gout + r * OW + ox), _mm512_set1_ps(0.25f));
            __m512 taps[4] = {share, share, share, share};
            store_taps_2x2(gx + r * 2 * W, gx + r * 2 * W + W, ox, m, taps);
        }
}

/* The gradient as max_grad_tiled takes it: the first strictly greater tap wins (a NaN never
 * compares greater, so a NaN tap 0 keeps the window); the four gradient vectors are interleaved
 * back into the two rows. */
TARGET_2X2 static void max_grad_tiled_2x2_avx512(float *restrict gx, const float *restrict gout,
                                                 const float *restrict x, int64_t first_row, int64_t last_row,
                                                 int64_t W, int64_t OW) {
    for (int64_t r = first_row; r < last_row; r++)
        for (int64_t ox = 0; ox < OW; ox += 16) {
            step_2x2 m = step_at(ox, OW);
            __m512 tap[4];
            load_taps_2x2(tap, x + r * 2 * W, x + r * 2 * W + W, ox, m);
            __m512 best = tap[0];
            __mmask16 m1 = _mm512_cmp_ps_mask(tap[1], best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, m1, tap[1]);
            __mmask16 m2 = _mm512_cmp_ps_mask(tap[2], best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, m2, tap[2]);
            __mmask16 m3 = _mm512_cmp_ps_mask(tap[3], best, _CMP_GT_OQ);
            __m512 share = _mm512_maskz_loadu_ps(m.windows, gout + r * OW + ox);
            __m512 g[4] = {_mm512_maskz_mov_ps((__mmask16)~(m1 | m2 | m3), share),
                           _mm512_maskz_mov_ps((__mmask16)(m1 & ~(m2 | m3)), share),
                           _mm512_maskz_mov_ps((__mmask16)(m2 & ~m3), share), _mm512_maskz_mov_ps(m3, share)};
            store_taps_2x2(gx + r * 2 * W, gx + r * 2 * W + W, ox, m, g);
        }
}

static int vector_2x2(const ember_cpu_window *w, int dtype) {
    return w->kh == 2 && w->kw == 2 && dtype == EMBER_FLOAT32 && __builtin_cpu_supports("avx512f");
}

typedef void tiled_rows_2x2(float *restrict dst, const float *restrict src, int64_t first_row, int64_t last_row,
                            int64_t W, int64_t OW);

/* All planes as one sequence of window rows (src's or dst's, whichever is input-sized: W wide),
 * split evenly across the threads. */
static void run_tiled_2x2(tiled_rows_2x2 *rows_fn, void *dst, const void *src, int64_t rows, int64_t W, int64_t OW) {
#pragma omp parallel num_threads(ember_threads_for(rows * 2 * W, rows))
    {
        int t = omp_get_thread_num(), team = omp_get_num_threads();
        rows_fn((float *)dst, (const float *)src, rows * t / team, rows * (t + 1) / team, W, OW);
    }
}
#else
static int vector_2x2(const ember_cpu_window *w, int dtype) { return 0; }
#define run_tiled_2x2(...) ((void)0)
#define max_grad_tiled_2x2_avx512(...) ((void)0)
#endif

/* x-like (N, C, H, W) and out-like (N, C, OH, OW) contiguous tensors of one dtype. */
static int valid_planes(const ember_tensor *big, const ember_tensor *small, const ember_cpu_window *w) {
    if (ember_check_desc(big) || ember_check_desc(small) || !ember_valid_window(w) || big->ndim != 4 || small->ndim != 4 ||
        big->dtype != small->dtype || !ember_is_contiguous(big) || !ember_is_contiguous(small))
        return 0;
    return big->shape[0] == small->shape[0] && big->shape[1] == small->shape[1];
}

/* Runs PLANE(big plane, small plane, scratch) once per (n, c) plane, in parallel, under the plan
 * made for big (input-sized) and small (output-sized); T the element type. */
#define FOR_EACH_PLANE(big, small, w, incl, T, PLANE)                                              \
    do {                                                                                           \
        pool_plan p;                                                                               \
        int status = plan_init(&p, big, small, w, incl);                                           \
        if (status != EMBER_OK) return status;                                                     \
        T *big_base = (T *)ember_base(big), *small_base = (T *)ember_base(small);                  \
        _Pragma("omp parallel num_threads(p.threads)")                                             \
        {                                                                                          \
            char *scratch = p.scratch + (size_t)omp_get_thread_num() * p.scratch_bytes;            \
            _Pragma("omp for schedule(static)")                                                    \
            for (int64_t i = 0; i < p.planes; i++) {                                               \
                T *big_plane = big_base + i * p.H * p.W, *small_plane = small_base + i * p.OH * p.OW; \
                PLANE;                                                                             \
            }                                                                                      \
        }                                                                                          \
        plan_free(&p);                                                                             \
    } while (0)

#define DISPATCH_FLOAT(dtype, F32, F64)                                                            \
    switch (dtype) {                                                                               \
    case EMBER_FLOAT32: F32; break;                                                                \
    case EMBER_FLOAT64: F64; break;                                                                \
    default: return EMBER_ERR_UNSUPPORTED;                                                         \
    }

int ember_cpu_max_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w) {
    if (!valid_planes(x, out, w)) return EMBER_ERR_INVALID_ARGUMENT;
    int64_t H = x->shape[2], W = x->shape[3], OH = out->shape[2], OW = out->shape[3];
    if (tiles_exactly(w, H, W, OH, OW) && vector_2x2(w, out->dtype)) {
        run_tiled_2x2(max_tiled_2x2_avx512, ember_base(out), ember_base(x), x->shape[0] * x->shape[1] * OH, W, OW);
        return EMBER_OK;
    }
#define MAX_POOL(SUFFIX, T) FOR_EACH_PLANE(x, out, w, 0, T, max_plane_##SUFFIX(small_plane, big_plane, &p, w, scratch))
    DISPATCH_FLOAT(out->dtype, MAX_POOL(f32, float), MAX_POOL(f64, double))
#undef MAX_POOL
    return EMBER_OK;
}

int ember_cpu_max_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                              const ember_cpu_window *w) {
    if (!valid_planes(out, grad_output, w) || !valid_planes(x, grad_output, w) || !ember_same_dims(out, x, 4))
        return EMBER_ERR_INVALID_ARGUMENT;
    const void *xs = ember_base(x);
    int64_t H = x->shape[2], W = x->shape[3], OH = grad_output->shape[2], OW = grad_output->shape[3];
    if (tiles_exactly(w, H, W, OH, OW)) {
        int64_t rows = x->shape[0] * x->shape[1] * OH;
        int threads = ember_threads_for(rows * w->kh * W, rows), vector = vector_2x2(w, out->dtype);
#define MAX_GRAD_TILED(SUFFIX, T)                                                                  \
    _Pragma("omp parallel num_threads(threads)")                                                   \
    {                                                                                              \
        int t = omp_get_thread_num(), team = omp_get_num_threads();                                \
        T *gx = (T *)ember_base(out);                                                              \
        const T *gout = (const T *)ember_base(grad_output);                                        \
        int64_t first = rows * t / team, last = rows * (t + 1) / team;                             \
        if (vector)                                                                                \
            max_grad_tiled_2x2_avx512((float *)gx, (const float *)gout, (const float *)xs, first, last, W, OW); \
        else if (w->kh == 2 && w->kw == 2) /* constants: the loops unroll into straight-line code */ \
            max_grad_tiled_##SUFFIX(gx, gout, (const T *)xs, first, last, W, OW, 2, 2);            \
        else                                                                                       \
            max_grad_tiled_##SUFFIX(gx, gout, (const T *)xs, first, last, W, OW, w->kh, w->kw);    \
    }
        DISPATCH_FLOAT(out->dtype, MAX_GRAD_TILED(f32, float), MAX_GRAD_TILED(f64, double))
#undef MAX_GRAD_TILED
        return EMBER_OK;
    }
#define MAX_GRAD(SUFFIX, T)                                                                        \
    FOR_EACH_PLANE(out, grad_output, w, 0, T,                                                      \
                   max_grad_plane_##SUFFIX(big_plane, small_plane, (const T *)xs + i * p.H * p.W, &p, w, scratch))
    DISPATCH_FLOAT(out->dtype, MAX_GRAD(f32, float), MAX_GRAD(f64, double))
#undef MAX_GRAD
    return EMBER_OK;
}

/* avg_pool2d (grad == 0: big is x, small is out) or its gradient (grad != 0: big is out, small is
 * grad_output). */
static int avg_pool(const ember_tensor *big, const ember_tensor *small, const ember_cpu_window *w,
                    int count_include_pad, int grad) {
    if (!valid_planes(big, small, w) || w->dh != 1 || w->dw != 1) return EMBER_ERR_INVALID_ARGUMENT;
    int64_t H = big->shape[2], W = big->shape[3], OH = small->shape[2], OW = small->shape[3];
    if (tiles_exactly(w, H, W, OH, OW) && vector_2x2(w, big->dtype)) {
        int64_t rows = big->shape[0] * big->shape[1] * OH;
        if (grad)
            run_tiled_2x2(avg_grad_tiled_2x2_avx512, ember_base(big), ember_base(small), rows, W, OW);
        else
            run_tiled_2x2(avg_tiled_2x2_avx512, ember_base(small), ember_base(big), rows, W, OW);
        return EMBER_OK;
    }
#define AVG(SUFFIX, T)                                                                             \
    FOR_EACH_PLANE(big, small, w, count_include_pad, T,                                            \
                   grad ? avg_grad_plane_##SUFFIX(big_plane, small_plane, &p, w, scratch)          \
                        : avg_plane_##SUFFIX(small_plane, big_plane, &p, w, scratch))
    DISPATCH_FLOAT(big->dtype, AVG(f32, float), AVG(f64, double))
#undef AVG
    return EMBER_OK;
}

int ember_cpu_avg_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w,
                         int count_include_pad) {
    return avg_pool(x, out, w, count_include_pad, 0);
}

int ember_cpu_avg_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_cpu_window *w,
                              int count_include_pad) {
    return avg_pool(out, grad_output, w, count_include_pad, 1);
}

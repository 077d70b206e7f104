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
 * Planes (N * C of them) run in parallel; a plane's gradients accumulate on one thread, so
 * overlapping windows never race. */
#include <math.h>
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

/* Per output column: the divisor's factor along the row, and whether the window reaches padding. */
typedef struct {
    int64_t *span;
    char *padded;
} avg_columns;

static int avg_columns_init(avg_columns *c, int64_t W, int64_t OW, const ember_cpu_window *w, int incl) {
    c->span = malloc((size_t)(OW + 1) * sizeof(int64_t));
    c->padded = malloc((size_t)OW + 1);
    if (!c->span || !c->padded) return EMBER_ERR_OUT_OF_MEMORY;
    for (int64_t ox = 0; ox < OW; ox++) {
        tap_range rx = in_range(ox, W, w->kw, w->sw, w->pw, 1);
        c->span[ox] = avg_span(ox, W, w->kw, w->sw, w->pw, incl);
        c->padded[ox] = rx.last - rx.first < w->kw;
    }
    return EMBER_OK;
}

static void avg_columns_free(avg_columns *c) {
    free(c->span);
    free(c->padded);
}

/* x-like (N, C, H, W) and out-like (N, C, OH, OW) contiguous tensors of one dtype. */
static int valid_planes(const ember_tensor *big, const ember_tensor *small, const ember_cpu_window *w) {
    if (ember_check_desc(big) || ember_check_desc(small) || !ember_valid_window(w) || big->ndim != 4 || small->ndim != 4 ||
        big->dtype != small->dtype || !ember_is_contiguous(big) || !ember_is_contiguous(small))
        return 0;
    return big->shape[0] == small->shape[0] && big->shape[1] == small->shape[1];
}

#define DEFINE_POOL(SUFFIX, T)                                                                     \
    /* out row oy combines taps (ky, kx) in window order, each over the run of outputs whose tap   \
     * lies inside the input: a unit- or fixed-stride loop without bounds checks. */               \
    static void max_plane_##SUFFIX(T *restrict out, const T *restrict x, int64_t H, int64_t W,     \
                                   int64_t OH, int64_t OW, const ember_cpu_window *w) {            \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            T *o = out + oy * OW;                                                                  \
            for (int64_t ox = 0; ox < OW; ox++) o[ox] = -INFINITY;                                 \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, w->dh);                            \
            for (int64_t ky = ry.first; ky < ry.last; ky++)                                        \
                for (int64_t kx = 0; kx < w->kw; kx++) {                                           \
                    ember_run r = ember_inside_run(OW, W, kx * w->dw - w->pw, w->sw);              \
                    const T *row = x + (oy * w->sh - w->ph + ky * w->dh) * W + kx * w->dw - w->pw; \
                    for (int64_t ox = r.first; ox < r.last; ox++) {                                \
                        T v = row[ox * w->sw];                                                     \
                        o[ox] = v > o[ox] || v != v ? v : o[ox];   /* NaN stays */                 \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void max_grad_plane_##SUFFIX(T *restrict gx, const T *restrict gout, const T *restrict x, \
                                        int64_t H, int64_t W, int64_t OH, int64_t OW,              \
                                        const ember_cpu_window *w) {                               \
        memset(gx, 0, (size_t)(H * W) * sizeof(T));                                                \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, w->dh);                            \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                tap_range rx = in_range(ox, W, w->kw, w->sw, w->pw, w->dw);                        \
                /* a padded tap 0 starts the search at -inf, pointing nowhere; padding after it    \
                 * (-inf) is never strictly greater, so only the input's taps are visited */       \
                int64_t best_at = -1;                                                              \
                T best = -INFINITY;                                                                \
                for (int64_t ky = ry.first; ky < ry.last; ky++) {                                  \
                    int64_t at = (oy * w->sh - w->ph + ky * w->dh) * W + ox * w->sw - w->pw;       \
                    for (int64_t kx = rx.first; kx < rx.last; kx++) {                              \
                        T v = x[at + kx * w->dw];                                                  \
                        if ((ky == 0 && kx == 0) || v > best) {                                    \
                            best = v;                                                              \
                            best_at = at + kx * w->dw;                                             \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
                if (best_at >= 0) gx[best_at] += gout[oy * OW + ox];                               \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void avg_plane_##SUFFIX(T *restrict out, const T *restrict x, int64_t H, int64_t W,     \
                                   int64_t OH, int64_t OW, const ember_cpu_window *w, int incl,    \
                                   const avg_columns *cols) {                                      \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            T *o = out + oy * OW;                                                                  \
            for (int64_t ox = 0; ox < OW; ox++) o[ox] = (T)-0.0;   /* the sum's identity */        \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, 1);                                \
            for (int64_t ky = ry.first; ky < ry.last; ky++)                                        \
                for (int64_t kx = 0; kx < w->kw; kx++) {                                           \
                    ember_run r = ember_inside_run(OW, W, kx - w->pw, w->sw);                      \
                    const T *row = x + (oy * w->sh - w->ph + ky) * W + kx - w->pw;                 \
                    for (int64_t ox = r.first; ox < r.last; ox++) o[ox] += row[ox * w->sw];        \
                }                                                                                  \
            int64_t span_y = avg_span(oy, H, w->kh, w->sh, w->ph, incl);                           \
            int rows_padded = ry.last - ry.first < w->kh;                                          \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                /* the composite adds padding's zeros too: they only turn a -0 sum into +0 */      \
                T sum = rows_padded || cols->padded[ox] ? o[ox] + (T)0 : o[ox];                    \
                o[ox] = sum / (T)(span_y * cols->span[ox]);                                        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* grad_output / divisor, added to every tap of the window */                                  \
    static void avg_grad_plane_##SUFFIX(T *restrict gx, const T *restrict gout, int64_t H, int64_t W, \
                                        int64_t OH, int64_t OW, const ember_cpu_window *w, int incl, \
                                        const avg_columns *cols) {                                 \
        memset(gx, 0, (size_t)(H * W) * sizeof(T));                                                \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            int64_t span_y = avg_span(oy, H, w->kh, w->sh, w->ph, incl);                           \
            const T *g = gout + oy * OW;                                                           \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, 1);                                \
            for (int64_t ky = ry.first; ky < ry.last; ky++)                                        \
                for (int64_t kx = 0; kx < w->kw; kx++) {                                           \
                    ember_run r = ember_inside_run(OW, W, kx - w->pw, w->sw);                      \
                    T *row = gx + (oy * w->sh - w->ph + ky) * W + kx - w->pw;                      \
                    for (int64_t ox = r.first; ox < r.last; ox++)                                  \
                        row[ox * w->sw] += g[ox] / (T)(span_y * cols->span[ox]);                   \
                }                                                                                  \
        }                                                                                          \
    }

DEFINE_POOL(f32, float)
DEFINE_POOL(f64, double)

/* Runs BODY once per (n, c) plane, in parallel; big is the input-sized tensor, small the
 * output-sized one; T the element type. */
#define FOR_EACH_PLANE(big, small, T, BODY)                                                        \
    do {                                                                                           \
        int64_t planes = big->shape[0] * big->shape[1], H = big->shape[2], W = big->shape[3];      \
        int64_t OH = small->shape[2], OW = small->shape[3];                                        \
        T *big_base = (T *)ember_base(big), *small_base = (T *)ember_base(small);                  \
        int threads = ember_threads_for(planes * (H * W + OH * OW * w->kh * w->kw), planes);       \
        _Pragma("omp parallel for num_threads(threads) schedule(static)")                          \
        for (int64_t p = 0; p < planes; p++) {                                                     \
            T *big_plane = big_base + p * H * W, *small_plane = small_base + p * OH * OW;          \
            BODY;                                                                                  \
        }                                                                                          \
    } while (0)

#define DISPATCH_FLOAT(dtype, F32, F64)                                                            \
    switch (dtype) {                                                                               \
    case EMBER_FLOAT32: F32; break;                                                                \
    case EMBER_FLOAT64: F64; break;                                                                \
    default: return EMBER_ERR_UNSUPPORTED;                                                         \
    }

int ember_cpu_max_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w) {
    if (!valid_planes(x, out, w)) return EMBER_ERR_INVALID_ARGUMENT;
    DISPATCH_FLOAT(out->dtype,
                   FOR_EACH_PLANE(x, out, float, max_plane_f32(small_plane, big_plane, H, W, OH, OW, w)),
                   FOR_EACH_PLANE(x, out, double, max_plane_f64(small_plane, big_plane, H, W, OH, OW, w)))
    return EMBER_OK;
}

int ember_cpu_max_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                              const ember_cpu_window *w) {
    if (!valid_planes(out, grad_output, w) || !valid_planes(x, grad_output, w) || !ember_same_dims(out, x, 4))
        return EMBER_ERR_INVALID_ARGUMENT;
    const void *xs = ember_base(x);
#define MAX_GRAD(SUFFIX, T)                                                                        \
    FOR_EACH_PLANE(out, grad_output, T,                                                            \
                   max_grad_plane_##SUFFIX(big_plane, small_plane, (const T *)xs + p * H * W, H, W, OH, OW, w))
    DISPATCH_FLOAT(out->dtype, MAX_GRAD(f32, float), MAX_GRAD(f64, double))
#undef MAX_GRAD
    return EMBER_OK;
}

/* avg_pool2d (grad == 0: big is x, small is out) or its gradient (grad != 0: big is out, small is
 * grad_output). */
static int avg_pool(const ember_tensor *big, const ember_tensor *small, const ember_cpu_window *w,
                    int count_include_pad, int grad) {
    if (!valid_planes(big, small, w) || w->dh != 1 || w->dw != 1) return EMBER_ERR_INVALID_ARGUMENT;
    if (big->dtype != EMBER_FLOAT32 && big->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    avg_columns cols;
    int status = avg_columns_init(&cols, big->shape[3], small->shape[3], w, count_include_pad);
    if (status == EMBER_OK) {
#define AVG(SUFFIX, T)                                                                             \
    FOR_EACH_PLANE(big, small, T,                                                                  \
                   grad ? avg_grad_plane_##SUFFIX(big_plane, small_plane, H, W, OH, OW, w, count_include_pad, &cols) \
                        : avg_plane_##SUFFIX(small_plane, big_plane, H, W, OH, OW, w, count_include_pad, &cols))
        DISPATCH_FLOAT(big->dtype, AVG(f32, float), AVG(f64, double))
#undef AVG
    }
    avg_columns_free(&cols);
    return status;
}

int ember_cpu_avg_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w,
                         int count_include_pad) {
    return avg_pool(x, out, w, count_include_pad, 0);
}

int ember_cpu_avg_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_cpu_window *w,
                              int count_include_pad) {
    return avg_pool(out, grad_output, w, count_include_pad, 1);
}

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

static int valid_window(const ember_cpu_window *w) {
    return w && w->kh > 0 && w->kw > 0 && w->sh > 0 && w->sw > 0 && w->ph >= 0 && w->pw >= 0 && w->dh > 0 &&
           w->dw > 0;
}

/* x-like (N, C, H, W) and out-like (N, C, OH, OW) contiguous tensors of one floating dtype. */
static int valid_planes(const ember_tensor *big, const ember_tensor *small, const ember_cpu_window *w) {
    if (ember_check_desc(big) || ember_check_desc(small) || !valid_window(w) || big->ndim != 4 || small->ndim != 4 ||
        big->dtype != small->dtype || !ember_is_contiguous(big) || !ember_is_contiguous(small))
        return 0;
    return big->shape[0] == small->shape[0] && big->shape[1] == small->shape[1];
}

#define DEFINE_POOL(SUFFIX, T)                                                                     \
    static void max_plane_##SUFFIX(T *restrict out, const T *restrict x, int64_t H, int64_t W,     \
                                   int64_t OH, int64_t OW, const ember_cpu_window *w) {            \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, w->dh);                            \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                tap_range rx = in_range(ox, W, w->kw, w->sw, w->pw, w->dw);                        \
                T m = -INFINITY;                                                                   \
                for (int64_t ky = ry.first; ky < ry.last; ky++) {                                  \
                    const T *row = x + (oy * w->sh - w->ph + ky * w->dh) * W + ox * w->sw - w->pw; \
                    for (int64_t kx = rx.first; kx < rx.last; kx++) {                              \
                        T v = row[kx * w->dw];                                                     \
                        if (v > m || v != v) m = v;                                                \
                        if (m != m) goto done;   /* NaN wins the window */                         \
                    }                                                                              \
                }                                                                                  \
            done:                                                                                  \
                out[oy * OW + ox] = m;                                                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void max_grad_plane_##SUFFIX(T *restrict gx, const T *restrict gout, const T *restrict x, \
                                        int64_t H, int64_t W, int64_t OH, int64_t OW,              \
                                        const ember_cpu_window *w) {                               \
        memset(gx, 0, (size_t)(H * W) * sizeof(T));                                                \
        for (int64_t oy = 0; oy < OH; oy++)                                                        \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                int64_t y0 = oy * w->sh - w->ph, x0 = ox * w->sw - w->pw, best_at = -1;            \
                T best = 0;                                                                        \
                for (int64_t ky = 0; ky < w->kh; ky++)                                             \
                    for (int64_t kx = 0; kx < w->kw; kx++) {                                       \
                        int64_t iy = y0 + ky * w->dh, ix = x0 + kx * w->dw;                        \
                        int inside = iy >= 0 && iy < H && ix >= 0 && ix < W;                       \
                        T v = inside ? x[iy * W + ix] : (T)-INFINITY;                              \
                        if ((ky == 0 && kx == 0) || v > best) {                                    \
                            best = v;                                                              \
                            best_at = inside ? iy * W + ix : -1;                                   \
                        }                                                                          \
                    }                                                                              \
                if (best_at >= 0) gx[best_at] += gout[oy * OW + ox];                               \
            }                                                                                      \
    }                                                                                              \
                                                                                                   \
    static void avg_plane_##SUFFIX(T *restrict out, const T *restrict x, int64_t H, int64_t W,     \
                                   int64_t OH, int64_t OW, const ember_cpu_window *w, int incl) {  \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, 1);                                \
            int64_t span_y = avg_span(oy, H, w->kh, w->sh, w->ph, incl);                           \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                tap_range rx = in_range(ox, W, w->kw, w->sw, w->pw, 1);                            \
                /* -0 is the sum's identity; padding adds +0, as the composite's zero taps do */  \
                int padded = ry.last - ry.first < w->kh || rx.last - rx.first < w->kw;            \
                T sum = padded ? (T)0 : (T)-0.0;                                                   \
                for (int64_t ky = ry.first; ky < ry.last; ky++) {                                  \
                    const T *row = x + (oy * w->sh - w->ph + ky) * W + ox * w->sw - w->pw;         \
                    for (int64_t kx = rx.first; kx < rx.last; kx++) sum += row[kx];                \
                }                                                                                  \
                out[oy * OW + ox] = sum / (T)(span_y * avg_span(ox, W, w->kw, w->sw, w->pw, incl)); \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void avg_grad_plane_##SUFFIX(T *restrict gx, const T *restrict gout, int64_t H, int64_t W, \
                                        int64_t OH, int64_t OW, const ember_cpu_window *w, int incl) { \
        memset(gx, 0, (size_t)(H * W) * sizeof(T));                                                \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            tap_range ry = in_range(oy, H, w->kh, w->sh, w->ph, 1);                                \
            int64_t span_y = avg_span(oy, H, w->kh, w->sh, w->ph, incl);                           \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                tap_range rx = in_range(ox, W, w->kw, w->sw, w->pw, 1);                            \
                T share = gout[oy * OW + ox] / (T)(span_y * avg_span(ox, W, w->kw, w->sw, w->pw, incl)); \
                for (int64_t ky = ry.first; ky < ry.last; ky++) {                                  \
                    T *row = gx + (oy * w->sh - w->ph + ky) * W + ox * w->sw - w->pw;              \
                    for (int64_t kx = rx.first; kx < rx.last; kx++) row[kx] += share;             \
                }                                                                                  \
            }                                                                                      \
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
        int threads = ember_threads_for(planes * (H * W + OH * OW * w->kh * w->kw), planes);      \
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

int ember_cpu_avg_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w,
                         int count_include_pad) {
    if (!valid_planes(x, out, w) || w->dh != 1 || w->dw != 1) return EMBER_ERR_INVALID_ARGUMENT;
    DISPATCH_FLOAT(out->dtype,
                   FOR_EACH_PLANE(x, out, float,
                                  avg_plane_f32(small_plane, big_plane, H, W, OH, OW, w, count_include_pad)),
                   FOR_EACH_PLANE(x, out, double,
                                  avg_plane_f64(small_plane, big_plane, H, W, OH, OW, w, count_include_pad)))
    return EMBER_OK;
}

int ember_cpu_avg_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_cpu_window *w,
                              int count_include_pad) {
    if (!valid_planes(out, grad_output, w) || w->dh != 1 || w->dw != 1) return EMBER_ERR_INVALID_ARGUMENT;
    DISPATCH_FLOAT(out->dtype,
                   FOR_EACH_PLANE(out, grad_output, float,
                                  avg_grad_plane_f32(big_plane, small_plane, H, W, OH, OW, w, count_include_pad)),
                   FOR_EACH_PLANE(out, grad_output, double,
                                  avg_grad_plane_f64(big_plane, small_plane, H, W, OH, OW, w, count_include_pad)))
    return EMBER_OK;
}

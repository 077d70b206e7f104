/* Batch normalization (ember_core/ops/nn.toml, family norm) over contiguous (N, C, S) tensors:
 * channel c is the N rows x[n, c, 0:S].  Each channel is one OpenMP task, so its sums do not
 * depend on the thread count.  Sums run in the element type over blocks of a row (the vector
 * lanes) and in double across blocks and rows.
 *
 *   batch_norm_train:           mean; biased variance of the centred values (a second pass, so
 *                               no cancellation); out = (x - mean) * scale + bias, scale =
 *                               weight / sqrt(var + eps).  Three passes over x.
 *   batch_norm_backward_reduce: sum g and sum g * xhat, xhat = (x - mean) / sqrt(var + eps), in
 *                               one pass over g and x (the bias and weight gradients).
 *   batch_norm_input_grad:      out = scale * (g - sum_g / M - xhat * sum_gxhat / M), M = N * S,
 *                               one pass.
 * The core's composite does the same math with ~20 tensor ops and their temporaries. */
#include <math.h>
#include "common.h"

#define BLOCK 1024 /* values summed in the element type before the sum moves to double */

#define DEFINE_NORM(T, SUF)                                                                         \
    static double sum_##SUF(const T *x, int64_t len) {                                              \
        double total = 0;                                                                           \
        for (int64_t b = 0; b < len; b += BLOCK) {                                                  \
            int64_t end = ember_min64(len, b + BLOCK);                                              \
            T part = 0;                                                                             \
            _Pragma("omp simd reduction(+:part)")                                                   \
            for (int64_t j = b; j < end; j++) part += x[j];                                         \
            total += part;                                                                          \
        }                                                                                           \
        return total;                                                                               \
    }                                                                                               \
                                                                                                    \
    static double centred_squares_##SUF(const T *x, int64_t len, T mean) {                          \
        double total = 0;                                                                           \
        for (int64_t b = 0; b < len; b += BLOCK) {                                                  \
            int64_t end = ember_min64(len, b + BLOCK);                                              \
            T part = 0;                                                                             \
            _Pragma("omp simd reduction(+:part)")                                                   \
            for (int64_t j = b; j < end; j++) part += (x[j] - mean) * (x[j] - mean);                \
            total += part;                                                                          \
        }                                                                                           \
        return total;                                                                               \
    }                                                                                               \
                                                                                                    \
    static void grad_sums_##SUF(const T *g, const T *x, int64_t len, T mean, double *sg, double *sgx) { \
        for (int64_t b = 0; b < len; b += BLOCK) {                                                  \
            int64_t end = ember_min64(len, b + BLOCK);                                              \
            T pg = 0, pgx = 0;                                                                      \
            _Pragma("omp simd reduction(+:pg, pgx)")                                                \
            for (int64_t j = b; j < end; j++) {                                                     \
                pg += g[j];                                                                         \
                pgx += g[j] * (x[j] - mean);                                                        \
            }                                                                                       \
            *sg += pg, *sgx += pgx;                                                                 \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    static void train_##SUF(T *out, T *stats, const T *x, const T *w, const T *bias, int64_t N, int64_t C, \
                            int64_t S, double eps) {                                                \
        double count = (double)N * (double)S;                                                       \
        _Pragma("omp parallel for num_threads(ember_threads_for(N * C * S, C)) schedule(static)")   \
        for (int64_t c = 0; c < C; c++) {                                                           \
            double total = 0, squares = 0;                                                          \
            for (int64_t n = 0; n < N; n++) total += sum_##SUF(x + (n * C + c) * S, S);             \
            T mean = (T)(total / count);                                                            \
            for (int64_t n = 0; n < N; n++) squares += centred_squares_##SUF(x + (n * C + c) * S, S, mean); \
            T var = (T)(squares / count);                                                           \
            T scale = (T)(1.0 / sqrt((double)var + eps)), shift = bias ? bias[c] : (T)0;            \
            if (w) scale *= w[c];                                                                   \
            stats[c] = mean, stats[C + c] = var;                                                    \
            for (int64_t n = 0; n < N; n++) {                                                       \
                const T *row = x + (n * C + c) * S;                                                 \
                T *o = out + (n * C + c) * S;                                                       \
                _Pragma("omp simd")                                                                 \
                for (int64_t j = 0; j < S; j++) o[j] = (row[j] - mean) * scale + shift;             \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    static void reduce_##SUF(T *out, const T *g, const T *x, const T *stats, int64_t N, int64_t C, int64_t S, \
                             double eps) {                                                          \
        _Pragma("omp parallel for num_threads(ember_threads_for(N * C * S, C)) schedule(static)")   \
        for (int64_t c = 0; c < C; c++) {                                                           \
            double sg = 0, sgx = 0;                                                                 \
            for (int64_t n = 0; n < N; n++)                                                         \
                grad_sums_##SUF(g + (n * C + c) * S, x + (n * C + c) * S, S, stats[c], &sg, &sgx);  \
            out[c] = (T)sg, out[C + c] = (T)(sgx / sqrt((double)stats[C + c] + eps));               \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    static void input_grad_##SUF(T *out, const T *g, const T *x, const T *stats, const T *sums, const T *w, \
                                 int64_t N, int64_t C, int64_t S, double eps) {                     \
        double count = (double)N * (double)S;                                                       \
        _Pragma("omp parallel for num_threads(ember_threads_for(N * C * S, C)) schedule(static)")   \
        for (int64_t c = 0; c < C; c++) {                                                           \
            double invstd = 1.0 / sqrt((double)stats[C + c] + eps);                                 \
            double scale = w ? invstd * (double)w[c] : invstd;                                      \
            T mean = stats[c], a = (T)scale, k = (T)(-scale * (double)sums[c] / count);             \
            T b = (T)(-scale * invstd * (double)sums[C + c] / count);                               \
            for (int64_t n = 0; n < N; n++) {                                                       \
                const T *gr = g + (n * C + c) * S, *xr = x + (n * C + c) * S;                       \
                T *o = out + (n * C + c) * S;                                                       \
                _Pragma("omp simd")                                                                 \
                for (int64_t j = 0; j < S; j++) o[j] = a * gr[j] + b * (xr[j] - mean) + k;          \
            }                                                                                       \
        }                                                                                           \
    }

DEFINE_NORM(float, f32)
DEFINE_NORM(double, f64)

/* t is a contiguous tensor of x's dtype and the given shape (NULL passes when optional). */
static int fits(const ember_tensor *t, int dtype, int ndim, int64_t d0, int64_t d1, int64_t d2, int optional) {
    if (!t) return optional;
    if (ember_check_desc(t) || t->dtype != dtype || t->ndim != ndim || !ember_is_contiguous(t)) return 0;
    int64_t dims[3] = {d0, d1, d2};
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != dims[d]) return 0;
    return 1;
}

/* x is (N, C, S), float32 or float64, contiguous; the others follow from it. */
static ember_status check_x(const ember_tensor *x) {
    if (ember_check_desc(x) || x->ndim != 3 || !ember_is_contiguous(x)) return EMBER_ERR_INVALID_ARGUMENT;
    return x->dtype == EMBER_FLOAT32 || x->dtype == EMBER_FLOAT64 ? EMBER_OK : EMBER_ERR_UNSUPPORTED;
}

#define NCS(x) (x)->shape[0], (x)->shape[1], (x)->shape[2]
#define BASE(t, T) ((t) ? (T *)ember_base(t) : NULL)

int ember_cpu_batch_norm_train(const ember_tensor *out, const ember_tensor *stats, const ember_tensor *x,
                               const ember_tensor *weight, const ember_tensor *bias, double eps) {
    ember_status status = check_x(x);
    if (status) return status;
    int dt = x->dtype;
    int64_t c = x->shape[1];
    if (!fits(out, dt, 3, NCS(x), 0) || !fits(stats, dt, 2, 2, c, 0, 0) || !fits(weight, dt, 1, c, 0, 0, 1) ||
        !fits(bias, dt, 1, c, 0, 0, 1) || x->shape[0] * x->shape[2] < 1 || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (dt == EMBER_FLOAT32)
        train_f32(BASE(out, float), BASE(stats, float), BASE(x, const float), BASE(weight, const float),
                  BASE(bias, const float), NCS(x), eps);
    else
        train_f64(BASE(out, double), BASE(stats, double), BASE(x, const double), BASE(weight, const double),
                  BASE(bias, const double), NCS(x), eps);
    return EMBER_OK;
}

int ember_cpu_batch_norm_backward_reduce(const ember_tensor *out, const ember_tensor *grad_output,
                                         const ember_tensor *x, const ember_tensor *stats, double eps) {
    ember_status status = check_x(x);
    if (status) return status;
    int dt = x->dtype;
    int64_t c = x->shape[1];
    if (!fits(out, dt, 2, 2, c, 0, 0) || !fits(grad_output, dt, 3, NCS(x), 0) || !fits(stats, dt, 2, 2, c, 0, 0) ||
        !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (dt == EMBER_FLOAT32)
        reduce_f32(BASE(out, float), BASE(grad_output, const float), BASE(x, const float), BASE(stats, const float),
                   NCS(x), eps);
    else
        reduce_f64(BASE(out, double), BASE(grad_output, const double), BASE(x, const double),
                   BASE(stats, const double), NCS(x), eps);
    return EMBER_OK;
}

int ember_cpu_batch_norm_input_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                                    const ember_tensor *stats, const ember_tensor *sums, const ember_tensor *weight,
                                    double eps) {
    ember_status status = check_x(x);
    if (status) return status;
    int dt = x->dtype;
    int64_t c = x->shape[1];
    if (!fits(out, dt, 3, NCS(x), 0) || !fits(grad_output, dt, 3, NCS(x), 0) || !fits(stats, dt, 2, 2, c, 0, 0) ||
        !fits(sums, dt, 2, 2, c, 0, 0) || !fits(weight, dt, 1, c, 0, 0, 1) || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (dt == EMBER_FLOAT32)
        input_grad_f32(BASE(out, float), BASE(grad_output, const float), BASE(x, const float),
                       BASE(stats, const float), BASE(sums, const float), BASE(weight, const float), NCS(x), eps);
    else
        input_grad_f64(BASE(out, double), BASE(grad_output, const double), BASE(x, const double),
                       BASE(stats, const double), BASE(sums, const double), BASE(weight, const double), NCS(x), eps);
    return EMBER_OK;
}

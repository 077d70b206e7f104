/* Batch, layer and group normalization (ember_core/ops/nn.toml, family norm).
 *
 * Batch normalization works on contiguous (N, C, S) tensors:
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
 *
 * Layer normalization works on M contiguous rows of D values (the normalized dims flattened).
 * Each row's statistics take two passes over it while it sits in cache; backward recomputes them
 * rather than keeping them.  The forward runs one OpenMP task per row; backward one per block of
 * rows (task_rows), whose weight and bias gradient terms are summed in the block, then the
 * blocks' sums added in order, so those sums do not depend on the thread count either.
 *   layer_norm:             out = (x - mean) / sqrt(var + eps) * weight + bias.
 *   layer_norm_input_grad:  with g = grad * weight, out = invstd * (g - mean(g) - xhat * mean(g * xhat)),
 *                           and, when affine (2, D) is given, layer_norm_affine_grad's result
 *                           into it from the same pass over grad and x.
 *   layer_norm_affine_grad: out (2, D): the column sums of grad * xhat and of grad.
 *
 * Group normalization works on contiguous (N, C, S) tensors whose C channels form G groups of K =
 * C / G: sample n's group g is the contiguous row x[n, g*K:(g+1)*K, :] of D = K * S values, whose
 * statistics are layer_norm's.  One OpenMP task per row, forward and backward.
 *   group_norm:             out = (x - mean) * (invstd * weight[c]) + bias[c], one pass after the
 *                           statistics' two (PyTorch's map; the core's composite took three).
 *   group_norm_input_grad:  per channel c of a row, sg[c] = sum of grad and sgx[c] = sum of grad *
 *                           xhat; then with gw = grad * weight, mean(gw) = sum_c weight[c] sg[c] / D and
 *                           mean(gw * xhat) = sum_c weight[c] sgx[c] / D, so
 *                           out = invstd * (gw - mean(gw) - xhat * mean(gw * xhat)) is a per-channel
 *                           a * grad + b * (x - mean) + k.  When affine (2, C) is given, the sums over
 *                           samples of sgx and sg (weight's and bias's gradients), in sample order.
 *   group_norm_affine_grad: those alone.
 * The core's composites do the same math with ~10-20 tensor ops and their temporaries. */
#include <math.h>
#include "common.h"

#define BLOCK 1024 /* values summed in the element type before the sum moves to double */
#define LANES 64   /* independent partial sums per block: a vector add's latency hidden behind four */

/* s1 += the sum of e1 (and, when the literal `two` is 1, s2 += the sum of e2) over j in [0, len):
 * LANES partial sums in the element type within each BLOCK, in double across blocks.  e1 and e2
 * are expressions in j. */
#define BLOCKED_SUMS(T, len, two, s1, e1, s2, e2)                                                   \
    for (int64_t b_ = 0; b_ < (len); b_ += BLOCK) {                                                 \
        int64_t end_ = ember_min64((len), b_ + BLOCK), j_ = b_;                                     \
        T a1_[LANES] = {0}, a2_[LANES] = {0}, p1_ = 0, p2_ = 0;                                     \
        for (; j_ + LANES <= end_; j_ += LANES) {                                                   \
            _Pragma("omp simd")                                                                     \
            for (int64_t l_ = 0; l_ < LANES; l_++) {                                                \
                int64_t j = j_ + l_;                                                                \
                a1_[l_] += (e1);                                                                    \
                if (two) a2_[l_] += (e2);                                                           \
            }                                                                                       \
        }                                                                                           \
        _Pragma("omp simd reduction(+:p1_, p2_)")                                                   \
        for (int64_t l_ = 0; l_ < LANES; l_++) {                                                    \
            p1_ += a1_[l_];                                                                         \
            if (two) p2_ += a2_[l_];                                                                \
        }                                                                                           \
        for (int64_t j = j_; j < end_; j++) {                                                       \
            p1_ += (e1);                                                                            \
            if (two) p2_ += (e2);                                                                   \
        }                                                                                           \
        (s1) += p1_;                                                                                \
        if (two) (s2) += p2_;                                                                       \
    }

#define DEFINE_NORM(T, SUF)                                                                         \
    static double sum_##SUF(const T *x, int64_t len) {                                              \
        double total = 0, unused = 0;                                                               \
        BLOCKED_SUMS(T, len, 0, total, x[j], unused, 0);                                            \
        return total;                                                                               \
    }                                                                                               \
                                                                                                    \
    static double centred_squares_##SUF(const T *x, int64_t len, T mean) {                          \
        double total = 0, unused = 0;                                                               \
        BLOCKED_SUMS(T, len, 0, total, (x[j] - mean) * (x[j] - mean), unused, 0);                   \
        return total;                                                                               \
    }                                                                                               \
                                                                                                    \
    static void grad_sums_##SUF(const T *g, const T *x, int64_t len, T mean, double *sg, double *sgx) { \
        BLOCKED_SUMS(T, len, 1, *sg, g[j], *sgx, g[j] * (x[j] - mean));                             \
    }                                                                                               \
                                                                                                    \
    static void train_##SUF(void *out_, void *stats_, const void *x_, const void *w_, const void *bias_, \
                            int64_t N, int64_t C, int64_t S, double eps) {                          \
        T *out = out_, *stats = stats_;                                                             \
        const T *x = x_, *w = w_, *bias = bias_;                                                    \
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
    static void reduce_##SUF(void *out_, const void *g_, const void *x_, const void *stats_, int64_t N, int64_t C, \
                             int64_t S, double eps) {                                               \
        T *out = out_;                                                                              \
        const T *g = g_, *x = x_, *stats = stats_;                                                  \
        _Pragma("omp parallel for num_threads(ember_threads_for(N * C * S, C)) schedule(static)")   \
        for (int64_t c = 0; c < C; c++) {                                                           \
            double sg = 0, sgx = 0;                                                                 \
            for (int64_t n = 0; n < N; n++)                                                         \
                grad_sums_##SUF(g + (n * C + c) * S, x + (n * C + c) * S, S, stats[c], &sg, &sgx);  \
            out[c] = (T)sg, out[C + c] = (T)(sgx / sqrt((double)stats[C + c] + eps));               \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    static void input_grad_##SUF(void *out_, const void *g_, const void *x_, const void *stats_, const void *sums_, \
                                 const void *w_, int64_t N, int64_t C, int64_t S, double eps) {     \
        T *out = out_;                                                                              \
        const T *g = g_, *x = x_, *stats = stats_, *sums = sums_, *w = w_;                          \
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

#define LN_COLUMNS 256 /* columns of one task that sums the backward tasks' partial sums, in double */

/* Rows of one backward task, whose weight and bias gradient terms are summed in the element type:
 * a function of M alone (so the sums do not depend on the thread count), at most 128 rows, and
 * at least 32 tasks when there are 32 rows (every thread busy on short inputs). */
static int64_t task_rows(int64_t M) { return ember_max64(1, ember_min64(128, M / 32)); }

#define GW(j) (w ? gr[j] * w[j] : gr[j]) /* grad * weight, in input_grad_row */

#define DEFINE_LAYER_NORM(T, SUF)                                                                   \
    static void row_stats_##SUF(const T *x, int64_t D, double eps, T *mean, T *invstd) {            \
        *mean = (T)(sum_##SUF(x, D) / (double)D);                                                   \
        *invstd = (T)(1.0 / sqrt(centred_squares_##SUF(x, D, *mean) / (double)D + eps));            \
    }                                                                                               \
                                                                                                    \
    static void layer_norm_##SUF(void *out_, const void *x_, const void *w_, const void *b_, int64_t M, int64_t D, \
                                 double eps) {                                                      \
        T *out = out_;                                                                              \
        const T *x = x_, *w = w_, *b = b_;                                                          \
        _Pragma("omp parallel for num_threads(ember_threads_for(M * D, M)) schedule(static)")       \
        for (int64_t i = 0; i < M; i++) {                                                           \
            const T *row = x + i * D;                                                               \
            T *o = out + i * D, mean, invstd;                                                       \
            row_stats_##SUF(row, D, eps, &mean, &invstd);                                           \
            _Pragma("omp simd")                                                                     \
            for (int64_t j = 0; j < D; j++) { /* w and b tests hoisted: gcc unswitches the loop */  \
                T v = (row[j] - mean) * invstd;                                                     \
                if (w) v *= w[j];                                                                   \
                o[j] = b ? v + b[j] : v;                                                            \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    static inline __attribute__((always_inline)) void input_grad_row_##SUF(                        \
        T *restrict o, const T *restrict gr, const T *restrict w, const T *restrict row, int64_t D,  \
        T mean, T invstd) {                                                                         \
        double sg = 0, sgx = 0;                                                                     \
        BLOCKED_SUMS(T, D, 1, sg, GW(j), sgx, GW(j) * (row[j] - mean));                             \
        T mg = (T)(sg / (double)D), mgx = (T)(sgx * (double)invstd / (double)D);                    \
        _Pragma("omp simd")                                                                         \
        for (int64_t j = 0; j < D; j++) o[j] = invstd * (GW(j) - mg - (row[j] - mean) * invstd * mgx); \
    }                                                                                               \
                                                                                                    \
    /* One row's terms of the weight and bias gradients, added to pw and pb. */                    \
    static inline __attribute__((always_inline)) void affine_row_##SUF(                            \
        T *restrict pw, T *restrict pb, const T *restrict gr, const T *restrict row, int64_t D, T mean, T invstd) { \
        _Pragma("omp simd")                                                                         \
        for (int64_t j = 0; j < D; j++) pw[j] += gr[j] * ((row[j] - mean) * invstd), pb[j] += gr[j]; \
    }                                                                                               \
                                                                                                    \
    /* affine (2, D) = the sums over tasks of partial (tasks, 2, D), in task order, in double. */   \
    static void add_partials_##SUF(T *affine, const T *partial, int64_t tasks, int64_t D) {         \
        int64_t blocks = (D + LN_COLUMNS - 1) / LN_COLUMNS;                                         \
        _Pragma("omp parallel for num_threads(ember_threads_for(tasks * D, blocks)) schedule(static)") \
        for (int64_t t = 0; t < blocks; t++) {                                                      \
            int64_t j0 = t * LN_COLUMNS, n = ember_min64(LN_COLUMNS, D - j0);                       \
            double dw[LN_COLUMNS] = {0}, db[LN_COLUMNS] = {0};                                      \
            for (int64_t c = 0; c < tasks; c++) {                                                   \
                const T *pw = partial + c * 2 * D + j0, *pb = pw + D;                               \
                _Pragma("omp simd")                                                                 \
                for (int64_t j = 0; j < n; j++) dw[j] += pw[j], db[j] += pb[j];                     \
            }                                                                                       \
            for (int64_t j = 0; j < n; j++) affine[j0 + j] = (T)dw[j], affine[D + j0 + j] = (T)db[j]; \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    /* layer_norm's gradients: the x-gradient into out and the weight and bias gradients into     \
     * affine, either may be NULL; in one pass over grad and x when both are wanted. */            \
    static int layer_norm_backward_##SUF(void *out_, void *affine_, const void *g_, const void *x_, const void *w_, \
                                         int64_t M, int64_t D, double eps) {                        \
        T *out = out_, *affine = affine_, *partial = NULL;                                          \
        const T *g = g_, *x = x_, *w = w_;                                                          \
        int64_t rows = task_rows(M), tasks = (M + rows - 1) / rows;                                 \
        if (affine && !(partial = ember_cpu_alloc(ember_max64(tasks, 1) * 2 * D * (int64_t)sizeof(T)))) \
            return EMBER_ERR_OUT_OF_MEMORY;                                                         \
        _Pragma("omp parallel for num_threads(ember_threads_for(M * D, tasks)) schedule(static)")   \
        for (int64_t t = 0; t < tasks; t++) {                                                       \
            T *pw = partial ? partial + t * 2 * D : NULL, *pb = pw ? pw + D : NULL;                 \
            if (pw) memset(pw, 0, (size_t)(2 * D) * sizeof(T));                                     \
            for (int64_t i = t * rows; i < ember_min64(M, (t + 1) * rows); i++) {                   \
                const T *row = x + i * D, *gr = g + i * D;                                          \
                T *o = out ? out + i * D : NULL, mean, invstd;                                      \
                row_stats_##SUF(row, D, eps, &mean, &invstd);                                       \
                /* grad * weight recomputed where needed: writing it to o first would make every    \
                 * later load of x wait on o's stores at the same page offset (4K aliasing) */      \
                if (pw) affine_row_##SUF(pw, pb, gr, row, D, mean, invstd);                         \
                if (o && w) input_grad_row_##SUF(o, gr, w, row, D, mean, invstd);                   \
                else if (o) input_grad_row_##SUF(o, gr, NULL, row, D, mean, invstd); /* w folds away */ \
            }                                                                                       \
        }                                                                                           \
        if (affine) add_partials_##SUF(affine, partial, tasks, D);                                  \
        ember_cpu_free(partial);                                                                    \
        return EMBER_OK;                                                                            \
    }

#define DEFINE_GROUP_NORM(T, SUF)                                                                   \
    static void group_norm_##SUF(void *out_, const void *x_, const void *w_, const void *b_, int64_t N, int64_t C, \
                                 int64_t S, int64_t G, double eps) {                                \
        T *out = out_;                                                                              \
        const T *x = x_, *w = w_, *b = b_;                                                          \
        int64_t K = C / G, D = K * S;                                                               \
        _Pragma("omp parallel for num_threads(ember_threads_for(N * C * S, N * G)) schedule(static)") \
        for (int64_t r = 0; r < N * G; r++) {                                                       \
            const T *row = x + r * D;                                                               \
            T *o = out + r * D, mean, invstd;                                                       \
            row_stats_##SUF(row, D, eps, &mean, &invstd);                                           \
            for (int64_t k = 0, c = r % G * K; k < K; k++, c++) {                                   \
                T scale = w ? invstd * w[c] : invstd, shift = b ? b[c] : (T)0;                      \
                _Pragma("omp simd")                                                                 \
                for (int64_t j = k * S; j < (k + 1) * S; j++) o[j] = (row[j] - mean) * scale + shift; \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    /* group_norm's gradients: the x-gradient into out and the weight and bias gradients into     \
     * affine, either may be NULL.  sums (N, 2, C) holds each row's per-channel sums of grad * xhat \
     * and grad, which the affine gradients add up over samples. */                               \
    static int group_norm_backward_##SUF(void *out_, void *affine_, const void *g_, const void *x_, const void *w_, \
                                         int64_t N, int64_t C, int64_t S, int64_t G, double eps) {  \
        T *out = out_, *affine = affine_;                                                           \
        const T *g = g_, *x = x_, *w = w_;                                                          \
        int64_t K = C / G, D = K * S;                                                               \
        double *sums = ember_cpu_alloc(ember_max64(1, N * 2 * C) * (int64_t)sizeof(double));        \
        if (!sums) return EMBER_ERR_OUT_OF_MEMORY;                                                  \
        _Pragma("omp parallel for num_threads(ember_threads_for(N * C * S, N * G)) schedule(static)") \
        for (int64_t r = 0; r < N * G; r++) {                                                       \
            int64_t c0 = r % G * K;                                                                 \
            const T *row = x + r * D, *gr = g + r * D;                                              \
            double *sgx = sums + r / G * 2 * C + c0, *sg = sgx + C, wg = 0, wgx = 0;                \
            T mean, invstd;                                                                         \
            row_stats_##SUF(row, D, eps, &mean, &invstd);                                           \
            for (int64_t k = 0; k < K; k++) {                                                       \
                sg[k] = 0, sgx[k] = 0;                                                              \
                grad_sums_##SUF(gr + k * S, row + k * S, S, mean, &sg[k], &sgx[k]);                 \
                sgx[k] *= (double)invstd;                                                           \
                double wk = w ? (double)w[c0 + k] : 1.0;                                            \
                wg += wk * sg[k], wgx += wk * sgx[k];                                               \
            }                                                                                       \
            if (!out) continue;                                                                     \
            T *o = out + r * D, b = (T)(-(double)invstd * (double)invstd * wgx / (double)D);        \
            T shift = (T)(-(double)invstd * wg / (double)D);                                        \
            for (int64_t k = 0; k < K; k++) {                                                       \
                T a = w ? invstd * w[c0 + k] : invstd;                                              \
                _Pragma("omp simd")                                                                 \
                for (int64_t j = k * S; j < (k + 1) * S; j++) o[j] = a * gr[j] + b * (row[j] - mean) + shift; \
            }                                                                                       \
        }                                                                                           \
        for (int64_t c = 0; affine && c < C; c++) {                                                 \
            double dw = 0, db = 0;                                                                  \
            for (int64_t n = 0; n < N; n++) dw += sums[n * 2 * C + c], db += sums[n * 2 * C + C + c]; \
            affine[c] = (T)dw, affine[C + c] = (T)db;                                               \
        }                                                                                           \
        ember_cpu_free(sums);                                                                       \
        return EMBER_OK;                                                                            \
    }

DEFINE_NORM(float, f32)
DEFINE_NORM(double, f64)
DEFINE_LAYER_NORM(float, f32)
DEFINE_LAYER_NORM(double, f64)
DEFINE_GROUP_NORM(float, f32)
DEFINE_GROUP_NORM(double, f64)

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
#define DATA(t) ((t) ? (void *)ember_base(t) : NULL)
#define BY_DTYPE(dt, f) ((dt) == EMBER_FLOAT32 ? f##_f32 : f##_f64)   /* the kernel's instance for dt */

int ember_cpu_batch_norm_train(const ember_tensor *out, const ember_tensor *stats, const ember_tensor *x,
                               const ember_tensor *weight, const ember_tensor *bias, double eps) {
    ember_status status = check_x(x);
    if (status) return status;
    int dt = x->dtype;
    int64_t c = x->shape[1];
    if (!fits(out, dt, 3, NCS(x), 0) || !fits(stats, dt, 2, 2, c, 0, 0) || !fits(weight, dt, 1, c, 0, 0, 1) ||
        !fits(bias, dt, 1, c, 0, 0, 1) || x->shape[0] * x->shape[2] < 1 || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    BY_DTYPE(dt, train)(DATA(out), DATA(stats), DATA(x), DATA(weight), DATA(bias), NCS(x), eps);
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
    BY_DTYPE(dt, reduce)(DATA(out), DATA(grad_output), DATA(x), DATA(stats), NCS(x), eps);
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
    BY_DTYPE(dt, input_grad)(DATA(out), DATA(grad_output), DATA(x), DATA(stats), DATA(sums), DATA(weight), NCS(x),
                             eps);
    return EMBER_OK;
}

/* x is (M, D) rows, float32 or float64, contiguous. */
static ember_status check_rows(const ember_tensor *x) {
    if (ember_check_desc(x) || x->ndim != 2 || !ember_is_contiguous(x)) return EMBER_ERR_INVALID_ARGUMENT;
    return x->dtype == EMBER_FLOAT32 || x->dtype == EMBER_FLOAT64 ? EMBER_OK : EMBER_ERR_UNSUPPORTED;
}

#define MD(x) (x)->shape[0], (x)->shape[1]

int ember_cpu_layer_norm(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, double eps) {
    ember_status status = check_rows(x);
    if (status) return status;
    int dt = x->dtype;
    int64_t d = x->shape[1];
    if (!fits(out, dt, 2, MD(x), 0, 0) || !fits(weight, dt, 1, d, 0, 0, 1) || !fits(bias, dt, 1, d, 0, 0, 1) ||
        !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    BY_DTYPE(dt, layer_norm)(DATA(out), DATA(x), DATA(weight), DATA(bias), MD(x), eps);
    return EMBER_OK;
}

int ember_cpu_layer_norm_input_grad(const ember_tensor *out, const ember_tensor *affine,
                                    const ember_tensor *grad_output, const ember_tensor *x, const ember_tensor *weight,
                                    double eps) {
    ember_status status = check_rows(x);
    if (status) return status;
    int dt = x->dtype;
    int64_t d = x->shape[1];
    if (!fits(out, dt, 2, MD(x), 0, 0) || !fits(affine, dt, 2, 2, d, 0, 1) || !fits(grad_output, dt, 2, MD(x), 0, 0) ||
        !fits(weight, dt, 1, d, 0, 0, 1) || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    return BY_DTYPE(dt, layer_norm_backward)(DATA(out), DATA(affine), DATA(grad_output), DATA(x), DATA(weight), MD(x),
                                             eps);
}

int ember_cpu_layer_norm_affine_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                                     double eps) {
    ember_status status = check_rows(x);
    if (status) return status;
    int dt = x->dtype;
    if (!fits(out, dt, 2, 2, x->shape[1], 0, 0) || !fits(grad_output, dt, 2, MD(x), 0, 0) || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    return BY_DTYPE(dt, layer_norm_backward)(NULL, DATA(out), DATA(grad_output), DATA(x), NULL, MD(x), eps);
}

/* x is (N, C, S) as check_x asks, its C channels in groups of C / groups. */
static ember_status check_groups(const ember_tensor *x, int64_t groups) {
    ember_status status = check_x(x);
    if (status) return status;
    return groups >= 1 && x->shape[1] % groups == 0 ? EMBER_OK : EMBER_ERR_INVALID_ARGUMENT;
}

int ember_cpu_group_norm(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, int64_t num_groups, double eps) {
    ember_status status = check_groups(x, num_groups);
    if (status) return status;
    int dt = x->dtype;
    int64_t c = x->shape[1];
    if (!fits(out, dt, 3, NCS(x), 0) || !fits(weight, dt, 1, c, 0, 0, 1) || !fits(bias, dt, 1, c, 0, 0, 1) ||
        !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    BY_DTYPE(dt, group_norm)(DATA(out), DATA(x), DATA(weight), DATA(bias), NCS(x), num_groups, eps);
    return EMBER_OK;
}

int ember_cpu_group_norm_input_grad(const ember_tensor *out, const ember_tensor *affine,
                                    const ember_tensor *grad_output, const ember_tensor *x, const ember_tensor *weight,
                                    int64_t num_groups, double eps) {
    ember_status status = check_groups(x, num_groups);
    if (status) return status;
    int dt = x->dtype;
    int64_t c = x->shape[1];
    if (!fits(out, dt, 3, NCS(x), 0) || !fits(affine, dt, 2, 2, c, 0, 1) || !fits(grad_output, dt, 3, NCS(x), 0) ||
        !fits(weight, dt, 1, c, 0, 0, 1) || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    return BY_DTYPE(dt, group_norm_backward)(DATA(out), DATA(affine), DATA(grad_output), DATA(x), DATA(weight), NCS(x),
                                             num_groups, eps);
}

int ember_cpu_group_norm_affine_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                                     int64_t num_groups, double eps) {
    ember_status status = check_groups(x, num_groups);
    if (status) return status;
    int dt = x->dtype;
    if (!fits(out, dt, 2, 2, x->shape[1], 0, 0) || !fits(grad_output, dt, 3, NCS(x), 0) || !(eps >= 0))
        return EMBER_ERR_INVALID_ARGUMENT;
    return BY_DTYPE(dt, group_norm_backward)(NULL, DATA(out), DATA(grad_output), DATA(x), NULL, NCS(x), num_groups,
                                             eps);
}

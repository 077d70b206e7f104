/* nll_loss and its gradient over (N, C) log-probabilities and int64 class targets: one pass over
 * the rows instead of the core composite's dozen ops (a one-hot comparison, products, sums).
 *
 * Row i with target t counts unless t == ignore_index.  With label smoothing s and class weights
 * w (1 without), its loss is  -((1 - s) * w[t] * lp[i, t] + s / C * sum_c w[c] * lp[i, c]),  and
 * the 'mean' divides the total by the sum of w[t] over the rows that count (0 / 0 = NaN when none
 * does, as PyTorch).  The gradient with respect to lp[i, c] is  -g * ((1 - s) * w[t] * [c == t]
 * + s / C * w[c])  with g the row's grad_output (divided by that sum for 'mean'); ignored rows get
 * zeros.  Sums accumulate in double.
 *
 * The core has checked every target; each is checked again before any row is read. */
#include "common.h"

static ember_status check_targets(const int64_t *target, int64_t n, int64_t classes, int64_t ignore_index) {
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ignore_index && (target[i] < 0 || target[i] >= classes)) return EMBER_ERR_INDEX;
    return EMBER_OK;
}

#define DEFINE_NLL(T, SUFFIX)                                                                       \
    static double divisor_##SUFFIX(const int64_t *target, const T *w, int64_t n, int64_t ignore) {  \
        double total = 0;                                                                           \
        for (int64_t i = 0; i < n; i++)                                                             \
            if (target[i] != ignore) total += w ? (double)w[target[i]] : 1.0;                       \
        return total;                                                                               \
    }                                                                                               \
                                                                                                    \
    static void nll_##SUFFIX(T *out, const T *lp, const int64_t *target, const T *w, int64_t n,     \
                             int64_t c, int64_t ignore, int reduction, double s) {                  \
        double total = 0;                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                           \
            int64_t t = target[i];                                                                  \
            double loss = 0;                                                                        \
            if (t != ignore) {                                                                      \
                const T *row = lp + i * c;                                                          \
                loss = -(1 - s) * (w ? (double)w[t] : 1.0) * row[t];                                \
                if (s != 0) {                                                                       \
                    double spread = 0;                                                              \
                    for (int64_t k = 0; k < c; k++) spread += (w ? (double)w[k] : 1.0) * row[k];    \
                    loss -= s / (double)c * spread;                                                 \
                }                                                                                   \
            }                                                                                       \
            if (reduction == EMBER_CPU_REDUCTION_NONE) out[i] = (T)loss;                            \
            else total += loss;                                                                     \
        }                                                                                           \
        if (reduction == EMBER_CPU_REDUCTION_SUM) *out = (T)total;                                  \
        else if (reduction == EMBER_CPU_REDUCTION_MEAN) *out = (T)(total / divisor_##SUFFIX(target, w, n, ignore)); \
    }                                                                                               \
                                                                                                    \
    static void nll_grad_##SUFFIX(T *out, const T *grad, const int64_t *target, const T *w,        \
                                  int64_t n, int64_t c, int64_t ignore, int reduction, double s) {  \
        double scale = reduction == EMBER_CPU_REDUCTION_NONE ? 0.0 : (double)grad[0];               \
        if (reduction == EMBER_CPU_REDUCTION_MEAN) scale /= divisor_##SUFFIX(target, w, n, ignore); \
        for (int64_t i = 0; i < n; i++) {                                                           \
            int64_t t = target[i];                                                                  \
            double g = reduction == EMBER_CPU_REDUCTION_NONE ? (double)grad[i] : scale;             \
            T *row = out + i * c;                                                                   \
            if (t == ignore) {                                                                      \
                for (int64_t k = 0; k < c; k++) row[k] = 0;                                         \
                continue;                                                                           \
            }                                                                                       \
            double spread = -g * s / (double)c;                                                     \
            for (int64_t k = 0; k < c; k++) row[k] = (T)(spread * (w ? (double)w[k] : 1.0));        \
            row[t] = (T)(row[t] - g * (1 - s) * (w ? (double)w[t] : 1.0));                          \
        }                                                                                           \
    }

DEFINE_NLL(float, f32)
DEFINE_NLL(double, f64)

/* The checks both entry points share: `rows_of` (log_probs or the gradient's out) is (N, C),
 * target (N,) int64, weight NULL or (C,), all contiguous, floating operands of one dtype. */
static ember_status check_loss_args(const ember_tensor *rows_of, const ember_tensor *target,
                                    const ember_tensor *weight, int reduction) {
    if (ember_check_desc(rows_of) || ember_check_desc(target) || (weight && ember_check_desc(weight)) ||
        rows_of->ndim != 2 || target->ndim != 1 || target->dtype != EMBER_INT64 ||
        target->shape[0] != rows_of->shape[0] || !ember_is_contiguous(rows_of) || !ember_is_contiguous(target) ||
        (weight && (weight->ndim != 1 || weight->shape[0] != rows_of->shape[1] || weight->dtype != rows_of->dtype ||
                    !ember_is_contiguous(weight))) ||
        reduction < EMBER_CPU_REDUCTION_NONE || reduction > EMBER_CPU_REDUCTION_SUM)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (rows_of->dtype != EMBER_FLOAT32 && rows_of->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    return EMBER_OK;
}

/* The per-row tensor (out of 'none', grad_output of 'none') is (N,), otherwise 0-d. */
static int reduced_shape_ok(const ember_tensor *t, int64_t n, int reduction) {
    return reduction == EMBER_CPU_REDUCTION_NONE ? t->ndim == 1 && t->shape[0] == n : t->ndim == 0;
}

int ember_cpu_nll_loss(const ember_tensor *out, const ember_tensor *log_probs, const ember_tensor *target,
                       const ember_tensor *weight, int64_t ignore_index, int reduction, double smoothing) {
    ember_status status = check_loss_args(log_probs, target, weight, reduction);
    if (status) return status;
    int64_t n = log_probs->shape[0], c = log_probs->shape[1];
    if (ember_check_desc(out) || out->dtype != log_probs->dtype || !reduced_shape_ok(out, n, reduction) ||
        !ember_is_contiguous(out))
        return EMBER_ERR_INVALID_ARGUMENT;
    const int64_t *tg = (const int64_t *)ember_base(target);
    if ((status = check_targets(tg, n, c, ignore_index))) return status;
    const void *w = weight ? ember_base(weight) : NULL;
    if (log_probs->dtype == EMBER_FLOAT32)
        nll_f32((float *)ember_base(out), (const float *)ember_base(log_probs), tg, w, n, c, ignore_index, reduction,
                smoothing);
    else
        nll_f64((double *)ember_base(out), (const double *)ember_base(log_probs), tg, w, n, c, ignore_index,
                reduction, smoothing);
    return EMBER_OK;
}

int ember_cpu_nll_loss_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *target,
                            const ember_tensor *weight, int64_t ignore_index, int reduction, double smoothing) {
    ember_status status = check_loss_args(out, target, weight, reduction);
    if (status) return status;
    int64_t n = out->shape[0], c = out->shape[1];
    if (ember_check_desc(grad_output) || grad_output->dtype != out->dtype ||
        !reduced_shape_ok(grad_output, n, reduction) || !ember_is_contiguous(grad_output))
        return EMBER_ERR_INVALID_ARGUMENT;
    const int64_t *tg = (const int64_t *)ember_base(target);
    if ((status = check_targets(tg, n, c, ignore_index))) return status;
    const void *w = weight ? ember_base(weight) : NULL;
    if (out->dtype == EMBER_FLOAT32)
        nll_grad_f32((float *)ember_base(out), (const float *)ember_base(grad_output), tg, w, n, c, ignore_index,
                     reduction, smoothing);
    else
        nll_grad_f64((double *)ember_base(out), (const double *)ember_base(grad_output), tg, w, n, c, ignore_index,
                     reduction, smoothing);
    return EMBER_OK;
}

/* softmax and log_softmax along one axis, in one pass over memory per step instead of the five
 * ops of the core's composite (max, subtract, exp, sum, divide or log).
 *
 * A contiguous x is seen as (outer, n, inner) around the axis.  With m the maximum along the axis
 * and s = sum exp(x - m):  softmax = exp(x - m) / s,  log_softmax = (x - m) - log(s).  Subtracting
 * m first keeps exp from overflowing; s accumulates in double for float32 too.  NaN anywhere in a
 * slice makes the whole slice NaN (through s), as the composite does.
 *
 * When the axis is the last one (inner == 1) each row is three vectorised passes, and short rows
 * share their exp pass with their neighbours.  Otherwise the passes run across the inner
 * positions, with the running maxima and sums of one outer block in scratch rows, so that every
 * loop is still unit-stride. */
#include <math.h>
#include <stdlib.h>
#include "common.h"

#if defined(EMBER_CPU_LIBMVEC)
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
double exp(double);
#endif

/* Rows shorter than this go through exp in batches of several rows (one flat vector loop over a
 * batch): a vector loop over a 10-element row would run almost entirely in its scalar tail. */
#define SHORT_ROWS 1024

#define DEFINE_SOFTMAX(NAME, T, EXP)                                                               \
    static T NAME##_max(const T *x, int64_t n) {                                                   \
        T m = -INFINITY;                                                                           \
        int nan = 0;                                                                               \
        _Pragma("omp simd reduction(max:m) reduction(|:nan)")                                      \
        for (int64_t j = 0; j < n; j++) {                                                          \
            m = x[j] > m ? x[j] : m;                                                               \
            nan |= x[j] != x[j];                                                                   \
        }                                                                                          \
        return nan ? (T)NAN : m;                                                                   \
    }                                                                                              \
                                                                                                   \
    /* one long row along the last axis: three vector loops */                                     \
    static void NAME##_row(int log_out, const T *restrict x, T *restrict o, int64_t n) {           \
        T m = NAME##_max(x, n);                                                                    \
        double s = 0;                                                                              \
        if (log_out) {                                                                             \
            _Pragma("omp simd reduction(+:s)")                                                     \
            for (int64_t j = 0; j < n; j++) {                                                      \
                o[j] = x[j] - m;                                                                   \
                s += EXP(o[j]);                                                                    \
            }                                                                                      \
            T shift = (T)log(s);                                                                   \
            _Pragma("omp simd")                                                                    \
            for (int64_t j = 0; j < n; j++) o[j] -= shift;                                         \
        } else {                                                                                   \
            _Pragma("omp simd reduction(+:s)")                                                     \
            for (int64_t j = 0; j < n; j++) {                                                      \
                o[j] = EXP(x[j] - m);                                                              \
                s += o[j];                                                                         \
            }                                                                                      \
            T scale = (T)(1.0 / s);                                                                \
            _Pragma("omp simd")                                                                    \
            for (int64_t j = 0; j < n; j++) o[j] *= scale;                                         \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* `rows` short rows (n < SHORT_ROWS) along the last axis, a batch of rows at a time */        \
    static void NAME##_short_rows(int log_out, const T *restrict x, T *restrict o, int64_t rows,   \
                                  int64_t n) {                                                     \
        T e[SHORT_ROWS];                                                                           \
        int64_t per = SHORT_ROWS / n;                                                              \
        for (int64_t r0 = 0; r0 < rows; r0 += per) {                                               \
            int64_t nr = ember_min64(per, rows - r0), len = nr * n;                                \
            const T *xb = x + r0 * n;                                                              \
            T *ob = o + r0 * n;                                                                    \
            for (int64_t r = 0; r < nr; r++) {                                                     \
                T m = NAME##_max(xb + r * n, n);                                                   \
                for (int64_t j = 0; j < n; j++) ob[r * n + j] = xb[r * n + j] - m;                 \
            }                                                                                      \
            _Pragma("omp simd")                                                                    \
            for (int64_t k = 0; k < len; k++) e[k] = EXP(ob[k]);                                   \
            for (int64_t r = 0; r < nr; r++) {                                                     \
                double s = 0;                                                                      \
                for (int64_t j = 0; j < n; j++) s += e[r * n + j];                                 \
                T *orow = ob + r * n;                                                              \
                if (log_out) {                                                                     \
                    T shift = (T)log(s);                                                           \
                    for (int64_t j = 0; j < n; j++) orow[j] -= shift;                              \
                } else {                                                                           \
                    T scale = (T)(1.0 / s);                                                        \
                    for (int64_t j = 0; j < n; j++) orow[j] = e[r * n + j] * scale;                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* one (n, inner) block along a middle axis; m and s are scratch rows of `inner` */            \
    static void NAME##_block(int log_out, const T *x, T *o, int64_t n, int64_t inner, T *m,        \
                             double *s) {                                                          \
        for (int64_t k = 0; k < inner; k++) { m[k] = -INFINITY; s[k] = 0; }                        \
        for (int64_t j = 0; j < n; j++) {                                                          \
            const T *xj = x + j * inner;                                                           \
            for (int64_t k = 0; k < inner; k++)                                                    \
                m[k] = (xj[k] > m[k] || xj[k] != xj[k]) && m[k] == m[k] ? xj[k] : m[k];           \
        }                                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                          \
            const T *xj = x + j * inner;                                                           \
            T *oj = o + j * inner;                                                                 \
            _Pragma("omp simd")                                                                    \
            for (int64_t k = 0; k < inner; k++) {                                                  \
                oj[k] = EXP(xj[k] - m[k]);                                                         \
                s[k] += oj[k];                                                                     \
            }                                                                                      \
        }                                                                                          \
        for (int64_t k = 0; k < inner; k++) s[k] = log_out ? log(s[k]) : 1.0 / s[k];               \
        for (int64_t j = 0; j < n; j++) {                                                          \
            const T *xj = x + j * inner;                                                           \
            T *oj = o + j * inner;                                                                 \
            if (log_out)                                                                           \
                for (int64_t k = 0; k < inner; k++) oj[k] = (xj[k] - m[k]) - (T)s[k];              \
            else                                                                                   \
                for (int64_t k = 0; k < inner; k++) oj[k] *= (T)s[k];                              \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static ember_status NAME(int log_out, const char *xb, char *ob, int64_t outer, int64_t n,      \
                             int64_t inner) {                                                      \
        const T *x = (const T *)xb;                                                                \
        T *o = (T *)ob;                                                                            \
        int threads = ember_threads_for(outer * n * inner, outer);                                 \
        if (inner == 1 && n < SHORT_ROWS) {                                                        \
            /* whole batches per thread: where a batch starts decides which of its elements the    \
             * vector exp computes and which its scalar tail, so batches must not move with the    \
             * thread count (vector and scalar expf may differ in the last bit) */                 \
            int64_t batch = SHORT_ROWS / n, batches = (outer + batch - 1) / batch;                 \
            int64_t per_thread = (batches + threads - 1) / threads * batch;                        \
            _Pragma("omp parallel for num_threads(threads) schedule(static)")                      \
            for (int t = 0; t < threads; t++) {                                                    \
                int64_t r0 = t * per_thread, nr = ember_min64(per_thread, outer - r0);             \
                if (nr > 0) NAME##_short_rows(log_out, x + r0 * n, o + r0 * n, nr, n);             \
            }                                                                                      \
            return EMBER_OK;                                                                       \
        }                                                                                          \
        if (inner == 1) {                                                                          \
            _Pragma("omp parallel for num_threads(threads) schedule(static)")                      \
            for (int64_t r = 0; r < outer; r++) NAME##_row(log_out, x + r * n, o + r * n, n);      \
            return EMBER_OK;                                                                       \
        }                                                                                          \
        int failed = 0;                                                                            \
        _Pragma("omp parallel num_threads(threads) reduction(|:failed)")                           \
        {                                                                                          \
            T *m = malloc((size_t)inner * sizeof(T));                                              \
            double *s = malloc((size_t)inner * sizeof(double));                                    \
            failed = m == NULL || s == NULL;                                                       \
            _Pragma("omp for schedule(static)") /* every thread must reach it, even one that failed */ \
            for (int64_t r = 0; r < outer; r++)                                                    \
                if (!failed)                                                                       \
                    NAME##_block(log_out, x + r * n * inner, o + r * n * inner, n, inner, m, s);   \
            free(m);                                                                               \
            free(s);                                                                               \
        }                                                                                          \
        return failed ? EMBER_ERR_OUT_OF_MEMORY : EMBER_OK;                                        \
    }

DEFINE_SOFTMAX(softmax_f32, float, expf)
DEFINE_SOFTMAX(softmax_f64, double, exp)

int ember_cpu_softmax(int log_out, const ember_tensor *out, const ember_tensor *x, int axis) {
    if (ember_check_desc(out) || ember_check_desc(x) || !ember_same_shape(out, x) || out->dtype != x->dtype ||
        axis < 0 || axis >= x->ndim || !ember_is_contiguous(x) || !ember_is_contiguous(out))
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t outer = 1, inner = 1, n = x->shape[axis];
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    if (outer * n * inner == 0) return EMBER_OK;
    switch (x->dtype) {
    case EMBER_FLOAT32: return softmax_f32(log_out != 0, ember_base(x), ember_base(out), outer, n, inner);
    case EMBER_FLOAT64: return softmax_f64(log_out != 0, ember_base(x), ember_base(out), outer, n, inner);
    default: return EMBER_ERR_UNSUPPORTED;
    }
}

/* linear: out = x @ weight^T (+ bias) (then relu), instead of the composite's separate add and
 * relu ops (two more passes over out and two more allocations).  Where ember's float32 kernels run
 * the product, they add the bias and clamp as they store each tile; otherwise (float64, small
 * products on OpenBLAS) one epilogue pass over out follows the GEMM.  Training reaches this
 * kernel every step: XNNPACK declines weights that change between calls. */
#include "common.h"
#include "gemm_f32.h"

#define DEFINE_EPILOGUE(NAME, T)                                                                    \
    static void NAME(T *out, const T *bias, int64_t rows, int64_t cols, int relu) {                \
        int threads = ember_threads_for(rows * cols, rows);                                         \
        _Pragma("omp parallel for num_threads(threads) schedule(static)")                           \
        for (int64_t r = 0; r < rows; r++) {                                                        \
            T *row = out + r * cols;                                                                \
            if (bias) {                                                                             \
                _Pragma("omp simd")                                                                 \
                for (int64_t c = 0; c < cols; c++) row[c] += bias[c];                               \
            }                                                                                       \
            if (relu) {                                                                             \
                _Pragma("omp simd")                                                                 \
                for (int64_t c = 0; c < cols; c++) row[c] = row[c] > 0 ? row[c] : (row[c] != row[c] ? row[c] : 0); \
            }                                                                                       \
        }                                                                                           \
    }

DEFINE_EPILOGUE(epilogue_f32, float)
DEFINE_EPILOGUE(epilogue_f64, double)

int ember_cpu_linear(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                     const ember_tensor *bias, int relu) {
    if (ember_check_desc(out) || ember_check_desc(x) || ember_check_desc(weight) || (bias && ember_check_desc(bias)) ||
        x->ndim != 2 || weight->ndim != 2 || out->ndim != 2 || x->shape[1] != weight->shape[1] ||
        out->shape[0] != x->shape[0] || out->shape[1] != weight->shape[0] || !ember_is_contiguous(out) ||
        x->dtype != out->dtype || weight->dtype != out->dtype ||
        (bias && (bias->ndim != 1 || bias->shape[0] != out->shape[1] || bias->dtype != out->dtype ||
                  !ember_is_contiguous(bias))))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    ember_tensor weight_t = *weight;  /* weight^T: the same memory, dims swapped */
    weight_t.shape[0] = weight->shape[1];
    weight_t.shape[1] = weight->shape[0];
    weight_t.strides[0] = weight->strides[1];
    weight_t.strides[1] = weight->strides[0];
    const void *b = bias ? ember_base(bias) : NULL;
    int fused = 0, status;
    if (out->dtype == EMBER_FLOAT32 && (bias || relu)) {
        sgemm_epilogue ep = {(const float *)b, relu};
        status = ember_cpu_matmul_fused(out, x, &weight_t, &ep, &fused);
    } else {
        status = ember_cpu_matmul(out, x, &weight_t);
    }
    if (status != EMBER_OK || fused || (!bias && !relu)) return status;
    if (out->dtype == EMBER_FLOAT32)
        epilogue_f32((float *)ember_base(out), b, out->shape[0], out->shape[1], relu);
    else
        epilogue_f64((double *)ember_base(out), b, out->shape[0], out->shape[1], relu);
    return EMBER_OK;
}

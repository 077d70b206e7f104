/* ember's own float32 GEMM (gemm_f32.c), as matmul.c and linear.c call it.  Internal to the
 * plugin; not part of the ABI. */
#ifndef EMBER_CPU_GEMM_F32_H
#define EMBER_CPU_GEMM_F32_H

#include <stdint.h>

#include "ember.h"

/* What the kernels apply to c at their final store, while each tile is still in registers:
 * c + bias[j] (bias runs along c's columns; NULL for none), then relu when relu != 0 (NaN stays
 * NaN, -0 and negatives become +0).  Saves linear a separate pass over its output, which cost
 * ~4% of a 256 x 2048 -> 2048 layer. */
typedef struct {
    const float *bias;
    int relu;
} sgemm_epilogue;

/* 1 when this CPU runs the AVX-512 kernels (avx512f and avx512vl).  Where it does not, the two
 * entry points below return an error status and callers use BLAS instead. */
int ember_cpu_sgemm_supported(void);

/* c(M, N) = a(M, K) @ b(K, N), every operand with element strides (rs, cs), then ep (NULL: none). */
int ember_cpu_sgemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int64_t acs,
                    const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, int64_t ccs,
                    const sgemm_epilogue *ep, int nthreads);

/* The same for thin products whose a rows and b columns are contiguous along K (x @ w.T). */
int ember_cpu_sgemm_dot(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, const float *b,
                        int64_t bcs, float *c, int64_t crs, int64_t ccs, const sgemm_epilogue *ep,
                        int nthreads);

/* dst[j * dst_step + i] = src[i * src_step + j] for i < rows, j < cols (a rows x cols matrix
 * transposed), and with pad != 0 also 0 for i from rows up to the next multiple of 16 (the padding
 * lanes of a packed operand; pad == 0 writes nothing past rows): 16 x 16 blocks transposed in
 * registers where the CPU has AVX-512. */
void ember_cpu_transpose_f32(float *dst, int64_t dst_step, const float *src, int64_t src_step, int64_t rows,
                             int64_t cols, int pad);

/* matmul.c's ember_cpu_matmul, applying ep in the float32 kernels when they run this product in
 * place (sets *fused to 1); otherwise it computes the bare product and sets *fused to 0, and the
 * caller applies the epilogue itself. */
int ember_cpu_matmul_fused(const ember_tensor *out, const ember_tensor *a, const ember_tensor *b,
                           const sgemm_epilogue *ep, int *fused);

#endif

/* conv2d's gradient with respect to its weight, for any stride, padding, dilation and groups:
 *
 *   dW[o, c, ky, kx] = sum over n, oy, ox of  g[n, o, oy, ox] * x[n, c, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]
 *
 * as ONE matrix product per group over every image at once, (O/groups, N*OH*OW) @ (N*OH*OW,
 * C/groups*kh*kw): the gradient copied to that layout, and the input's patches gathered as rows
 * (im2col, zeros where a tap reads padding).  The core's composite ran one small product per image
 * and then summed the N partial gradients. */
#include <stdint.h>

#include "common.h"

/* Copies element bits (4 or 8 bytes: float32 or float64); zero bits are +0.0 in both. */
#define DEFINE_PATCHES(NAME, U)                                                                    \
    /* rows (n, oy, ox) x columns (c, ky, kx) of channels [c0, c0 + cg) */                         \
    static void NAME(U *restrict patches, const U *restrict x, int64_t N, int64_t C, int64_t H,   \
                     int64_t W, int64_t OH, int64_t OW, int64_t c0, int64_t cg,                    \
                     const ember_cpu_window *w) {                                                  \
        int64_t cols = cg * w->kh * w->kw;                                                         \
        int threads = ember_threads_for(N * OH * OW * cols, N);                                    \
        _Pragma("omp parallel for num_threads(threads) schedule(static)")                          \
        for (int64_t n = 0; n < N; n++)                                                            \
            for (int64_t c = 0; c < cg; c++)                                                       \
                for (int64_t ky = 0; ky < w->kh; ky++)                                             \
                    for (int64_t kx = 0; kx < w->kw; kx++) {                                       \
                        const U *plane = x + (n * C + c0 + c) * H * W;                             \
                        U *col = patches + n * OH * OW * cols + (c * w->kh + ky) * w->kw + kx;     \
                        for (int64_t oy = 0; oy < OH; oy++) {                                      \
                            int64_t iy = oy * w->sh - w->ph + ky * w->dh;                          \
                            U *dst = col + oy * OW * cols;                                         \
                            for (int64_t ox = 0; ox < OW; ox++) {                                  \
                                int64_t ix = ox * w->sw - w->pw + kx * w->dw;                      \
                                dst[ox * cols] = iy >= 0 && iy < H && ix >= 0 && ix < W ? plane[iy * W + ix] : 0; \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
    }

DEFINE_PATCHES(patches_4, uint32_t)
DEFINE_PATCHES(patches_8, uint64_t)

static void matrix_desc(ember_tensor *t, int dtype, void *data, int64_t rows, int64_t cols) {
    *t = (ember_tensor){.struct_size = sizeof(ember_tensor), .dtype = dtype, .ndim = 2, .data = data,
                        .shape = {rows, cols}, .strides = {cols, 1}};
}

int ember_cpu_conv2d_weight_grad(const ember_tensor *out, const ember_tensor *x, const ember_tensor *grad_output,
                                 const ember_cpu_window *w, int64_t groups) {
    if (ember_check_desc(out) || ember_check_desc(x) || ember_check_desc(grad_output) || !w || groups < 1)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->ndim != 4 || x->ndim != 4 || grad_output->ndim != 4 || x->dtype != out->dtype ||
        grad_output->dtype != out->dtype || !ember_is_contiguous(out) || !ember_is_contiguous(x) ||
        !ember_is_contiguous(grad_output))
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t O = out->shape[0], cg = out->shape[1], OH = grad_output->shape[2], OW = grad_output->shape[3];
    if (out->shape[2] != w->kh || out->shape[3] != w->kw || w->sh < 1 || w->sw < 1 || w->dh < 1 || w->dw < 1 ||
        O % groups != 0 || cg * groups != C || grad_output->shape[0] != N || grad_output->shape[1] != O)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    if (ember_numel(out) == 0) return EMBER_OK;
    int64_t isz = ember_itemsize[out->dtype], rows = N * OH * OW, cols = cg * w->kh * w->kw, og = O / groups;
    char *grad_rows = ember_cpu_alloc(O * rows * isz), *patches = ember_cpu_alloc(rows * cols * isz);
    int status = grad_rows && patches ? EMBER_OK : EMBER_ERR_OUT_OF_MEMORY;
    if (status == EMBER_OK) {
        /* grad_output (N, O, OH*OW) -> (O, N*OH*OW) */
        const char *g = ember_base(grad_output);
        int64_t plane = OH * OW * isz;
        int threads = ember_threads_for(O * rows, O);
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t o = 0; o < O; o++)
            for (int64_t n = 0; n < N; n++) memcpy(grad_rows + (o * N + n) * plane, g + (n * O + o) * plane, plane);
    }
    for (int64_t grp = 0; grp < groups && status == EMBER_OK; grp++) {
        if (isz == 4)
            patches_4((uint32_t *)patches, (const uint32_t *)ember_base(x), N, C, H, W, OH, OW, grp * cg, cg, w);
        else
            patches_8((uint64_t *)patches, (const uint64_t *)ember_base(x), N, C, H, W, OH, OW, grp * cg, cg, w);
        ember_tensor a, b, c;
        matrix_desc(&a, out->dtype, grad_rows + grp * og * rows * isz, og, rows);
        matrix_desc(&b, out->dtype, patches, rows, cols);
        matrix_desc(&c, out->dtype, ember_base(out) + grp * og * cols * isz, og, cols);
        status = ember_cpu_matmul(&c, &a, &b);
    }
    ember_cpu_free(grad_rows);
    ember_cpu_free(patches);
    return status;
}

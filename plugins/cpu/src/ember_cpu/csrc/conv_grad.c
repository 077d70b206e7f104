/* conv2d's gradient with respect to its weight, for any stride, padding, dilation and groups:
 *
 *   dW[o, c, ky, kx] = sum over n, oy, ox of  g[n, o, oy, ox] * x[n, c, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]
 *
 * as one matrix product per group over many images at once, (O/groups, images*OH*OW) @
 * (images*OH*OW, C/groups*kh*kw): the gradient copied to that layout, and the input's patches
 * gathered tap by tap (im2col, zeros where a tap reads padding; the product reads them as a
 * transposed view).  The core's composite ran one small product per image and then summed the N
 * partial gradients. */
#include <stdint.h>

#include "common.h"

/* Copies element bits (4 or 8 bytes: float32 or float64); zero bits are +0.0 in both. */
#define DEFINE_PATCHES(NAME, U)                                                                    \
    /* patches[(c, ky, kx)][(n, oy, ox)] for channels [c0, c0 + cg): each output row of a tap is a \
     * run of the input row (unit stride when sw is 1) between zeros where it reads padding */     \
    static void NAME(U *restrict patches, const U *restrict x, int64_t N, int64_t C, int64_t H,   \
                     int64_t W, int64_t OH, int64_t OW, int64_t c0, int64_t cg,                    \
                     const ember_cpu_window *w) {                                                  \
        int64_t taps = cg * w->kh * w->kw, rows = N * OH * OW;                                     \
        int threads = ember_threads_for(taps * rows, taps);                                        \
        _Pragma("omp parallel for num_threads(threads) schedule(static)")                          \
        for (int64_t t = 0; t < taps; t++) {                                                       \
            int64_t c = t / (w->kh * w->kw), ky = t / w->kw % w->kh, kx = t % w->kw;               \
            ember_run r = ember_inside_run(OW, W, kx * w->dw - w->pw, w->sw);                      \
            for (int64_t n = 0; n < N; n++)                                                        \
                for (int64_t oy = 0; oy < OH; oy++) {                                              \
                    U *dst = patches + t * rows + (n * OH + oy) * OW;                              \
                    int64_t iy = oy * w->sh - w->ph + ky * w->dh;                                  \
                    if (iy < 0 || iy >= H) {                                                       \
                        memset(dst, 0, (size_t)OW * sizeof(U));                                    \
                        continue;                                                                  \
                    }                                                                              \
                    const U *src = x + ((n * C + c0 + c) * H + iy) * W + kx * w->dw - w->pw;       \
                    for (int64_t ox = 0; ox < r.first; ox++) dst[ox] = 0;                          \
                    for (int64_t ox = r.first; ox < r.last; ox++) dst[ox] = src[ox * w->sw];       \
                    for (int64_t ox = r.last; ox < OW; ox++) dst[ox] = 0;                          \
                }                                                                                  \
        }                                                                                          \
    }

DEFINE_PATCHES(patches_4, uint32_t)
DEFINE_PATCHES(patches_8, uint64_t)

/* Images per product: their patches (about PATCH_BYTES) stay in cache between im2col and the GEMM
 * that reads them; each later chunk's product is added to the first's.  One product over all
 * images wrote and re-read 58 MB of patches for 8x64x56x56 -> 64, 3x3, and took as long as the
 * composite's product per image. */
#define PATCH_BYTES ((int64_t)8 << 20)

static void add_into(char *dst, const char *src, int64_t n, int dtype) {
    if (dtype == EMBER_FLOAT32)
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] += ((const float *)src)[i];
    else
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i] += ((const double *)src)[i];
}

/* A (rows, cols) matrix at data with element strides (rs, cs). */
static void matrix_desc(ember_tensor *t, int dtype, void *data, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    *t = (ember_tensor){.struct_size = sizeof(ember_tensor), .dtype = dtype, .ndim = 2, .data = data,
                        .shape = {rows, cols}, .strides = {rs, cs}};
}

int ember_cpu_conv2d_weight_grad(const ember_tensor *out, const ember_tensor *x, const ember_tensor *grad_output,
                                 const ember_cpu_window *w, int64_t groups) {
    if (ember_check_desc(out) || ember_check_desc(x) || ember_check_desc(grad_output) || !ember_valid_window(w) ||
        groups < 1)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->ndim != 4 || x->ndim != 4 || grad_output->ndim != 4 || x->dtype != out->dtype ||
        grad_output->dtype != out->dtype || !ember_is_contiguous(out) || !ember_is_contiguous(x) ||
        !ember_is_contiguous(grad_output))
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t O = out->shape[0], cg = out->shape[1], OH = grad_output->shape[2], OW = grad_output->shape[3];
    if (out->shape[2] != w->kh || out->shape[3] != w->kw || O % groups != 0 || cg * groups != C || grad_output->shape[0] != N || grad_output->shape[1] != O)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    if (ember_numel(out) == 0) return EMBER_OK;
    int64_t isz = ember_itemsize[out->dtype], plane = OH * OW, rows = N * plane;
    int64_t cols = cg * w->kh * w->kw, og = O / groups;
    if (rows == 0) {   /* no term in any sum */
        memset(ember_base(out), 0, (size_t)(ember_numel(out) * isz));
        return EMBER_OK;
    }
    int64_t chunk = ember_max64(1, ember_min64(N, PATCH_BYTES / (cols * plane * isz)));
    char *grad_rows = ember_cpu_alloc(O * rows * isz), *patches = ember_cpu_alloc(chunk * plane * cols * isz);
    char *partial = chunk < N ? ember_cpu_alloc(og * cols * isz) : NULL;
    int status = grad_rows && patches && (partial || chunk == N) ? EMBER_OK : EMBER_ERR_OUT_OF_MEMORY;
    if (status == EMBER_OK) {
        /* grad_output (N, O, OH*OW) -> (O, N*OH*OW) */
        const char *g = ember_base(grad_output);
        int threads = ember_threads_for(O * rows, O);
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t o = 0; o < O; o++)
            for (int64_t n = 0; n < N; n++)
                memcpy(grad_rows + (o * N + n) * plane * isz, g + (n * O + o) * plane * isz, (size_t)(plane * isz));
    }
    for (int64_t n0 = 0; n0 < N && status == EMBER_OK; n0 += chunk) {
        int64_t images = ember_min64(chunk, N - n0), k = images * plane;
        for (int64_t grp = 0; grp < groups && status == EMBER_OK; grp++) {
            const char *x0 = ember_base(x) + n0 * C * H * W * isz;
            if (isz == 4)
                patches_4((uint32_t *)patches, (const uint32_t *)x0, images, C, H, W, OH, OW, grp * cg, cg, w);
            else
                patches_8((uint64_t *)patches, (const uint64_t *)x0, images, C, H, W, OH, OW, grp * cg, cg, w);
            char *dst = ember_base(out) + grp * og * cols * isz;
            ember_tensor a, b, c;
            matrix_desc(&a, out->dtype, grad_rows + (grp * og * rows + n0 * plane) * isz, og, k, rows, 1);
            matrix_desc(&b, out->dtype, patches, k, cols, 1, k);   /* patches^T: column-major */
            matrix_desc(&c, out->dtype, n0 == 0 ? dst : partial, og, cols, cols, 1);
            status = ember_cpu_matmul(&c, &a, &b);
            if (status == EMBER_OK && n0 > 0) add_into(dst, partial, og * cols, out->dtype);
        }
    }
    ember_cpu_free(grad_rows);
    ember_cpu_free(patches);
    ember_cpu_free(partial);
    return status;
}

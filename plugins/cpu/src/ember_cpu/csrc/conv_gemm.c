/* conv2d as im2col + GEMM, for any kernel size, stride, padding, dilation and groups: the forward
 * (one product per image and group, below) and the gradient with respect to the weight:
 *
 *   dW[o, c, ky, kx] = sum over n, oy, ox of  g[n, o, oy, ox] * x[n, c, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]
 *
 * as one matrix product per group over many images at once, (O/groups, images*OH*OW) @
 * (images*OH*OW, C/groups*kh*kw): the gradient copied to that layout, and the input's patches
 * gathered tap by tap (im2col, zeros where a tap reads padding; the product reads them as a
 * transposed view).  The core's composite ran one small product per image and then summed the N
 * partial gradients.  float32 3x3 kernels (dilation 1, any stride), the common case, skip the
 * patches: a direct kernel (wgrad3, below) reads the taps in place. */
#include <omp.h>
#include <stdint.h>

#include "common.h"
#include "gemm_f32.h"

/* dst[ox] = src[ox * s] for ox in [r.first, r.last), else 0, for ox < OW: one output row of a
 * tap's patches (the row of a tap that reads padding on the left or right).  With unit stride
 * and AVX-512, a masked load and store per 16 (or 8) elements: rows are often a few elements
 * long (8x8 images: 8), where a loop per element and zeros on either side cost most of the time.
 * Masked lanes are never read, so src + ox may point before or past the input row. */
#if defined(__AVX512F__)
#define UNIT_STRIDE_COPY(U, dst, src, OW, r)                                                       \
    do {                                                                                           \
        if (sizeof(U) == 4)                                                                        \
            for (int64_t ox = 0; ox < (OW); ox += 16)                                              \
                _mm512_mask_storeu_epi32((dst) + ox, lanes_16(0, (OW) - ox),                      \
                                         _mm512_maskz_loadu_epi32(lanes_16((r).first - ox, (r).last - ox), \
                                                                  (src) + ox));                   \
        else                                                                                       \
            for (int64_t ox = 0; ox < (OW); ox += 8)                                               \
                _mm512_mask_storeu_epi64((dst) + ox, lanes_8(0, (OW) - ox),                       \
                                         _mm512_maskz_loadu_epi64(lanes_8((r).first - ox, (r).last - ox), \
                                                                  (src) + ox));                   \
    } while (0)
/* The same for stride 2 and 4-byte elements (stride-2 convolutions): per 16 outputs, two masked
 * loads of the 32 source elements they span and one permute that keeps the even ones.  The loads'
 * masks cover only the elements from the first valid output's to the last one's. */
#define STRIDE2_COPY_4(dst, src, OW, r)                                                            \
    do {                                                                                           \
        const __m512i even_ = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); \
        for (int64_t ox = 0; ox < (OW); ox += 16) {                                                \
            int64_t lo = 2 * ((r).first - ox), hi = 2 * ((r).last - ox) - 1;                      \
            __m512i a = _mm512_maskz_loadu_epi32(lanes_16(lo, hi), (src) + 2 * ox);                \
            __m512i b = _mm512_maskz_loadu_epi32(lanes_16(lo - 16, hi - 16), (src) + 2 * ox + 16); \
            __m512i kept = _mm512_maskz_mov_epi32(lanes_16((r).first - ox, (r).last - ox),        \
                                                  _mm512_permutex2var_epi32(a, even_, b));         \
            _mm512_mask_storeu_epi32((dst) + ox, lanes_16(0, (OW) - ox), kept);                   \
        }                                                                                          \
    } while (0)
#define HAVE_UNIT_STRIDE_COPY 1
#else
#define HAVE_UNIT_STRIDE_COPY 0
#define UNIT_STRIDE_COPY(U, dst, src, OW, r) ((void)0)
#define STRIDE2_COPY_4(dst, src, OW, r) ((void)0)
#endif

/* Copies element bits (4 or 8 bytes: float32 or float64); zero bits are +0.0 in both. */
#define DEFINE_PATCHES(NAME, U)                                                                    \
    static inline void NAME##_row(U *restrict dst, const U *src, int64_t OW, ember_run r, int64_t s) { \
        if (HAVE_UNIT_STRIDE_COPY && s == 1) {                                                      \
            UNIT_STRIDE_COPY(U, dst, src, OW, r);                                                  \
            return;                                                                                \
        }                                                                                          \
        if (HAVE_UNIT_STRIDE_COPY && s == 2 && sizeof(U) == 4) {                                    \
            STRIDE2_COPY_4((uint32_t *)dst, (const uint32_t *)src, OW, r);                         \
            return;                                                                                \
        }                                                                                          \
        for (int64_t ox = 0; ox < r.first; ox++) dst[ox] = 0;                                      \
        for (int64_t ox = r.first; ox < r.last; ox++) dst[ox] = src[ox * s];                       \
        for (int64_t ox = r.last; ox < OW; ox++) dst[ox] = 0;                                      \
    }                                                                                              \
                                                                                                   \
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
                    NAME##_row(dst, x + ((n * C + c0 + c) * H + iy) * W + kx * w->dw - w->pw, OW, r, w->sw); \
                }                                                                                  \
        }                                                                                          \
    }

DEFINE_PATCHES(patches_4, uint32_t)
DEFINE_PATCHES(patches_8, uint64_t)

/* The patches of `images` images from x0 (elements of isz bytes: float32 or float64). */
static void gather_patches(int64_t isz, char *patches, const char *x0, int64_t images, int64_t C, int64_t H,
                           int64_t W, int64_t OH, int64_t OW, int64_t c0, int64_t cg, const ember_cpu_window *w) {
    if (isz == 4)
        patches_4((uint32_t *)patches, (const uint32_t *)x0, images, C, H, W, OH, OW, c0, cg, w);
    else
        patches_8((uint64_t *)patches, (const uint64_t *)x0, images, C, H, W, OH, OW, c0, cg, w);
}

/* Images per product: their patches (about PATCH_BYTES) stay in cache between im2col and the GEMM
 * that reads them; each later chunk's product is added to the first's.  One product over all
 * images wrote and re-read 58 MB of patches for 8x64x56x56 -> 64, 3x3, and took as long as the
 * composite's product per image. */
#define PATCH_BYTES ((int64_t)8 << 20)

/* A small result over a long sum (32x16x8x8 -> 32, 3x3: 32 x 144 outputs, each a sum of 2048
 * products) leaves each thread of one product's row or column split a sliver, and copies
 * both operands to every thread: below PART_OUTPUTS outputs the batch is cut into chunks of about
 * PART_DEPTH terms instead, one product per chunk, and the chunks run on separate threads. */
#define PART_OUTPUTS ((int64_t)1 << 16)
#define PART_DEPTH 512

/* Images per chunk: a function of the shapes alone, so that the sum, taken chunk by chunk in
 * order, is the same for any thread count. */
static int64_t images_per_chunk(int64_t N, int64_t plane, int64_t cols, int64_t outputs, int64_t isz) {
    int64_t chunk = ember_max64(1, ember_min64(N, PATCH_BYTES / (cols * plane * isz)));
    if (chunk == N && outputs <= PART_OUTPUTS) chunk = ember_max64(1, ember_min64(N, PART_DEPTH / plane));
    int64_t chunks = (N + chunk - 1) / chunk;
    return (N + chunks - 1) / chunks;   /* equal chunks (32 images: 16 + 16, not 28 + 4): threads finish together */
}

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

/* What every chunk's product shares. */
typedef struct {
    const ember_tensor *out, *x;
    const ember_cpu_window *w;
    int64_t N, C, H, W, OH, OW, cg, og, cols, rows, chunk, groups;
    char *grad_rows;   /* grad_output as (O, N*OH*OW) */
} weight_grad_job;

/* Chunk q's product for group grp into result (og, cols), with its patches in the scratch given. */
static int chunk_product(const weight_grad_job *j, int64_t q, int64_t grp, char *patches, char *result) {
    int dtype = j->out->dtype;
    int64_t isz = ember_itemsize[dtype], plane = j->OH * j->OW, n0 = q * j->chunk;
    int64_t images = ember_min64(j->chunk, j->N - n0), k = images * plane;
    const char *x0 = ember_base(j->x) + n0 * j->C * j->H * j->W * isz;
    gather_patches(isz, patches, x0, images, j->C, j->H, j->W, j->OH, j->OW, grp * j->cg, j->cg, j->w);
    ember_tensor a, b, c;
    matrix_desc(&a, dtype, j->grad_rows + (grp * j->og * j->rows + n0 * plane) * isz, j->og, k, j->rows, 1);
    matrix_desc(&b, dtype, patches, k, j->cols, 1, k);   /* patches^T: column-major */
    matrix_desc(&c, dtype, result, j->og, j->cols, j->cols, 1);
    return ember_cpu_matmul(&c, &a, &b);
}

/* Task t: chunk t / groups for group t % groups.  Chunk 0 writes the result, the others a partial
 * (chunks - 1 of them, each O x cols) that is added to it afterwards, in chunk order. */
static int chunk_task(const weight_grad_job *j, int64_t t, char *partials, char *patches) {
    int64_t q = t / j->groups, grp = t % j->groups, isz = ember_itemsize[j->out->dtype];
    int64_t result = j->og * j->cols, O = j->og * j->groups;
    char *dst = q == 0 ? ember_base(j->out) + grp * result * isz : partials + ((q - 1) * O * j->cols + grp * result) * isz;
    return chunk_product(j, q, grp, patches, dst);
}

/* ---- float32, 3x3, any stride: a direct kernel ----------------------------------------------
 *
 * The weight gradient as a matrix product dW^T (C*9 x O) = taps (C*9 x N*OH*OW) @ g^T, where row
 * (c, ky, kx) of taps at position (n, oy, ox) is x_padded[n, c, oy*sh + ky, ox*sw + kx]: the rows
 * of one (c, ky) are three neighbouring values of one padded input row.  So the micro-kernel reads taps
 * in place, as broadcasts from WG_GROUPS padded input rows (kx an immediate offset), against
 * g^T (grad_output transposed to (N*OH*OW, O), 16-lane vectors of output channels):
 *
 *   acc[(c, ky, kx)][o..o+31] += x_padded[n, c, oy*sh + ky, ox*sw + kx] * g^T[(n, oy, ox)][o..o+31]
 *
 * 24 FMAs per 2 vector loads and 12 broadcasts, no im2col.  Tiles (WG_GROUPS (c, ky) groups x 32
 * output channels) are owned by one thread each and summed over blocks of images in order, so the
 * bits do not depend on the thread count.  2 threads, native call: the demo's 32x16x8x8 -> 32 from
 * ~310 us (im2col + GEMM: gathering took 20% of it, packing 13%, the GEMM kernel 13%) to 125-150;
 * 8x64x56x56 -> 64 12.8 -> 8.0-9.2 ms.  A kernel with the 16 lanes along the positions instead
 * (no transposed copy of grad_output, but masked loads that straddle cache lines) took 1.05-1.5x
 * as long.  Stride 2 (32x32x32x32 -> 64): 3.6 ms through im2col + GEMM (after the stride-2
 * gather was vectorised), 1.55 ms directly (PyTorch: 2.2). */
#if defined(__AVX512F__)
#define WG_GROUPS 4                  /* (c, ky) groups per tile: 12 rows x 2 vectors = 24 zmm      */
#define WG_BLOCK_FLOATS ((int64_t)1 << 17)   /* g^T per block of images: 512 KiB, in L2          */

typedef struct {
    const float *xpad, *gt;   /* x padded to (N, C, Hp, Wp); g^T as (N*OH*OW, OV) */
    float *sums;              /* dW^T as (C*9, OV)                                */
    int64_t C, Hp, Wp, OH, OW, OV, sh, sw;
} wgrad3_job;

/* sums[rows of groups g0.., o0..o0+16*VECS) (+)= the products over images [n0, n1). */
static inline __attribute__((always_inline)) void wgrad3_tile(const int GROUPS, const int VECS, const wgrad3_job *j,
                                                              int64_t g0, int64_t o0, int64_t n0, int64_t n1,
                                                              int first) {
    __m512 acc[3 * WG_GROUPS][2];
    float *dst = j->sums + g0 * 3 * j->OV + o0;
#pragma GCC unroll 12
    for (int r = 0; r < 3 * GROUPS; r++)
#pragma GCC unroll 2
        for (int v = 0; v < VECS; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(dst + r * j->OV + 16 * v);
    const int64_t plane = j->Hp * j->Wp;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t oy = 0; oy < j->OH; oy++) {
            const float *rows[WG_GROUPS];
#pragma GCC unroll 4
            for (int q = 0; q < GROUPS; q++) {   /* group g0 + q: channel (g0 + q) / 3, tap row (g0 + q) % 3 */
                int64_t g = g0 + q;
                rows[q] = j->xpad + (n * j->C + g / 3) * plane + (oy * j->sh + g % 3) * j->Wp;
            }
            const float *b = j->gt + ((n * j->OH + oy) * j->OW) * j->OV + o0;
#pragma GCC unroll 1
            for (int64_t ox = 0; ox < j->OW; ox++, b += j->OV) {
                __m512 b0 = _mm512_load_ps(b), b1 = VECS > 1 ? _mm512_load_ps(b + 16) : b0;
                /* each iteration's taps through a pointer the compiler cannot relate to the
                 * previous one: otherwise it keeps the taps two iterations share in registers and
                 * spills accumulators to make room */
#pragma GCC unroll 4
                for (int q = 0; q < GROUPS; q++) {
                    const float *taps = rows[q] + ox * j->sw;
                    __asm__("" : "+r"(taps));
#pragma GCC unroll 3
                    for (int kx = 0; kx < 3; kx++) {
                        __m512 a = _mm512_set1_ps(taps[kx]);
                        acc[3 * q + kx][0] = _mm512_fmadd_ps(a, b0, acc[3 * q + kx][0]);
                        if (VECS > 1) acc[3 * q + kx][1] = _mm512_fmadd_ps(a, b1, acc[3 * q + kx][1]);
                    }
                }
            }
        }
#pragma GCC unroll 12
    for (int r = 0; r < 3 * GROUPS; r++)
#pragma GCC unroll 2
        for (int v = 0; v < VECS; v++) _mm512_store_ps(dst + r * j->OV + 16 * v, acc[r][v]);
}

typedef void (*wgrad3_fn)(const wgrad3_job *j, int64_t g0, int64_t o0, int64_t n0, int64_t n1, int first);
#define DEFINE_WGRAD3(GROUPS, VECS)                                                                      \
    static void wgrad3_##GROUPS##x##VECS(const wgrad3_job *j, int64_t g0, int64_t o0, int64_t n0, int64_t n1, \
                                        int first) {                                                    \
        wgrad3_tile(GROUPS, VECS, j, g0, o0, n0, n1, first);                                            \
    }
DEFINE_WGRAD3(1, 1) DEFINE_WGRAD3(1, 2) DEFINE_WGRAD3(2, 1) DEFINE_WGRAD3(2, 2)
DEFINE_WGRAD3(3, 1) DEFINE_WGRAD3(3, 2) DEFINE_WGRAD3(4, 1) DEFINE_WGRAD3(4, 2)
static const wgrad3_fn wgrad3_tiles[WG_GROUPS][2] = {{wgrad3_1x1, wgrad3_1x2}, {wgrad3_2x1, wgrad3_2x2},
                                                     {wgrad3_3x1, wgrad3_3x2}, {wgrad3_4x1, wgrad3_4x2}};

static int wgrad3(const ember_tensor *out, const ember_tensor *x, const ember_tensor *grad_output,
                  const ember_cpu_window *w) {
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t O = out->shape[0], OH = grad_output->shape[2], OW = grad_output->shape[3];
    int64_t Hp = H + 2 * w->ph, Wp = W + 2 * w->pw, OV = (O + 15) / 16 * 16, P = OH * OW;
    float *xpad = ember_cpu_alloc(N * C * Hp * Wp * (int64_t)sizeof(float));
    float *gt = ember_cpu_alloc(N * P * OV * (int64_t)sizeof(float));
    float *sums = ember_cpu_alloc(C * 9 * OV * (int64_t)sizeof(float));
    if (!xpad || !gt || !sums) {
        ember_cpu_free(xpad);
        ember_cpu_free(gt);
        ember_cpu_free(sums);
        return EMBER_ERR_OUT_OF_MEMORY;
    }
    const float *xs = (const float *)ember_base(x), *gs = (const float *)ember_base(grad_output);
    int64_t groups = 3 * C, group_tiles = (groups + WG_GROUPS - 1) / WG_GROUPS, o_tiles = (OV + 31) / 32;
    int64_t tiles = group_tiles * o_tiles, block = ember_max64(1, WG_BLOCK_FLOATS / (P * OV));
    int threads = ember_threads_for(N * P * O * C * 9, tiles);
    wgrad3_job j = {xpad, gt, sums, C, Hp, Wp, OH, OW, OV, w->sh, w->sw};
#pragma omp parallel num_threads(threads)
    {
        /* the padded input and the transposed gradient, image by image */
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            for (int64_t c = 0; c < C; c++)
                ember_pad_plane_f32(xpad + (n * C + c) * Hp * Wp, xs + (n * C + c) * H * W, H, W, w->ph, w->pw);
            ember_cpu_transpose_f32(gt + n * P * OV, OV, gs + n * O * P, P, O, P, 1);
        }
        int me = omp_get_thread_num(), team = omp_get_num_threads();
        int64_t first_tile = tiles * me / team, end_tile = tiles * (me + 1) / team;
        for (int64_t n0 = 0; n0 < N; n0 += block)
            for (int64_t i = first_tile; i < end_tile; i++) {
                int64_t g0 = i / o_tiles * WG_GROUPS, o0 = i % o_tiles * 32;
                int64_t rows = ember_min64(WG_GROUPS, groups - g0), vecs = ember_min64(2, (OV - o0) / 16);
                wgrad3_tiles[rows - 1][vecs - 1](&j, g0, o0, n0, ember_min64(N, n0 + block), n0 == 0);
            }
    }
    float *result = (float *)ember_base(out);   /* dW^T (C*9, OV) -> dW (O, C, 3, 3) */
    ember_cpu_transpose_f32(result, C * 9, sums, OV, C * 9, O, 0);
    ember_cpu_free(xpad);
    ember_cpu_free(gt);
    ember_cpu_free(sums);
    return EMBER_OK;
}

/* float32, 3x3, stride 1, dilation 1, groups 1. */
static int wgrad3_takes(const ember_tensor *out, const ember_cpu_window *w, int64_t groups) {
    return out->dtype == EMBER_FLOAT32 && groups == 1 && w->kh == 3 && w->kw == 3 && w->dh == 1 && w->dw == 1;
}
#else
static int wgrad3_takes(const ember_tensor *out, const ember_cpu_window *w, int64_t groups) { return 0; }
static int wgrad3(const ember_tensor *out, const ember_tensor *x, const ember_tensor *grad_output,
                  const ember_cpu_window *w) {
    return EMBER_ERR_UNSUPPORTED;
}
#endif

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
    int64_t cols = cg * w->kh * w->kw, og = O / groups, result = og * cols;
    if (rows == 0) {   /* no term in any sum */
        memset(ember_base(out), 0, (size_t)(ember_numel(out) * isz));
        return EMBER_OK;
    }
    if (wgrad3_takes(out, w, groups) && OH == (H + 2 * w->ph - 3) / w->sh + 1 && OW == (W + 2 * w->pw - 3) / w->sw + 1)
        return wgrad3(out, x, grad_output, w);
    weight_grad_job job = {out, x, w, N, C, H, W, OH, OW, cg, og, cols, rows,
                           images_per_chunk(N, plane, cols, result, isz), groups, NULL};
    int64_t chunks = (N + job.chunk - 1) / job.chunk, tasks = chunks * groups;
    /* chunks share the threads, each product then on its own (nested regions run on one thread) */
    int threads = chunks > 1 ? ember_threads_for(O * cols * rows, tasks) : 1;
    int64_t patch_floats = (job.chunk * plane * cols + 15) / 16 * 16;
    /* each thread's patches take memory: no more than two chunks' worth of PATCH_BYTES in all */
    threads = (int)ember_min64(threads, ember_max64(1, 2 * PATCH_BYTES / (patch_floats * isz)));
    job.grad_rows = ember_cpu_alloc(O * rows * isz);
    char *patches = ember_cpu_alloc(threads * patch_floats * isz);
    char *partials = chunks > 1 ? ember_cpu_alloc((chunks - 1) * O * cols * isz) : NULL;
    int status = job.grad_rows && patches && (partials || chunks == 1) ? EMBER_OK : EMBER_ERR_OUT_OF_MEMORY;
    if (status == EMBER_OK) {
        /* grad_output (N, O, OH*OW) -> (O, N*OH*OW) */
        const char *g = ember_base(grad_output);
        int copy_threads = ember_threads_for(O * rows, O);
#pragma omp parallel for num_threads(copy_threads) schedule(static)
        for (int64_t o = 0; o < O; o++)
            for (int64_t n = 0; n < N; n++)
                memcpy(job.grad_rows + (o * N + n) * plane * isz, g + (n * O + o) * plane * isz, (size_t)(plane * isz));
        if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
            for (int64_t t = 0; t < tasks; t++) {
                int mine = chunk_task(&job, t, partials, patches + omp_get_thread_num() * patch_floats * isz);
                if (mine != EMBER_OK) __atomic_store_n(&status, mine, __ATOMIC_RELAXED);
            }
        } else {   /* not even a one-thread region: inside one, every product's own region made new threads */
            for (int64_t t = 0; t < tasks && status == EMBER_OK; t++) status = chunk_task(&job, t, partials, patches);
        }
    }
    if (status == EMBER_OK)
        for (int64_t q = 1; q < chunks; q++) add_into(ember_base(out), partials + (q - 1) * O * cols * isz, O * cols, out->dtype);
    ember_cpu_free(job.grad_rows);
    ember_cpu_free(patches);
    ember_cpu_free(partials);
    return status;
}

/* ---- the forward: one product per image and group ---------------------------------------------
 *
 *   out[n, group's channels] (og x OH*OW) = weight[group] (og x cg*kh*kw) @ patches of image n
 *
 * the patches built by the same gather as above, one image at a time into the running thread's
 * scratch (1x1 kernels at stride 1 without padding read x in place), then bias and relu applied
 * to the image's output while it is in cache.  Images (and groups) are shared among the threads,
 * each product on one thread; with fewer of them than threads, the products take the threads.
 * The core's composite built every image's patches from a strided window view first. */
#define DEFINE_BIAS_RELU(T, SUF)                                                                   \
    static void bias_relu_##SUF(T *row, int64_t n, T bias, int relu) {                             \
        if (relu) {                                                                                \
            _Pragma("omp simd")                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T v = row[i] + bias;                                                               \
                row[i] = v > 0 || v != v ? v : (T)0;   /* NaN stays NaN; -0 and below give +0 */  \
            }                                                                                      \
        } else {                                                                                   \
            _Pragma("omp simd")                                                                    \
            for (int64_t i = 0; i < n; i++) row[i] += bias;                                        \
        }                                                                                          \
    }
DEFINE_BIAS_RELU(float, f32)
DEFINE_BIAS_RELU(double, f64)

typedef struct {
    const ember_tensor *out, *x, *weight, *bias;
    const ember_cpu_window *w;
    int64_t groups, C, H, W, OH, OW, cg, og, cols;
    int relu;
} conv_job;

static int conv_task(const conv_job *j, int64_t t, char *patches) {
    int dtype = j->out->dtype;
    int64_t isz = ember_itemsize[dtype], n = t / j->groups, grp = t % j->groups, P = j->OH * j->OW;
    const char *x0 = ember_base(j->x) + n * j->C * j->H * j->W * isz;
    const ember_cpu_window *w = j->w;
    int direct = w->kh == 1 && w->kw == 1 && w->sh == 1 && w->sw == 1 && w->ph == 0 && w->pw == 0;
    const char *b_data = direct ? x0 + grp * j->cg * P * isz : patches;
    if (!direct) gather_patches(isz, patches, x0, 1, j->C, j->H, j->W, j->OH, j->OW, grp * j->cg, j->cg, w);
    char *c_data = ember_base(j->out) + (n * j->og * j->groups + grp * j->og) * P * isz;
    ember_tensor a, b, c;
    matrix_desc(&a, dtype, ember_base(j->weight) + grp * j->og * j->cols * isz, j->og, j->cols, j->cols, 1);
    matrix_desc(&b, dtype, (void *)b_data, j->cols, P, P, 1);
    matrix_desc(&c, dtype, c_data, j->og, P, P, 1);
    int status = ember_cpu_matmul(&c, &a, &b);
    if (status || (!j->bias && !j->relu)) return status;
    const char *bias = j->bias ? ember_base(j->bias) + grp * j->og * isz : NULL;
    for (int64_t o = 0; o < j->og; o++) {
        if (dtype == EMBER_FLOAT32)
            bias_relu_f32((float *)c_data + o * P, P, bias ? ((const float *)bias)[o] : 0.0f, j->relu);
        else
            bias_relu_f64((double *)c_data + o * P, P, bias ? ((const double *)bias)[o] : 0.0, j->relu);
    }
    return EMBER_OK;
}

int ember_cpu_conv2d_gemm(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                          const ember_tensor *bias, const ember_cpu_window *w, int64_t groups, int relu) {
    if (ember_check_desc(out) || ember_check_desc(x) || ember_check_desc(weight) || (bias && ember_check_desc(bias)) ||
        !ember_valid_window(w) || groups < 1)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->ndim != 4 || x->ndim != 4 || weight->ndim != 4 || x->dtype != out->dtype || weight->dtype != out->dtype ||
        !ember_is_contiguous(out) || !ember_is_contiguous(x) || !ember_is_contiguous(weight) ||
        (bias && (bias->ndim != 1 || bias->dtype != out->dtype || !ember_is_contiguous(bias))))
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], O = weight->shape[0];
    int64_t cg = weight->shape[1], OH = out->shape[2], OW = out->shape[3];
    if (weight->shape[2] != w->kh || weight->shape[3] != w->kw || O % groups || cg * groups != C ||
        out->shape[0] != N || out->shape[1] != O || (bias && bias->shape[0] != O) ||
        OH != (H + 2 * w->ph - w->dh * (w->kh - 1) - 1) / w->sh + 1 ||
        OW != (W + 2 * w->pw - w->dw * (w->kw - 1) - 1) / w->sw + 1)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    if (ember_numel(out) == 0) return EMBER_OK;
    int64_t isz = ember_itemsize[out->dtype], cols = cg * w->kh * w->kw, P = OH * OW, tasks = N * groups;
    conv_job j = {out, x, weight, bias, w, groups, C, H, W, OH, OW, cg, O / groups, cols, relu};
    int64_t patch_floats = (cols * P + 15) / 16 * 16;
    int threads = ember_threads_for(O * cols * N * P, tasks);
    char *patches = ember_cpu_alloc(ember_max64(threads, 1) * ember_max64(patch_floats, 1) * isz);
    if (!patches) return EMBER_ERR_OUT_OF_MEMORY;
    int status = EMBER_OK;
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int mine = conv_task(&j, t, patches + omp_get_thread_num() * patch_floats * isz);
            if (mine != EMBER_OK) __atomic_store_n(&status, mine, __ATOMIC_RELAXED);
        }
    } else {   /* outside any region, so that each product may take the threads */
        for (int64_t t = 0; t < tasks && status == EMBER_OK; t++) status = conv_task(&j, t, patches);
    }
    ember_cpu_free(patches);
    return status;
}

/*
 * conv2d of 3x3 kernels at stride 1 (dilation 1, groups 1, any padding): Winograd F(2x2, 3x3)
 * (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).
 *
 * Why: a direct or im2col convolution spends 9 multiply-adds per output and input channel;
 * F(2x2, 3x3) computes each 2x2 output tile from a 4x4 input tile with 16 (2.25x fewer), and
 * those 16 are 16 independent GEMMs that run at GEMM speed.  Per 4x4 input tile d, 3x3 filter g:
 *     U = G g G^T (4x4, once per call),  V = B^T d B (4x4),  Y = A^T (U .* V) A (2x2)
 * and, summed over input channels c, (U .* V)[k] for each of the 16 positions k becomes
 *     M[k](O, tiles) = U[k](O, C) @ V[k](C, tiles).
 * Over one to a few input channels those GEMMs have next to nothing to sum and the transforms
 * are the whole cost: float32 calls with at most EMBER_CPU_DIRECT_MAX_CHANNELS input channels go
 * to conv_direct.c instead.
 *
 * The plan (one parallel region):
 *   1. U for every (o, c), in double precision, packed for the micro-kernel: U[k][o / MR][c][o % MR]
 *      (rows beyond O are zeros, so the micro-kernel never needs an edge case in o);
 *   2. the output tiles (n, tile row, tile column), flattened, are cut into blocks of `tb` tiles,
 *      taken by the threads one block at a time.  Per block:
 *      a. input transform: per channel, the input rows under the block's tiles are copied,
 *         zero-padded, into a small buffer where every tile's 4x4 patch sits at 2 x its place in
 *         the block, so that one vector loop over the whole block (no bounds checks, no per-row
 *         remainder loops: rows of 28 tiles spent most of their time in those) writes V into a
 *         [16][C][tb] buffer (L2-resident);
 *      b. per NR tiles: 16 x (O / MR) micro-kernel calls M[k] = U[k] @ V[k] into an L2-resident
 *         [16][O][NR] buffer, then the output transform adds the bias, applies relu, forms the
 *         tiles' output rows in one loop and copies them into NCHW out (the last row or column
 *         of tiles may be half outside it).
 * The micro-kernel keeps an MR x NR block of M in registers (8 x 48 floats: 24 zmm accumulators)
 * and reads V rows in place: the block buffer already is the packed panel a GEMM would make.
 *
 * The typed code lives in the second half of this file, which includes itself once per dtype
 * (float and double): GCC vector types of 64 bytes make it AVX-512 code where the CPU has it
 * and plain SIMD code elsewhere, from one text.
 */
#ifndef CONV_T

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "common.h"
#include "conv_direct.h"
#include "ember_cpu.h"

#define MR 8                     /* output channels per micro-kernel                           */
#define VEC_BYTES 64             /* one AVX-512 register                                       */
#define NR_VECS 3                /* tiles per micro-kernel: 3 vectors (48 floats, 24 doubles)  */
#define MAX_PANELS 4             /* a block holds at most 4 micro-kernel widths of tiles       */
#define BLOCK_V_BYTES (1 << 20)  /* a block's V buffer stays within ~1 MiB of the 2 MiB L2     */
#define BLOCKS_PER_THREAD 4      /* enough blocks that a descheduled thread delays little      */
#define MACS_PER_WORK 16         /* as matmul.c: 2^19 multiply-adds are the default grain */

typedef struct {
    int64_t N, C, H, W, O, OH, OW, ph, pw;
    int64_t tiles_h, tiles_w, tiles;   /* 2x2 output tiles per image column, row, and in all */
    int64_t O_pad;                     /* O rounded up to MR                                 */
    int64_t tb;                        /* tiles per block, a multiple of the micro-kernel's  */
    int64_t blocks;
    int relu;
    /* where the 3x3 taps of output channel o and input channel c start (o * w_o + c * w_c), and
     * whether they are read reversed: conv2d_input_grad convolves with the transposed, flipped
     * kernel, read in place */
    int64_t w_o, w_c;
    int flipped;
} conv_geom;

/* tap k (row-major) of the 3x3 kernel at w */
#define TAP(g, w, k) ((w)[(g)->flipped ? 8 - (k) : (k)])

/* A run of consecutive tiles within one tile row: image n, tile row i, tile columns j0..j0+len-1,
 * the first of them `local` tiles after the start of the block or panel being walked. */
typedef struct {
    int64_t n, i, j0, len, local;
} tile_run;

#define MAX_BLOCK_TILES (MAX_PANELS * NR_VECS * VEC_BYTES / 4)   /* the most tiles a block holds (float) */

/* The runs that tiles [t0, t0 + count) fall into, in order; returns their number (<= count). */
static int64_t tile_runs(const conv_geom *g, int64_t t0, int64_t count, tile_run *runs) {
    int64_t per_image = g->tiles_h * g->tiles_w, n = 0;
    for (int64_t t = t0; t < t0 + count; n++) {
        int64_t rem = t % per_image;
        tile_run r = {t / per_image, rem / g->tiles_w, rem % g->tiles_w, 0, t - t0};
        r.len = ember_min64(g->tiles_w - r.j0, t0 + count - t);
        runs[n] = r;
        t += r.len;
    }
    return n;
}

/* Tiles per block: as many micro-kernel widths (nr tiles) as keep V within BLOCK_V_BYTES, but
 * few enough that every thread gets BLOCKS_PER_THREAD blocks when the image allows. */
static int64_t tiles_per_block(const conv_geom *g, int64_t nr, int64_t itemsize, int nthreads) {
    int64_t panels = BLOCK_V_BYTES / ember_max64(1, 16 * g->C * nr * itemsize);
    int64_t spread = (g->tiles + nr * BLOCKS_PER_THREAD * nthreads - 1) / (nr * BLOCKS_PER_THREAD * nthreads);
    return nr * ember_max64(1, ember_min64(MAX_PANELS, ember_min64(panels, spread)));
}

#define CONV_T float
#define CONV_NAME(name) name##_f32
#include "conv.c"
#undef CONV_T
#undef CONV_NAME

#define CONV_T double
#define CONV_NAME(name) name##_f64
#include "conv.c"
#undef CONV_T
#undef CONV_NAME

static int valid_operands(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                          const ember_tensor *bias, int64_t ph, int64_t pw) {
    if (ember_check_desc(out) || ember_check_desc(x) || ember_check_desc(weight) || (bias && ember_check_desc(bias)))
        return 0;
    if (out->ndim != 4 || x->ndim != 4 || weight->ndim != 4 || x->dtype != out->dtype || weight->dtype != out->dtype)
        return 0;
    if (!ember_is_contiguous(out) || !ember_is_contiguous(x) || !ember_is_contiguous(weight)) return 0;
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0] || bias->dtype != out->dtype ||
                 !ember_is_contiguous(bias)))
        return 0;
    return ph >= 0 && pw >= 0 && weight->shape[1] == x->shape[1] && weight->shape[2] == 3 && weight->shape[3] == 3 &&
           out->shape[0] == x->shape[0] && out->shape[1] == weight->shape[0] &&
           out->shape[2] == x->shape[2] + 2 * ph - 2 && out->shape[3] == x->shape[3] + 2 * pw - 2;
}

/* The tiling of g's output, then the typed kernel. */
static int run_conv3x3(conv_geom *g, const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                       const ember_tensor *bias) {
    if (ember_numel(out) == 0) return EMBER_OK;
    if (g->C == 0) return EMBER_ERR_INVALID_ARGUMENT;   /* the caller fills out with the bias (or zeros) */
    g->tiles_h = (g->OH + 1) / 2;
    g->tiles_w = (g->OW + 1) / 2;
    g->tiles = g->N * g->tiles_h * g->tiles_w;
    g->O_pad = (g->O + MR - 1) / MR * MR;
    const void *b = bias ? ember_base(bias) : NULL;
    if (out->dtype == EMBER_FLOAT32)
        return conv3x3_f32(g, &(operands_f32){(float *)ember_base(out), (const float *)ember_base(x),
                                               (const float *)ember_base(weight), b});
    return conv3x3_f64(g, &(operands_f64){(double *)ember_base(out), (const double *)ember_base(x),
                                           (const double *)ember_base(weight), b});
}

int ember_cpu_conv2d_3x3(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, int64_t pad_h, int64_t pad_w, int relu) {
    if (!valid_operands(out, x, weight, bias, pad_h, pad_w)) return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    if (ember_numel(out) > 0 && x->shape[1] > 0 && ember_cpu_conv3x3_direct_takes(out, x))
        return ember_cpu_conv3x3_direct(out, x, weight, bias, pad_h, pad_w, relu);
    conv_geom g = {.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .O = weight->shape[0],
                   .OH = out->shape[2], .OW = out->shape[3], .ph = pad_h, .pw = pad_w, .relu = relu != 0,
                   .w_o = x->shape[1] * 9, .w_c = 9};
    return run_conv3x3(&g, out, x, weight, bias);
}

/* A stride-1 transposed convolution is a convolution with the transposed, flipped kernel and
 * padding 2 - p: the same Winograd kernel, reading weight (O, C, 3, 3) as (C, O, 3, 3) reversed. */
int ember_cpu_conv2d_3x3_input_grad(const ember_tensor *out, const ember_tensor *grad_output,
                                    const ember_tensor *weight, int64_t pad_h, int64_t pad_w) {
    if (ember_check_desc(out) || ember_check_desc(grad_output) || ember_check_desc(weight) || out->ndim != 4 ||
        grad_output->ndim != 4 || weight->ndim != 4 || grad_output->dtype != out->dtype ||
        weight->dtype != out->dtype || !ember_is_contiguous(out) || !ember_is_contiguous(grad_output) ||
        !ember_is_contiguous(weight) || pad_h < 0 || pad_h > 2 || pad_w < 0 || pad_w > 2)
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t N = out->shape[0], C = out->shape[1], H = out->shape[2], W = out->shape[3], O = weight->shape[0];
    if (weight->shape[1] != C || weight->shape[2] != 3 || weight->shape[3] != 3 || grad_output->shape[0] != N ||
        grad_output->shape[1] != O || grad_output->shape[2] != H + 2 * pad_h - 2 ||
        grad_output->shape[3] != W + 2 * pad_w - 2)
        return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    conv_geom g = {.N = N, .C = O, .H = grad_output->shape[2], .W = grad_output->shape[3], .O = C, .OH = H, .OW = W,
                   .ph = 2 - pad_h, .pw = 2 - pad_w, .w_o = 9, .w_c = C * 9, .flipped = 1};
    return run_conv3x3(&g, out, grad_output, weight, NULL);
}

#else /* ---- the typed part: CONV_T is float or double, CONV_NAME(f) names f for it ----------- */

#define T CONV_T
#define VEC CONV_NAME(vec)
#define LANES ((int64_t)(VEC_BYTES / sizeof(T)))
#define NR (NR_VECS * LANES)

typedef T VEC __attribute__((vector_size(VEC_BYTES)));

/* U = G g G^T for every (o, c) pair in [p0, p1) (pair p = o * C + c; o up to O_pad, rows past O
 * zero), computed in double and stored packed: U[k][o / MR][c][o % MR].
 *   G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]] */
static void CONV_NAME(transform_weights)(const conv_geom *g, const T *weight, T *U, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        int64_t o = p / g->C, c = p % g->C;
        double gg[4][3] = {{0}}, u[4][4];
        if (o < g->O) {
            const T *w = weight + o * g->w_o + c * g->w_c;
            for (int q = 0; q < 3; q++) {
                gg[0][q] = TAP(g, w, q);
                gg[1][q] = 0.5 * ((double)TAP(g, w, q) + TAP(g, w, 3 + q) + TAP(g, w, 6 + q));
                gg[2][q] = 0.5 * ((double)TAP(g, w, q) - TAP(g, w, 3 + q) + TAP(g, w, 6 + q));
                gg[3][q] = TAP(g, w, 6 + q);
            }
        }
        for (int a = 0; a < 4; a++) {
            u[a][0] = gg[a][0];
            u[a][1] = 0.5 * (gg[a][0] + gg[a][1] + gg[a][2]);
            u[a][2] = 0.5 * (gg[a][0] - gg[a][1] + gg[a][2]);
            u[a][3] = gg[a][2];
        }
        int64_t panels = g->O_pad / MR;
        for (int k = 0; k < 16; k++)
            U[((k * panels + o / MR) * g->C + c) * MR + o % MR] = (T)u[k / 4][k % 4];
    }
}

/* dst[u] = row[first + u] for u in [0, n), zero where that column is outside [0, W) or row is NULL.
 * One masked vector loop: runs are often a few tiles long (8x8 images: 4), where memset + memcpy
 * + memset calls cost several times the copy. */
static inline void CONV_NAME(copy_padded)(T *restrict dst, const T *restrict row, int64_t first, int64_t n,
                                          int64_t W) {
    if (!row) {
        memset(dst, 0, (size_t)n * sizeof(T));
        return;
    }
#pragma omp simd
    for (int64_t u = 0; u < n; u++) dst[u] = first + u >= 0 && first + u < W ? row[first + u] : 0;
}

/* V = B^T d B of the block's `count` tiles starting at flattened tile t0, into V[k][c][tb], the
 * columns up to the next multiple of NR zero (the micro-kernel reads them).  Per channel, each of
 * a tile's 4 input rows is first copied, zero-padded, into `patches` (8 rows of 2 tb): row 2q
 * holds columns 0-1 of every tile's row q, row 2q + 1 columns 2-3, at 2 x the tile's place in the
 * block; so one loop over the whole block (no per-run remainders) reads every patch.
 *   B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]] */
static void CONV_NAME(transform_input)(const conv_geom *g, const T *x, int64_t t0, int64_t count, T *V, T *patches) {
    tile_run runs[MAX_BLOCK_TILES];
    int64_t nruns = tile_runs(g, t0, count, runs), span = 2 * g->tb, plane = g->C * g->tb;
    int64_t padded = (count + NR - 1) / NR * NR;
    for (int64_t a = 0; a < 8; a++) memset(patches + a * span + 2 * count, 0, (size_t)(2 * (padded - count)) * sizeof(T));
    for (int64_t c = 0; c < g->C; c++) {
        for (int64_t k = 0; k < nruns; k++) {
            const tile_run *r = &runs[k];
            const T *image = x + (r->n * g->C + c) * g->H * g->W;
            int64_t first = 2 * r->j0 - g->pw;
            for (int64_t q = 0; q < 4; q++) {
                int64_t y = 2 * r->i - g->ph + q;
                const T *row = y >= 0 && y < g->H ? image + y * g->W : NULL;
                CONV_NAME(copy_padded)(patches + 2 * q * span + 2 * r->local, row, first, 2 * r->len, g->W);
                CONV_NAME(copy_padded)(patches + (2 * q + 1) * span + 2 * r->local, row, first + 2, 2 * r->len, g->W);
            }
        }
        T *v = V + c * g->tb;
#pragma omp simd
        for (int64_t m = 0; m < padded; m++) {
            T h[4][4];   /* B^T d: row q of d is (left[2m], left[2m + 1], right[2m], right[2m + 1]) */
            for (int q = 0; q < 4; q++) {
                const T *left = patches + 2 * q * span, *right = left + span;
                T d0 = left[2 * m], d1 = left[2 * m + 1], d2 = right[2 * m], d3 = right[2 * m + 1];
                h[q][0] = d0 - d2;
                h[q][1] = d1 + d2;
                h[q][2] = d2 - d1;
                h[q][3] = d1 - d3;
            }
            for (int b = 0; b < 4; b++) {   /* (B^T d) B, stored transposed: v[4 b + q] */
                v[(0 + b) * plane + m] = h[0][b] - h[2][b];
                v[(4 + b) * plane + m] = h[1][b] + h[2][b];
                v[(8 + b) * plane + m] = h[2][b] - h[1][b];
                v[(12 + b) * plane + m] = h[1][b] - h[3][b];
            }
        }
    }
}
/* m(MR, NR) = u(MR, C) @ v(C, NR): u packed c-major (MR values per c), v's rows `vstride` apart
 * and aligned to VEC_BYTES, as m's. */
static void CONV_NAME(micro_kernel)(int64_t C, const T *restrict u, const T *restrict v, int64_t vstride,
                                    T *restrict m) {
    VEC acc[MR][NR_VECS] = {{{0}}};
    for (int64_t c = 0; c < C; c++) {
        const VEC *b = (const VEC *)(v + c * vstride);
        VEC b0 = b[0], b1 = b[1], b2 = b[2];
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            T a = u[c * MR + r];
            acc[r][0] += b0 * a;
            acc[r][1] += b1 * a;
            acc[r][2] += b2 * a;
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 3
        for (int q = 0; q < NR_VECS; q++) ((VEC *)(m + r * NR))[q] = acc[r][q];
}

/* The 2x2 outputs of the tile at column m of M[k][o][NR] (planes `plane` apart): A^T M A + shift,
 * then relu.   A^T = [[1, 1, 1, 0], [0, 1, -1, -1]] */
typedef struct {
    T top_left, top_right, bottom_left, bottom_right;
} CONV_NAME(tile_2x2);

static inline CONV_NAME(tile_2x2) CONV_NAME(tile_outputs)(const T *mo, int64_t plane, int64_t m, T shift, int relu) {
    T s0[4], s1[4];
    for (int b = 0; b < 4; b++) {
        T m0 = mo[b * plane + m], m1 = mo[(4 + b) * plane + m];
        T m2 = mo[(8 + b) * plane + m], m3 = mo[(12 + b) * plane + m];
        s0[b] = m0 + m1 + m2;
        s1[b] = m1 - m2 - m3;
    }
    CONV_NAME(tile_2x2) y = {s0[0] + s0[1] + s0[2] + shift, s0[1] - s0[2] - s0[3] + shift,
                             s1[0] + s1[1] + s1[2] + shift, s1[1] - s1[2] - s1[3] + shift};
    if (relu) {   /* NaN stays NaN */
        y.top_left = y.top_left < 0 ? 0 : y.top_left;
        y.top_right = y.top_right < 0 ? 0 : y.top_right;
        y.bottom_left = y.bottom_left < 0 ? 0 : y.bottom_left;
        y.bottom_right = y.bottom_right < 0 ? 0 : y.bottom_right;
    }
    return y;
}

/* The operands of one call. */
typedef struct {
    T *out;
    const T *x, *weight, *bias;
} CONV_NAME(operands);

/* out[n, o, oy, ox] by the definition (direct sum over c and the 3x3 window, then relu), for the
 * outputs that Winograd's transforms made non-finite: there an Inf or NaN input spreads to every
 * output of its tile, and Inf - Inf turns an Inf into NaN, where the direct sum keeps both to the
 * outputs whose window holds them. */
static T CONV_NAME(direct_output)(const conv_geom *g, const CONV_NAME(operands) *a, int64_t n, int64_t o,
                                  int64_t oy, int64_t ox) {
    T sum = a->bias ? a->bias[o] : 0;
    for (int64_t c = 0; c < g->C; c++) {
        const T *image = a->x + (n * g->C + c) * g->H * g->W, *w = a->weight + o * g->w_o + c * g->w_c;
        for (int64_t p = 0; p < 3; p++) {
            int64_t y = oy - g->ph + p;
            for (int64_t q = 0; q < 3 && y >= 0 && y < g->H; q++) {
                int64_t col = ox - g->pw + q;
                if (col >= 0 && col < g->W) sum += image[y * g->W + col] * TAP(g, w, p * 3 + q);
            }
        }
    }
    return g->relu && sum < 0 ? 0 : sum;
}

/* Y = A^T M A (+ bias, relu) of the panel's `count` tiles starting at flattened tile t0, from
 * M[k][o][NR], written into out.  Per output channel, the tiles' top and bottom rows are first
 * formed in `rows` (2 x 2 NR), in one loop over the panel, then copied into out run by run,
 * without a tile's right column or bottom row that falls outside out (odd OW or OH).  The loop
 * also sums every output times 0, which is NaN exactly when one of them is not finite: only then
 * are the panel's non-finite outputs recomputed directly. */
static void CONV_NAME(transform_output)(const conv_geom *g, const CONV_NAME(operands) *a, const T *M, int64_t t0,
                                        int64_t count, T *rows) {
    tile_run runs[NR];
    int64_t nruns = tile_runs(g, t0, count, runs), plane = g->O_pad * NR;
    T *top = rows, *bottom = rows + 2 * NR;
    for (int64_t o = 0; o < g->O; o++) {
        const T *mo = M + o * NR;
        T shift = a->bias ? a->bias[o] : 0, poison = 0;
#pragma omp simd reduction(+ : poison)
        for (int64_t m = 0; m < NR; m++) {
            CONV_NAME(tile_2x2) y = CONV_NAME(tile_outputs)(mo, plane, m, shift, g->relu);
            top[2 * m] = y.top_left;
            top[2 * m + 1] = y.top_right;
            bottom[2 * m] = y.bottom_left;
            bottom[2 * m + 1] = y.bottom_right;
            poison += (y.top_left + y.top_right + y.bottom_left + y.bottom_right) * 0;
        }
        for (int64_t k = 0; k < nruns; k++) {
            const tile_run *r = &runs[k];
            int64_t width = ember_min64(2 * r->len, g->OW - 2 * r->j0);
            if (poison != 0)
                for (int64_t u = 2 * r->local; u < 2 * r->local + width; u++) {
                    int64_t ox = 2 * r->j0 + u - 2 * r->local;
                    if (!isfinite(top[u])) top[u] = CONV_NAME(direct_output)(g, a, r->n, o, 2 * r->i, ox);
                    if (!isfinite(bottom[u]) && 2 * r->i + 1 < g->OH)
                        bottom[u] = CONV_NAME(direct_output)(g, a, r->n, o, 2 * r->i + 1, ox);
                }
            T *dst = a->out + ((r->n * g->O + o) * g->OH + 2 * r->i) * g->OW + 2 * r->j0;
            memcpy(dst, top + 2 * r->local, (size_t)width * sizeof(T));
            if (2 * r->i + 1 < g->OH) memcpy(dst + g->OW, bottom + 2 * r->local, (size_t)width * sizeof(T));
        }
    }
}

static int CONV_NAME(conv3x3)(conv_geom *g, const CONV_NAME(operands) *a) {
    int64_t work = g->tiles * g->O * g->C, panels = g->O_pad / MR;
    int nthreads = ember_threads_for(work, g->tiles);
    g->tb = tiles_per_block(g, NR, sizeof(T), nthreads);
    g->blocks = (g->tiles + g->tb - 1) / g->tb;
    nthreads = ember_threads_for(work, g->blocks);
    /* per thread: V [16][C][tb], M [16][O_pad][NR], patches [8][2 tb] (also the output rows) */
    int64_t v_len = 16 * g->C * g->tb, m_len = 16 * g->O_pad * NR, patches_len = 16 * g->tb;
    int64_t per_thread = v_len + m_len + patches_len, u_len = 16 * g->O_pad * g->C;
    T *U = ember_cpu_alloc((u_len + nthreads * per_thread) * (int64_t)sizeof(T));
    if (!U) return EMBER_ERR_OUT_OF_MEMORY;
#pragma omp parallel num_threads(nthreads)
    {
        int me = omp_get_thread_num(), team = omp_get_num_threads();
        int64_t pairs = g->O_pad * g->C;
        CONV_NAME(transform_weights)(g, a->weight, U, pairs * me / team, pairs * (me + 1) / team);
        T *V = U + u_len + me * per_thread, *M = V + v_len, *patches = M + m_len;
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < g->blocks; blk++) {
            int64_t t0 = blk * g->tb, count = ember_min64(g->tb, g->tiles - t0);
            CONV_NAME(transform_input)(g, a->x, t0, count, V, patches);
            for (int64_t p0 = 0; p0 < count; p0 += NR) {
                for (int k = 0; k < 16; k++)
                    for (int64_t ob = 0; ob < panels; ob++)
                        CONV_NAME(micro_kernel)(g->C, U + (k * panels + ob) * g->C * MR,
                                                V + k * g->C * g->tb + p0, g->tb, M + (k * g->O_pad + ob * MR) * NR);
                CONV_NAME(transform_output)(g, a, M, t0 + p0, ember_min64(NR, count - p0), patches);
            }
        }
    }
    ember_cpu_free(U);
    return EMBER_OK;
}

#undef T
#undef VEC
#undef LANES
#undef NR

#endif

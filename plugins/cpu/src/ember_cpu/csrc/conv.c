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
 *
 * The plan (one parallel region):
 *   1. U for every (o, c), in double precision, packed for the micro-kernel: U[k][o / MR][c][o % MR]
 *      (rows beyond O are zeros, so the micro-kernel never needs an edge case in o);
 *   2. the output tiles (n, tile row, tile column), flattened, are cut into blocks of `tb` tiles,
 *      taken by the threads one block at a time.  Per block:
 *      a. input transform: each channel's 4 input rows of a run of tiles are copied, zero-padded
 *         and split into even and odd columns ("strips"), so every tile reads its 4x4 patch with
 *         unit-stride loads and no bounds checks; V goes to a [16][C][tb] buffer (L2-resident);
 *      b. per NR tiles: 16 x (O / MR) micro-kernel calls M[k] = U[k] @ V[k] into an L2-resident
 *         [16][O][NR] buffer, then the output transform adds the bias, applies relu and writes
 *         the 2x2 tiles into NCHW out (the last row or column of tiles may be half outside it).
 * The micro-kernel keeps an MR x NR block of M in registers (8 x 48 floats: 24 zmm accumulators)
 * and reads V rows in place: the block buffer already is the packed panel a GEMM would make.
 *
 * The typed code lives in the second half of this file, which includes itself once per dtype
 * (float and double): GCC vector types of 64 bytes make it AVX-512 code where the CPU has it
 * and plain SIMD code elsewhere, from one text.
 */
#ifndef CONV_T

#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "common.h"
#include "ember_cpu.h"

#define MR 8                     /* output channels per micro-kernel                           */
#define VEC_BYTES 64             /* one AVX-512 register                                       */
#define NR_VECS 3                /* tiles per micro-kernel: 3 vectors (48 floats, 24 doubles)  */
#define MAX_PANELS 4             /* a block holds at most 4 micro-kernel widths of tiles       */
#define BLOCK_V_BYTES (1 << 20)  /* a block's V buffer stays within ~1 MiB of the 2 MiB L2     */
#define BLOCKS_PER_THREAD 4      /* enough blocks that a descheduled thread delays little      */
#define MACS_PER_WORK 16         /* as matmul.c: 2^19 multiply-adds are EMBER_PARALLEL_GRAIN   */

typedef struct {
    int64_t N, C, H, W, O, OH, OW, ph, pw;
    int64_t tiles_h, tiles_w, tiles;   /* 2x2 output tiles per image column, row, and in all */
    int64_t O_pad;                     /* O rounded up to MR                                 */
    int64_t tb;                        /* tiles per block, a multiple of the micro-kernel's  */
    int64_t blocks;
    int relu;
} conv_geom;

/* A run of consecutive tiles within one tile row: image n, tile row i, tile columns j0..j0+len-1,
 * the first of them `local` tiles after the start of the block or panel being walked. */
typedef struct {
    int64_t n, i, j0, len, local;
} tile_run;

/* The run starting at flattened tile t, clipped to `end`. */
static inline tile_run run_at(const conv_geom *g, int64_t t, int64_t end, int64_t first) {
    int64_t per_image = g->tiles_h * g->tiles_w, rem = t % per_image;
    tile_run r = {t / per_image, rem / g->tiles_w, rem % g->tiles_w, 0, t - first};
    r.len = ember_min64(g->tiles_w - r.j0, end - t);
    return r;
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

int ember_cpu_conv2d_3x3(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, int64_t pad_h, int64_t pad_w, int relu) {
    if (!valid_operands(out, x, weight, bias, pad_h, pad_w)) return EMBER_ERR_INVALID_ARGUMENT;
    if (out->dtype != EMBER_FLOAT32 && out->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    conv_geom g = {.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .O = weight->shape[0],
                   .OH = out->shape[2], .OW = out->shape[3], .ph = pad_h, .pw = pad_w, .relu = relu != 0};
    if (ember_numel(out) == 0) return EMBER_OK;
    if (g.C == 0) return EMBER_ERR_INVALID_ARGUMENT;   /* the caller fills out with the bias instead */
    g.tiles_h = (g.OH + 1) / 2;
    g.tiles_w = (g.OW + 1) / 2;
    g.tiles = g.N * g.tiles_h * g.tiles_w;
    g.O_pad = (g.O + MR - 1) / MR * MR;
    const void *b = bias ? ember_base(bias) : NULL;
    if (out->dtype == EMBER_FLOAT32)
        return conv3x3_f32(&g, (float *)ember_base(out), (const float *)ember_base(x),
                           (const float *)ember_base(weight), b);
    return conv3x3_f64(&g, (double *)ember_base(out), (const double *)ember_base(x),
                       (const double *)ember_base(weight), b);
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
            const T *w = weight + p * 9;
            for (int q = 0; q < 3; q++) {
                gg[0][q] = w[q];
                gg[1][q] = 0.5 * ((double)w[q] + w[3 + q] + w[6 + q]);
                gg[2][q] = 0.5 * ((double)w[q] - w[3 + q] + w[6 + q]);
                gg[3][q] = w[6 + q];
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

/* even[m], odd[m] for m in [m0, m1): row[first + 2m], row[first + 2m + 1], zero outside [0, W). */
static void CONV_NAME(split_edge)(const T *row, int64_t W, int64_t first, int64_t m0, int64_t m1, T *even, T *odd) {
    for (int64_t m = m0; m < m1; m++) {
        int64_t col = first + 2 * m;
        even[m] = col >= 0 && col < W ? row[col] : 0;
        odd[m] = col + 1 >= 0 && col + 1 < W ? row[col + 1] : 0;
    }
}

/* One input row of a run of `len` tiles, zero-padded and split by column parity:
 * even[m] = row[2 (j0 + m) - pw], odd[m] = row[2 (j0 + m) + 1 - pw] for m in [0, len]
 * (the last pair is the right half of the last tile's 4 columns); row NULL: all zeros. */
static void CONV_NAME(split_row)(const conv_geom *g, const T *row, int64_t j0, int64_t len, T *even, T *odd) {
    if (!row) {
        memset(even, 0, (size_t)(len + 1) * sizeof(T));
        memset(odd, 0, (size_t)(len + 1) * sizeof(T));
        return;
    }
    int64_t first = 2 * j0 - g->pw;   /* column of even[0] (negative: in the padding) */
    /* m in [lo, hi): both columns inside the row (C division truncates; the clamps absorb it) */
    int64_t lo = ember_min64(len + 1, ember_max64(0, (1 - first) / 2));
    int64_t hi = ember_max64(lo, ember_min64(len + 1, (g->W - first) / 2));
    CONV_NAME(split_edge)(row, g->W, first, 0, lo, even, odd);
    CONV_NAME(split_edge)(row, g->W, first, hi, len + 1, even, odd);
    if (lo == hi) return;
    const T *src = row + first + 2 * lo;
#pragma omp simd
    for (int64_t m = 0; m < hi - lo; m++) {
        even[lo + m] = src[2 * m];
        odd[lo + m] = src[2 * m + 1];
    }
}

/* V = B^T d B of the block's `count` tiles starting at flattened tile t0, into V[k][c][tb];
 * the columns up to the next multiple of NR are zeroed (the micro-kernel reads them).
 *   B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]] */
static void CONV_NAME(transform_input)(const conv_geom *g, const T *x, int64_t t0, int64_t count, T *V, T *strips) {
    int64_t stride = g->tb + 1, plane = g->C * g->tb;
    for (int64_t t = t0; t < t0 + count;) {
        tile_run r = run_at(g, t, t0 + count, t0);
        for (int64_t c = 0; c < g->C; c++) {
            const T *image = x + (r.n * g->C + c) * g->H * g->W;
            for (int64_t q = 0; q < 4; q++) {
                int64_t y = 2 * r.i - g->ph + q;
                CONV_NAME(split_row)(g, y >= 0 && y < g->H ? image + y * g->W : NULL, r.j0, r.len,
                                     strips + 2 * q * stride, strips + (2 * q + 1) * stride);
            }
            const T *e0 = strips, *o0 = e0 + stride, *e1 = o0 + stride, *o1 = e1 + stride;
            const T *e2 = o1 + stride, *o2 = e2 + stride, *e3 = o2 + stride, *o3 = e3 + stride;
            T *v = V + c * g->tb + r.local;
#pragma omp simd
            for (int64_t m = 0; m < r.len; m++) {
                /* rows of B^T d B, row q's 4 columns being (e[m], o[m], e[m + 1], o[m + 1]) */
                T h[4][4];
                const T *e[4] = {e0, e1, e2, e3}, *o[4] = {o0, o1, o2, o3};
                for (int q = 0; q < 4; q++) {
                    h[q][0] = e[q][m] - e[q][m + 1];
                    h[q][1] = o[q][m] + e[q][m + 1];
                    h[q][2] = e[q][m + 1] - o[q][m];
                    h[q][3] = o[q][m] - o[q][m + 1];
                }
                for (int b = 0; b < 4; b++) {
                    v[(0 + b) * plane + m] = h[0][b] - h[2][b];
                    v[(4 + b) * plane + m] = h[1][b] + h[2][b];
                    v[(8 + b) * plane + m] = h[2][b] - h[1][b];
                    v[(12 + b) * plane + m] = h[1][b] - h[3][b];
                }
            }
        }
        t += r.len;
    }
    int64_t padded = ember_min64(g->tb, (count + NR - 1) / NR * NR);
    if (padded > count)
        for (int64_t row = 0; row < 16 * g->C; row++)
            memset(V + row * g->tb + count, 0, (size_t)(padded - count) * sizeof(T));
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

/* Y = A^T M A (+ bias, relu) of the panel's `count` tiles starting at flattened tile t0, from
 * M[k][o][NR], written into out.  A tile's right column outside out (odd OW) is skipped; its
 * bottom row outside out (odd OH) goes to `junk`, a scratch row of at least 2 NR, so that the
 * loop stays branch-free. */
static void CONV_NAME(transform_output)(const conv_geom *g, T *out, const T *bias, const T *M, int64_t t0,
                                        int64_t count, T *junk) {
    int64_t plane = g->O_pad * NR;
    for (int64_t t = t0; t < t0 + count;) {
        tile_run r = run_at(g, t, t0 + count, t0);
        int64_t whole = 2 * (r.j0 + r.len) > g->OW ? r.len - 1 : r.len;   /* tiles with both columns */
        for (int64_t o = 0; o < g->O; o++) {
            const T *mo = M + o * NR + r.local;
            T shift = bias ? bias[o] : 0;
            T *top = out + ((r.n * g->O + o) * g->OH + 2 * r.i) * g->OW + 2 * r.j0;
            T *bottom = 2 * r.i + 1 < g->OH ? top + g->OW : junk;
#pragma omp simd
            for (int64_t m = 0; m < whole; m++) {
                CONV_NAME(tile_2x2) y = CONV_NAME(tile_outputs)(mo, plane, m, shift, g->relu);
                top[2 * m] = y.top_left;
                top[2 * m + 1] = y.top_right;
                bottom[2 * m] = y.bottom_left;
                bottom[2 * m + 1] = y.bottom_right;
            }
            if (whole < r.len) {
                CONV_NAME(tile_2x2) y = CONV_NAME(tile_outputs)(mo, plane, whole, shift, g->relu);
                top[2 * whole] = y.top_left;
                bottom[2 * whole] = y.bottom_left;
            }
        }
        t += r.len;
    }
}

static int CONV_NAME(conv3x3)(conv_geom *g, T *out, const T *x, const T *weight, const T *bias) {
    int64_t work = g->tiles * g->O * g->C, panels = g->O_pad / MR;
    int nthreads = ember_threads_for(work, g->tiles);
    g->tb = tiles_per_block(g, NR, sizeof(T), nthreads);
    g->blocks = (g->tiles + g->tb - 1) / g->tb;
    nthreads = ember_threads_for(work, g->blocks);
    /* per thread: V [16][C][tb], M [16][O_pad][NR], strips 8 x (tb + 1) (also the junk row) */
    int64_t v_len = 16 * g->C * g->tb, m_len = 16 * g->O_pad * NR;
    int64_t strips_len = (8 * (g->tb + 1) + LANES - 1) / LANES * LANES;
    int64_t per_thread = v_len + m_len + strips_len, u_len = 16 * g->O_pad * g->C;
    T *U = ember_cpu_alloc((u_len + nthreads * per_thread) * (int64_t)sizeof(T));
    if (!U) return EMBER_ERR_OUT_OF_MEMORY;
#pragma omp parallel num_threads(nthreads)
    {
        int me = omp_get_thread_num(), team = omp_get_num_threads();
        int64_t pairs = g->O_pad * g->C;
        CONV_NAME(transform_weights)(g, weight, U, pairs * me / team, pairs * (me + 1) / team);
        T *V = U + u_len + me * per_thread, *M = V + v_len, *strips = M + m_len;
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < g->blocks; blk++) {
            int64_t t0 = blk * g->tb, count = ember_min64(g->tb, g->tiles - t0);
            CONV_NAME(transform_input)(g, x, t0, count, V, strips);
            for (int64_t p0 = 0; p0 < count; p0 += NR) {
                for (int k = 0; k < 16; k++)
                    for (int64_t ob = 0; ob < panels; ob++)
                        CONV_NAME(micro_kernel)(g->C, U + (k * panels + ob) * g->C * MR,
                                                V + k * g->C * g->tb + p0, g->tb, M + (k * g->O_pad + ob * MR) * NR);
                CONV_NAME(transform_output)(g, out, bias, M, t0 + p0, ember_min64(NR, count - p0), strips);
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

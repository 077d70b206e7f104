/*
 * conv2d of 3x3 kernels at stride 1 over few input channels (float32, AVX-512): a direct kernel.
 *
 * Why: Winograd (conv.c) saves multiplies in its 16 GEMMs over the input channels; with one to a
 * few channels there is next to nothing to sum, and its input and output transforms are the whole
 * cost.  The demo's first layer (32x1x8x8 -> 16) took ~65 us there, for 0.3 M multiply-adds.
 *
 * Here the output is a matrix product out^T (positions x O) = taps (positions x C*9) @ W^T, where
 * the taps of output position (oy, ox) for (c, ky, kx) are x_padded[c, oy + ky, ox + kx].  Over a
 * padded image flattened row by row, position q = oy * Wp + ox reads x_padded_flat[c][q + ky * Wp
 * + kx], so a tile of DC_ROWS consecutive q (spanning row ends: the columns ox >= OW in between
 * are computed and dropped) reads each tap row in place, as broadcasts with kx an immediate:
 *
 *   acc[q][o..o+31] += x_padded_flat[c][q + ky * Wp + kx] * W^T[(c, ky, kx)][o..o+31]
 *
 * 24 FMAs per 2 vector loads and 12 broadcasts.  A tile's valid rows go to a per-thread buffer of
 * positions x channels, transposed into NCHW band by band.  Every output is one thread's sum in
 * one order, so the bits do not depend on the thread count.
 *
 * Where it pays (native call, 2 threads, direct / Winograd time, median of 11 alternating rounds):
 * 32xCx8x8 -> 16 with C = 1, 2, 3, 4, 8: 0.39, 0.36, 0.41, 0.69, 0.79; 64x1x28x28 -> 32 0.54;
 * 1x3x224x224 -> 32 / 64 0.71 / 0.87; 8x3x32x32 -> 32 0.98; but 8x8x32x32 -> 32 1.29 and
 * 32x16x8x8 -> 32 1.02: conv.c routes float32 calls of at most EMBER_CPU_DIRECT_MAX_CHANNELS here.
 * In the demo's training step the first layer went from ~65 to ~29 us.  At 224x224 a third of the
 * time is the final transpose, whose rows (one per channel plane, 196 KiB apart) share L1 sets.
 */
#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "common.h"
#include "conv_direct.h"
#include "ember_cpu.h"
#include "gemm_f32.h"

#if defined(__AVX512F__)
#define DC_ROWS 12                   /* positions per tile: 12 rows x 2 vectors = 24 zmm          */
#define DC_BAND_POSITIONS 1024       /* output positions per task: its buffer stays in L2          */

typedef struct {
    const float *xpad, *wt, *bias;   /* x padded to (N, C, Hp, Wp) plus DC_ROWS of slack; W^T (C*9, OV) */
    float *out;
    int64_t C, Hp, Wp, O, OH, OW, OV, band_rows;
    int relu;
} direct_job;

/* out^T rows for the valid positions among q0..q0+DC_ROWS-1 of image n's band starting at output
 * row oy0, channels o0..o0+16*VECS, into buf (positions of the band x OV). */
static inline __attribute__((always_inline)) void direct_tile(const int VECS, const direct_job *j, int64_t n,
                                                              int64_t q0, int64_t oy0, int64_t o0, float *buf) {
    __m512 acc[DC_ROWS][2];
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (j->bias) {   /* lanes past O stay zero (and are never stored into out) */
        b0 = _mm512_maskz_loadu_ps(lanes_16(0, j->O - o0), j->bias + o0);
        if (VECS > 1) b1 = _mm512_maskz_loadu_ps(lanes_16(0, j->O - o0 - 16), j->bias + o0 + 16);
    }
#pragma GCC unroll 12
    for (int r = 0; r < DC_ROWS; r++) {
        acc[r][0] = b0;
        acc[r][1] = b1;
    }
    const int64_t plane = j->Hp * j->Wp;
    const float *w = j->wt + o0;
    for (int64_t c = 0; c < j->C; c++)
#pragma GCC unroll 1
        for (int64_t ky = 0; ky < 3; ky++) {
            const float *row = j->xpad + (n * j->C + c) * plane + ky * j->Wp + q0;
#pragma GCC unroll 3
            for (int kx = 0; kx < 3; kx++, w += j->OV) {
                __m512 w0 = _mm512_loadu_ps(w), w1 = VECS > 1 ? _mm512_loadu_ps(w + 16) : w0;
                /* each kx's taps through a pointer the compiler cannot relate to the previous
                 * one: otherwise it keeps the taps two kx share in registers and spills */
                const float *taps = row + kx;
                __asm__("" : "+r"(taps));
#pragma GCC unroll 12
                for (int r = 0; r < DC_ROWS; r++) {
                    __m512 a = _mm512_set1_ps(taps[r]);
                    acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
                    if (VECS > 1) acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
                }
            }
        }
    const __m512 zero = _mm512_setzero_ps();
    int64_t oy = q0 / j->Wp, ox = q0 % j->Wp, oy_end = ember_min64(j->OH, oy0 + j->band_rows);
#pragma GCC unroll 12
    for (int r = 0; r < DC_ROWS; r++, ox++) {
        if (ox == j->Wp) {
            ox = 0;
            oy++;
        }
        if (ox >= j->OW || oy >= oy_end) continue;
        float *dst = buf + ((oy - oy0) * j->OW + ox) * j->OV + o0;
#pragma GCC unroll 2
        for (int v = 0; v < VECS; v++) {
            __m512 y = acc[r][v];
            /* relu as the composite computes it: x where x > 0 or x is NaN, else +0 */
            if (j->relu) y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_NLE_UQ), y);
            _mm512_storeu_ps(dst + 16 * v, y);
        }
    }
}

typedef void (*direct_fn)(const direct_job *j, int64_t n, int64_t q0, int64_t oy0, int64_t o0, float *buf);
static void direct_tile_1(const direct_job *j, int64_t n, int64_t q0, int64_t oy0, int64_t o0, float *buf) {
    direct_tile(1, j, n, q0, oy0, o0, buf);
}
static void direct_tile_2(const direct_job *j, int64_t n, int64_t q0, int64_t oy0, int64_t o0, float *buf) {
    direct_tile(2, j, n, q0, oy0, o0, buf);
}

/* Output rows [oy0, oy0 + band_rows) of image n: every tile, then the band transposed into NCHW. */
static void direct_band(const direct_job *j, int64_t n, int64_t oy0, float *buf) {
    int64_t rows = ember_min64(j->band_rows, j->OH - oy0);
    int64_t q_end = (oy0 + rows - 1) * j->Wp + j->OW;
    for (int64_t o0 = 0; o0 < j->OV; o0 += 32) {
        direct_fn tile = j->OV - o0 >= 32 ? direct_tile_2 : direct_tile_1;
        for (int64_t q0 = oy0 * j->Wp; q0 < q_end; q0 += DC_ROWS) tile(j, n, q0, oy0, o0, buf);
    }
    int64_t plane = j->OH * j->OW;
    ember_cpu_transpose_f32(j->out + n * j->O * plane + oy0 * j->OW, plane, buf, j->OV, rows * j->OW, j->O, 0);
}

int ember_cpu_conv3x3_direct_takes(const ember_tensor *out, const ember_tensor *x) {
    return out->dtype == EMBER_FLOAT32 && x->shape[1] <= EMBER_CPU_DIRECT_MAX_CHANNELS && ember_cpu_sgemm_supported();
}

int ember_cpu_conv3x3_direct(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                             const ember_tensor *bias, int64_t ph, int64_t pw, int relu) {
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], O = weight->shape[0];
    int64_t OH = out->shape[2], OW = out->shape[3], Hp = H + 2 * ph, Wp = W + 2 * pw, OV = (O + 15) / 16 * 16;
    int64_t band_rows = ember_max64(1, ember_min64(OH, DC_BAND_POSITIONS / OW));
    int64_t bands = (OH + band_rows - 1) / band_rows, tasks = N * bands;
    int threads = ember_threads_for(N * OH * OW * O * C * 9, tasks);
    int64_t buf_floats = band_rows * OW * OV;
    float *xpad = ember_cpu_alloc((N * C * Hp * Wp + DC_ROWS) * (int64_t)sizeof(float));
    float *wt = ember_cpu_alloc(C * 9 * OV * (int64_t)sizeof(float));
    float *bufs = ember_cpu_alloc(threads * buf_floats * (int64_t)sizeof(float));
    if (!xpad || !wt || !bufs) {
        ember_cpu_free(xpad);
        ember_cpu_free(wt);
        ember_cpu_free(bufs);
        return EMBER_ERR_OUT_OF_MEMORY;
    }
    /* W^T (C*9, OV), the lanes past O zero */
    const float *xs = (const float *)ember_base(x);
    ember_cpu_transpose_f32(wt, OV, (const float *)ember_base(weight), C * 9, O, C * 9, 1);
    /* the slack past the last plane is read by tiles whose positions are all dropped, but must
     * hold numbers for the FMAs */
    memset(xpad + N * C * Hp * Wp, 0, DC_ROWS * sizeof(float));
    direct_job j = {xpad, wt, bias ? (const float *)ember_base(bias) : NULL, (float *)ember_base(out),
                    C, Hp, Wp, O, OH, OW, OV, band_rows, relu != 0};
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int64_t nc = 0; nc < N * C; nc++) ember_pad_plane_f32(xpad + nc * Hp * Wp, xs + nc * H * W, H, W, ph, pw);
        float *buf = bufs + omp_get_thread_num() * buf_floats;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) direct_band(&j, t / bands, t % bands * band_rows, buf);
    }
    ember_cpu_free(xpad);
    ember_cpu_free(wt);
    ember_cpu_free(bufs);
    return EMBER_OK;
}
#else
int ember_cpu_conv3x3_direct_takes(const ember_tensor *out, const ember_tensor *x) { return 0; }
int ember_cpu_conv3x3_direct(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                             const ember_tensor *bias, int64_t ph, int64_t pw, int relu) {
    return EMBER_ERR_UNSUPPORTED;
}
#endif

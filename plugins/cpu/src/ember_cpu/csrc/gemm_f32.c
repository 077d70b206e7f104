/*
 * ember's own float32 GEMM for AVX-512: c(M, N) = a(M, K) @ b(K, N), every operand with any
 * element strides (transposed, sliced, flipped or broadcast views are read in place: packing
 * copies what the kernel reads anyway, so no scratch copy is ever made first).
 *
 * Why: matmul.c used to run single-threaded OpenBLAS sgemm on one tile per OpenMP thread (see
 * NOTES-threads.md); this kernel and its blocking are tuned for the AVX-512 Xeons we run on, and
 * its edge tiles cost only what they compute.  Measurements are in NOTES-threads.md.
 *
 * The plan (Goto/BLIS), per thread:
 *   for each KC-deep slice of K:
 *     for each chunk of at most MC rows of a: pack it into MR-tall slivers (k-major);
 *       for each NC-wide panel of b: pack it into NR-wide micro-panels (k-major), then run
 *       the MR x NR micro-kernel over every (sliver, micro-panel) pair, slivers outer: a sliver
 *       (28 KiB) stays in L1 while the panel (1 MiB) streams past it from L2.
 *   The first KC slice stores into c and later slices add to it, so c is never read before it
 *   is written; the last one applies the epilogue (bias, relu) as it stores.  Packed buffers are
 *   padded with zeros; edge tiles use a kernel instantiated for their row count and store only
 *   their valid columns (masked).
 * Threads: each takes an independent block of c, a cell of a grid of row and column slices
 * (gemm_grid), and packs its own operands.  Sharing one packed b panel between the threads (each packing
 * half, then a barrier) saves a little packing on a quiet machine, but a barrier per panel makes
 * the whole product wait for whichever thread the OS has descheduled: on a busy machine it
 * measured 1.1-3x slower than independent slices.
 */
#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "common.h"
#include "gemm_f32.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_GEMM_F32_X86 1
#include <immintrin.h>
#endif

/* Columns [j0, cols) of ember_cpu_transpose_f32, one element at a time. */
static void transpose_scalar(float *dst, int64_t dst_step, const float *src, int64_t src_step, int64_t rows,
                             int64_t j0, int64_t cols, int pad) {
    for (int64_t j = j0; j < cols; j++) {
        int64_t i = 0;
        for (; i < rows; i++) dst[j * dst_step + i] = src[i * src_step + j];
        for (; pad && i % 16; i++) dst[j * dst_step + i] = 0.0f;
    }
}

#ifdef EMBER_GEMM_F32_X86

#define MR 14          /* rows of c per micro-kernel: 14 x 2 accumulators + 2 b vectors = 30 zmm */
#define NR 32          /* columns of c per micro-kernel: two 16-float vectors                    */
#ifndef GEMM_MC
#define GEMM_MC 2016   /* most rows of a per packed block (multiple of MR): 4 MiB, L3-resident */
#endif
#ifndef GEMM_KC
#define GEMM_KC 512    /* depth of a packed slice: an MR x KC sliver of a is 28 KiB (L1)       */
#endif
#ifndef GEMM_NC
#define GEMM_NC 512    /* columns of b per packed panel (multiple of NR): 1 MiB (L2)           */
#endif
/* The blocking in use: the defaults above, or EMBER_CPU_GEMM_KC / _NC / _MC (read once at load,
 * NC rounded up to a multiple of NR and MC of MR) so that one run on a new machine can sweep
 * them against its cache sizes.  KC also sets where c's sums are split (the first KC slice is
 * stored, the next ones added), so changing it changes float32 rounding; NC and MC do not. */
typedef struct {
    int64_t kc, nc, mc;
    int64_t row_slices;   /* EMBER_CPU_GEMM_ROW_SLICES: gemm_grid's rows, forced (0: chosen) */
} gemm_blocking;
static gemm_blocking blocking = {GEMM_KC, GEMM_NC, GEMM_MC, 0};

#ifndef PREFETCH_B
#define PREFETCH_B 8   /* k-steps ahead that the micro-kernel prefetches its micro-panel       */
#endif

#define TARGET __attribute__((target("avx512f,avx512vl")))

static int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

__attribute__((constructor)) static void gemm_blocking_from_env(void) {
    blocking.kc = ember_cpu_env_int64("EMBER_CPU_GEMM_KC", GEMM_KC);
    blocking.nc = round_up(ember_cpu_env_int64("EMBER_CPU_GEMM_NC", GEMM_NC), NR);
    blocking.mc = round_up(ember_cpu_env_int64("EMBER_CPU_GEMM_MC", GEMM_MC), MR);
    if (blocking.kc < 1) blocking.kc = GEMM_KC;
    if (blocking.nc < NR) blocking.nc = GEMM_NC;
    if (blocking.mc < MR) blocking.mc = GEMM_MC;
    blocking.row_slices = ember_cpu_env_int64("EMBER_CPU_GEMM_ROW_SLICES", 0);
}

/* ---- packing -------------------------------------------------------------------------------- */

/* Transposes 16 k-steps of up to 16 rows (row i at src + i * step, its 16 k-steps contiguous)
 * into 16 outputs dst + k * dst_step, lane i of output k holding row i's step k; the `lanes` mask
 * says which lanes are stored, rows past `rows` are stored as zeros (the padding of a packed edge).
 * Four shuffle stages on the 16 x 16 block. */
TARGET static void transpose_16(float *restrict dst, int64_t dst_step, __mmask16 lanes, const float *src,
                                int64_t step, int rows) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) {
        r[i] = i < rows ? _mm512_loadu_ps(src + i * step) : _mm512_setzero_ps();
        if (i < rows) _mm_prefetch((const char *)(src + i * step + 64), _MM_HINT_T0);   /* 4 blocks ahead */
    }
    for (int i = 0; i < 8; i++) {   /* per 128-bit lane: pairs of rows interleaved */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {   /* r[4g + c], lane L: rows 4g..4g+3 of step 4L + c */
        __m512d x0 = _mm512_castps_pd(t[4 * g]), x1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d x2 = _mm512_castps_pd(t[4 * g + 2]), x3 = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
    }
    for (int c = 0; c < 4; c++) {   /* gather lane L of the four groups: step 4L + c */
        __m512 d0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), d1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        __m512 e0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        __m512 e1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_mask_storeu_ps(dst + (0 + c) * dst_step, lanes, _mm512_shuffle_f32x4(d0, e0, 0x88));
        _mm512_mask_storeu_ps(dst + (4 + c) * dst_step, lanes, _mm512_shuffle_f32x4(d1, e1, 0x88));
        _mm512_mask_storeu_ps(dst + (8 + c) * dst_step, lanes, _mm512_shuffle_f32x4(d0, e0, 0xdd));
        _mm512_mask_storeu_ps(dst + (12 + c) * dst_step, lanes, _mm512_shuffle_f32x4(d1, e1, 0xdd));
    }
}

void ember_cpu_transpose_f32(float *dst, int64_t dst_step, const float *src, int64_t src_step, int64_t rows,
                             int64_t cols, int pad) {
    if (!ember_cpu_sgemm_supported()) {
        transpose_scalar(dst, dst_step, src, src_step, rows, 0, cols, pad);
        return;
    }
    int64_t full = cols / 16 * 16;
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        int valid = (int)ember_min64(16, rows - i0);
        __mmask16 lanes = pad ? (__mmask16)0xffff : (__mmask16)((1u << valid) - 1);
        for (int64_t j0 = 0; j0 < full; j0 += 16)
            transpose_16(dst + j0 * dst_step + i0, dst_step, lanes, src + i0 * src_step + j0, src_step, valid);
    }
    transpose_scalar(dst, dst_step, src, src_step, rows, full, cols, pad);
}

#define SLIVER_LANES ((__mmask16)((1u << MR) - 1))

/* Packs rows [0, mc) x k in [0, kc) of a into MR-tall slivers: sliver s holds, for each k, the
 * MR values a[s*MR + r][k] (rows past mc are zero).  A row-major a is transposed 16 k-steps at a
 * time in registers; a column-major one (a transposed view) copies MR contiguous values per step. */
TARGET static void pack_a(float *restrict dst, const float *a, int64_t ars, int64_t acs, int64_t mc,
                          int64_t kc) {
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        int64_t mr = ember_min64(MR, mc - i0), k = 0;
        const float *src = a + i0 * ars;
        if (acs == 1)
            for (; k + 16 <= kc; k += 16) transpose_16(dst + k * MR, MR, SLIVER_LANES, src + k, ars, (int)mr);
        else if (ars == 1)
            for (; k < kc; k++)
                _mm512_mask_storeu_ps(dst + k * MR, SLIVER_LANES,
                                      _mm512_maskz_loadu_ps((__mmask16)((1u << mr) - 1), src + k * acs));
        for (; k < kc; k++) {
            int64_t r = 0;
            for (; r < mr; r++) dst[k * MR + r] = src[r * ars + k * acs];
            for (; r < MR; r++) dst[k * MR + r] = 0.0f;
        }
        dst += kc * MR;
    }
}

/* Packs b's columns [0, nc) x k in [0, kc) into NR-wide micro-panels: micro-panel p holds, for
 * each k, the NR values b[k][p*NR + j] (columns past nc are zero).  The loops follow b's unit
 * stride: along a row of a row-major b, so that the hardware prefetcher sees one sequential
 * stream (walking one micro-panel's rows instead jumps a whole row per access); a column-major b
 * (a transposed view) is transposed 16 columns x 16 k-steps at a time in registers. */
TARGET static void pack_b(float *restrict dst, const float *b, int64_t brs, int64_t bcs, int64_t nc, int64_t kc) {
    int64_t full = nc / NR, p0 = 0;   /* micro-panels with NR real columns */
    if (bcs == 1) {
        for (int64_t k = 0; k < kc; k++)
            for (int64_t p = 0; p < full; p++)
                memcpy(dst + (p * kc + k) * NR, b + k * brs + p * NR, NR * sizeof(float));
        p0 = full;
    }
    for (int64_t p = p0; p < (nc + NR - 1) / NR; p++) {
        int64_t j0 = p * NR, nr = ember_min64(NR, nc - j0), k = 0;
        float *d = dst + p * kc * NR;
        const float *src = b + j0 * bcs;
        if (brs == 1)
            for (; k + 16 <= kc; k += 16)
                for (int h = 0; h < NR / 16; h++)
                    transpose_16(d + k * NR + 16 * h, NR, 0xffff, src + 16 * h * bcs + k, bcs,
                                 (int)ember_max64(0, ember_min64(16, nr - 16 * h)));
        for (; k < kc; k++) {
            int64_t j = 0;
            for (; j < nr; j++) d[k * NR + j] = src[k * brs + j * bcs];
            for (; j < NR; j++) d[k * NR + j] = 0.0f;
        }
    }
}

/* ---- micro-kernel --------------------------------------------------------------------------- */

/* x where x > 0 or x is NaN, else +0 (relu as the composite computes it). */
TARGET static inline __m512 relu_ps(__m512 x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NLE_UQ), x);
}
static inline float relu_f(float x) { return x > 0 || x != x ? x : 0.0f; }

/* How a tile is stored: `accumulate` is 0 for the first KC slice, which stores without reading c;
 * bias (the tile's first column's entry, or NULL) and relu are set for the last slice only. */
typedef struct {
    int accumulate, relu;
    const float *bias;
} tile_store;

/* c (+)= sliver @ micro-panel for a ROWS x nr tile: ROWS rows of the sliver, each of whose
 * k-steps is MR floats apart, against VECS vectors of the NR-wide micro-panel (nr <= 16 * VECS
 * columns are valid), stored as `st` says.  Instantiated for every ROWS and VECS so that edge
 * tiles cost what they compute. */
TARGET static inline __attribute__((always_inline)) void kernel_body(
    const int ROWS, const int VECS, int64_t kc, const float *restrict ap, const float *restrict bp,
    float *c, int64_t crs, int64_t ccs, int64_t nr, tile_store st) {
    __m512 acc[MR][2];
#pragma GCC unroll 14
    for (int r = 0; r < ROWS; r++) {
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        /* c's tile is likely in L3 or memory: start fetching it now, the k loop hides the wait */
        _mm_prefetch((const char *)(c + r * crs), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * crs + (nr - 1) * ccs), _MM_HINT_T0);
    }
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = VECS > 1 ? _mm512_load_ps(bp + 16) : b0;
        /* the next micro-panel rows come from L2: ask for them a few steps early */
        _mm_prefetch((const char *)(bp + PREFETCH_B * NR), _MM_HINT_T0);
        if (VECS > 1) _mm_prefetch((const char *)(bp + PREFETCH_B * NR + 16), _MM_HINT_T0);
        /* A second name for the sliver that the compiler cannot see through: each FMA then takes its
         * value of a as an embedded broadcast from memory (one instruction) rather than sharing a
         * separate broadcast with its neighbour; fewer instructions per FMA, +7% with b from L2. */
        const float *ap2 = ap;
        __asm__("" : "+r"(ap2));
#pragma GCC unroll 14
        for (int r = 0; r < ROWS; r++) {
            acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(ap[r]), b0, acc[r][0]);
            if (VECS > 1) acc[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(ap2[r]), b1, acc[r][1]);
        }
        ap += MR;
        bp += NR;
    }
    if (ccs == 1) {
        /* lanes past nr are masked off: loads and stores never touch them */
        __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
        __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
        __m512 bias[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        if (st.bias)
            for (int v = 0; v < VECS; v++) bias[v] = _mm512_maskz_loadu_ps(v ? m1 : m0, st.bias + 16 * v);
#pragma GCC unroll 14
        for (int r = 0; r < ROWS; r++) {
            float *row = c + r * crs;
            for (int v = 0; v < VECS; v++) {
                __mmask16 m = v ? m1 : m0;
                __m512 x = acc[r][v];
                if (st.accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, row + 16 * v));
                if (st.bias) x = _mm512_add_ps(x, bias[v]);
                if (st.relu) x = relu_ps(x);
                _mm512_mask_storeu_ps(row + 16 * v, m, x);
            }
        }
        return;
    }
    float tile[MR * NR] __attribute__((aligned(64)));
    for (int r = 0; r < ROWS; r++)
        for (int v = 0; v < VECS; v++) _mm512_store_ps(tile + r * NR + 16 * v, acc[r][v]);
    for (int r = 0; r < ROWS; r++)
        for (int64_t j = 0; j < nr; j++) {
            float *dst = c + r * crs + j * ccs, x = tile[r * NR + j];
            if (st.accumulate) x += *dst;
            if (st.bias) x += st.bias[j];
            *dst = st.relu ? relu_f(x) : x;
        }
}

typedef void (*kernel_fn)(int64_t kc, const float *restrict ap, const float *restrict bp, float *c,
                          int64_t crs, int64_t ccs, int64_t nr, tile_store st);

#define DEFINE_KERNEL(ROWS, VECS)                                                                 \
    TARGET static void kernel_##ROWS##x##VECS(int64_t kc, const float *restrict ap,               \
                                              const float *restrict bp, float *c, int64_t crs,   \
                                              int64_t ccs, int64_t nr, tile_store st) {          \
        kernel_body(ROWS, VECS, kc, ap, bp, c, crs, ccs, nr, st);                                \
    }
#define DEFINE_KERNELS(ROWS) DEFINE_KERNEL(ROWS, 1) DEFINE_KERNEL(ROWS, 2)
DEFINE_KERNELS(1) DEFINE_KERNELS(2) DEFINE_KERNELS(3) DEFINE_KERNELS(4) DEFINE_KERNELS(5)
DEFINE_KERNELS(6) DEFINE_KERNELS(7) DEFINE_KERNELS(8) DEFINE_KERNELS(9) DEFINE_KERNELS(10)
DEFINE_KERNELS(11) DEFINE_KERNELS(12) DEFINE_KERNELS(13) DEFINE_KERNELS(14)

#define KERNEL_PAIR(ROWS) {kernel_##ROWS##x1, kernel_##ROWS##x2}
static const kernel_fn kernels[MR][2] = {
    KERNEL_PAIR(1), KERNEL_PAIR(2), KERNEL_PAIR(3), KERNEL_PAIR(4), KERNEL_PAIR(5),
    KERNEL_PAIR(6), KERNEL_PAIR(7), KERNEL_PAIR(8), KERNEL_PAIR(9), KERNEL_PAIR(10),
    KERNEL_PAIR(11), KERNEL_PAIR(12), KERNEL_PAIR(13), KERNEL_PAIR(14)};

/* ---- driver --------------------------------------------------------------------------------- */

typedef struct {
    int64_t M, N, K;
    const float *a, *b;
    float *c;
    int64_t ars, acs, brs, bcs, crs, ccs;
    sgemm_epilogue ep;   /* bias indexed by c's column */
} gemm_args;

/* c[m0 + (0..mc), jc + (0..nc)] (+)= packed a block @ packed b panel, for the KC slice that
 * starts at pc.  Each sliver of a stays in L1 while the panel's micro-panels stream past it from
 * L2, and c is walked along its rows. */
static void compute_block(const gemm_args *g, const float *apack, const float *bpack, int64_t m0,
                          int64_t mc, int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
    int last = pc + kc >= g->K;
    tile_store st = {.accumulate = pc > 0, .relu = last && g->ep.relu};
    for (int64_t ir = 0; ir < mc; ir += MR) {
        const float *ap = apack + ir * kc;
        float *crow = g->c + (m0 + ir) * g->crs + jc * g->ccs;
        for (int64_t jr = 0; jr < nc; jr += NR) {
            int64_t nr = ember_min64(NR, nc - jr);
            st.bias = last && g->ep.bias ? g->ep.bias + jc + jr : NULL;
            kernels[ember_min64(MR, mc - ir) - 1][nr > 16](kc, ap, bpack + jr * kc, crow + jr * g->ccs,
                                                         g->crs, g->ccs, nr, st);
        }
    }
}

/* Splits [0, extent) into `parts` ranges on multiples of `unit`; returns range q's start. */
static int64_t split_at(int64_t extent, int parts, int q, int64_t unit) {
    if (q >= parts) return extent;
    int64_t units = (extent + unit - 1) / unit;
    return ember_min64(extent, units * q / parts * unit);
}

/*
 * The whole of g on the calling thread.  Loop order: KC slices of K outermost, then chunks of at
 * most MC rows of a (packed once per slice), then NC panels of b (packed once per chunk).
 */
static void gemm_alone(const gemm_args *g, float *bpack, float *apack) {
    /* equal chunks: each costs one more packing of b per slice */
    int64_t chunks = (g->M + blocking.mc - 1) / blocking.mc;
    int64_t chunk_rows = round_up((g->M + chunks - 1) / chunks, MR);
    for (int64_t pc = 0; pc < g->K; pc += blocking.kc) {
        int64_t kc = ember_min64(blocking.kc, g->K - pc);
        for (int64_t ic = 0; ic < g->M; ic += chunk_rows) {
            int64_t mc = ember_min64(chunk_rows, g->M - ic);
            pack_a(apack, g->a + ic * g->ars + pc * g->acs, g->ars, g->acs, mc, kc);
            for (int64_t jc = 0; jc < g->N; jc += blocking.nc) {
                int64_t nc = ember_min64(blocking.nc, g->N - jc);
                pack_b(bpack, g->b + pc * g->brs + jc * g->bcs, g->brs, g->bcs, nc, kc);
                compute_block(g, apack, bpack, ic, mc, pc, kc, jc, nc);
            }
        }
    }
}

/* Multiply-adds one core's kernel does in the time it packs one float from memory (~70 MAC/ns
 * against ~1 float/ns on the Xeons in NOTES-threads.md): the exchange rate of gemm_grid's model. */
#define MACS_PER_PACKED 64

/* A thread's modelled time for a rows x cols block of c, per unit of K: its multiply-adds, plus
 * packing its rows of a once and its columns of b once per MC chunk of its rows. */
static double block_cost(int64_t M, int64_t N, int tm, int tn) {
    int64_t rows = round_up((M + tm - 1) / tm, MR), cols = round_up((N + tn - 1) / tn, NR);
    int64_t chunks = (rows + blocking.mc - 1) / blocking.mc;
    return (double)rows * (double)cols / MACS_PER_PACKED + (double)rows + (double)(cols * chunks);
}

/* The threads as a grid of *tm row slices by *tn column slices of c (*tm x *tn = nthreads).  A
 * single row of slices makes every thread pack the whole of the other operand: on 16 threads a
 * 2048^3 product packs b 16 times over, through memory, where a 4 x 4 grid packs a and b 4 times
 * each.  The default is the one-dimensional split along c's longer side (the only one for a
 * prime thread count, so 2 and 3 threads are unchanged); a grid with both sides >= 2 replaces it
 * where block_cost says it is cheaper.  EMBER_CPU_GEMM_ROW_SLICES forces *tm where it divides
 * nthreads (for sweeps).  The grid never changes a result: every element's sum over K is the
 * same whichever thread computes it. */
static void gemm_grid(int64_t M, int64_t N, int nthreads, int *tm, int *tn) {
    int64_t forced = blocking.row_slices;
    if (forced > 0 && forced <= nthreads && nthreads % forced == 0) {
        *tm = (int)forced;
        *tn = nthreads / (int)forced;
        return;
    }
    *tm = M >= N ? nthreads : 1;
    *tn = nthreads / *tm;
    double best = block_cost(M, N, *tm, *tn);
    for (int r = 2; r <= nthreads / 2; r++) {
        if (nthreads % r) continue;
        double cost = block_cost(M, N, r, nthreads / r);
        if (cost < best) {
            best = cost;
            *tm = r;
            *tn = nthreads / r;
        }
    }
}

/* Thread tid's block of c: row slice tid / tn of tm, column slice tid % tn of tn.  Slices start
 * on micro-tile boundaries; no thread ever waits for another. */
static void gemm_slice(const gemm_args *g, int tid, int tm, int tn, float *bpack, float *apack) {
    gemm_args part = *g;
    int r = tid / tn, q = tid % tn;
    int64_t m0 = split_at(g->M, tm, r, MR), m1 = split_at(g->M, tm, r + 1, MR);
    int64_t n0 = split_at(g->N, tn, q, NR), n1 = split_at(g->N, tn, q + 1, NR);
    part.a += m0 * g->ars;
    part.b += n0 * g->bcs;
    part.c += m0 * g->crs + n0 * g->ccs;
    if (part.ep.bias) part.ep.bias += n0;
    part.M = m1 - m0;
    part.N = n1 - n0;
    if (part.M > 0 && part.N > 0) gemm_alone(&part, bpack, apack);
}

int ember_cpu_sgemm_supported(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
}

/* ---- thin products with both operands contiguous along K ------------------------------------ */

/*
 * c = a @ b where a's rows and b's columns are contiguous in K (x @ w.T: a row-major, b a
 * column-major view) and c is thin (few columns, e.g. the 10 logits of a classifier).  Packing
 * would copy the large operand only to use it once, and OpenBLAS packs it: 128 x 256 @ 256 x 10
 * took ~18 us there for ~3 us of arithmetic.  Here each output element is a dot product: a block
 * of DOT_ROWS rows x `cols` columns keeps one 16-lane partial sum per element, reads 16 k-steps of
 * every row and column per iteration, straight from the operands, and reduces the lanes at the end.
 */
#define DOT_ROWS 2
#define DOT_MAX_COLS 12   /* 2 x 12 accumulators + 2 row vectors + 1 column vector <= 32 zmm */

/* The sums of the 16 lanes of x, y, z and w, in that order: halves, then quarters of the four are
 * added in pairs so that every instruction works for all four (14 instructions, where reducing
 * each alone takes 4 x 8). */
TARGET static inline __m128 sum_lanes_4(__m512 x, __m512 y, __m512 z, __m512 w) {
    /* 128-bit quarters (x0+x2, x1+x3, y0+y2, y1+y3), and the same for z and w */
    __m512 xy = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee));
    __m512 zw = _mm512_add_ps(_mm512_shuffle_f32x4(z, w, 0x44), _mm512_shuffle_f32x4(z, w, 0xee));
    /* quarter q: the 4 partial sums of x, y, z, w */
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(xy, zw, 0x88), _mm512_shuffle_f32x4(xy, zw, 0xdd));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));   /* lane 4q: the sum */
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), u));
}

TARGET static inline __attribute__((always_inline)) void dot_step(
    const int ROWS, const int COLS, __m512 acc[DOT_ROWS][DOT_MAX_COLS], __mmask16 m, const float *a,
    int64_t ars, const float *b, int64_t bcs) {
    __m512 av[DOT_ROWS];
#pragma GCC unroll 2
    for (int r = 0; r < ROWS; r++) av[r] = _mm512_maskz_loadu_ps(m, a + r * ars);
#pragma GCC unroll 12
    for (int j = 0; j < COLS; j++) {
        __m512 bv = _mm512_maskz_loadu_ps(m, b + j * bcs);
#pragma GCC unroll 2
        for (int r = 0; r < ROWS; r++) acc[r][j] = _mm512_fmadd_ps(av[r], bv, acc[r][j]);
    }
}

TARGET static inline __attribute__((always_inline)) void dot_body(
    const int ROWS, const int COLS, int64_t K, const float *a, int64_t ars, const float *b, int64_t bcs,
    float *c, int64_t crs, int64_t ccs, const float *bias, int relu) {
    __m512 acc[DOT_ROWS][DOT_MAX_COLS];
#pragma GCC unroll 2
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 12
        for (int j = 0; j < COLS; j++) acc[r][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) dot_step(ROWS, COLS, acc, 0xffff, a + k, ars, b + k, bcs);
    if (k < K) dot_step(ROWS, COLS, acc, (__mmask16)((1u << (K - k)) - 1), a + k, ars, b + k, bcs);
#pragma GCC unroll 2
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 3
        for (int j = 0; j < COLS; j += 4) {
            __m512 zero = _mm512_setzero_ps();
            __m128 sums = sum_lanes_4(acc[r][j], j + 1 < COLS ? acc[r][j + 1] : zero,
                                      j + 2 < COLS ? acc[r][j + 2] : zero, j + 3 < COLS ? acc[r][j + 3] : zero);
            int n = COLS - j < 4 ? COLS - j : 4;
            __mmask8 valid = (__mmask8)((1u << n) - 1);
            if (bias) sums = _mm_add_ps(sums, _mm_maskz_loadu_ps(valid, bias + j));
            if (relu) sums = _mm_maskz_mov_ps(_mm_cmp_ps_mask(sums, _mm_setzero_ps(), _CMP_NLE_UQ), sums);
            float *dst = c + r * crs + j * ccs;
            if (ccs == 1) {
                _mm_mask_storeu_ps(dst, valid, sums);
            } else {
                float v[4];
                _mm_storeu_ps(v, sums);
                for (int q = 0; q < n; q++) dst[q * ccs] = v[q];
            }
        }
}

typedef void (*dot_fn)(int64_t K, const float *a, int64_t ars, const float *b, int64_t bcs, float *c,
                       int64_t crs, int64_t ccs, const float *bias, int relu);

#define DEFINE_DOT(ROWS, COLS)                                                                    \
    TARGET static void dot_##ROWS##x##COLS(int64_t K, const float *a, int64_t ars, const float *b, \
                                           int64_t bcs, float *c, int64_t crs, int64_t ccs,       \
                                           const float *bias, int relu) {                         \
        dot_body(ROWS, COLS, K, a, ars, b, bcs, c, crs, ccs, bias, relu);                         \
    }
#define DEFINE_DOTS(COLS) DEFINE_DOT(1, COLS) DEFINE_DOT(2, COLS)
DEFINE_DOTS(1) DEFINE_DOTS(2) DEFINE_DOTS(3) DEFINE_DOTS(4) DEFINE_DOTS(5) DEFINE_DOTS(6)
DEFINE_DOTS(7) DEFINE_DOTS(8) DEFINE_DOTS(9) DEFINE_DOTS(10) DEFINE_DOTS(11) DEFINE_DOTS(12)

#define DOT_PAIR(COLS) {dot_1x##COLS, dot_2x##COLS}
static const dot_fn dots[DOT_MAX_COLS][DOT_ROWS] = {
    DOT_PAIR(1), DOT_PAIR(2), DOT_PAIR(3), DOT_PAIR(4), DOT_PAIR(5), DOT_PAIR(6),
    DOT_PAIR(7), DOT_PAIR(8), DOT_PAIR(9), DOT_PAIR(10), DOT_PAIR(11), DOT_PAIR(12)};

int ember_cpu_sgemm_dot(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, const float *b,
                        int64_t bcs, float *c, int64_t crs, int64_t ccs, const sgemm_epilogue *ep,
                        int nthreads) {
    if (M <= 0 || N <= 0 || K <= 0 || !ember_cpu_sgemm_supported()) return EMBER_ERR_INVALID_ARGUMENT;
    const float *bias = ep ? ep->bias : NULL;
    int relu = ep && ep->relu;
    /* columns in equal blocks of at most DOT_MAX_COLS: 10 is one block, 16 two of 8 */
    int64_t col_blocks = (N + DOT_MAX_COLS - 1) / DOT_MAX_COLS, cols = (N + col_blocks - 1) / col_blocks;
    int64_t row_blocks = (M + DOT_ROWS - 1) / DOT_ROWS, tasks = row_blocks * col_blocks;
#pragma omp parallel for num_threads(nthreads < 1 ? 1 : nthreads) schedule(static) if (nthreads > 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t i = t / col_blocks * DOT_ROWS, j = t % col_blocks * cols;
        int64_t rows = ember_min64(DOT_ROWS, M - i), n = ember_min64(cols, N - j);
        dots[n - 1][rows - 1](K, a + i * ars, ars, b + j * bcs, bcs, c + i * crs + j * ccs, crs, ccs,
                              bias ? bias + j : NULL, relu);
    }
    return EMBER_OK;
}

int ember_cpu_sgemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int64_t acs,
                    const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, int64_t ccs,
                    const sgemm_epilogue *ep, int nthreads) {
    if (M <= 0 || N <= 0 || K <= 0 || !ember_cpu_sgemm_supported()) return EMBER_ERR_INVALID_ARGUMENT;
    gemm_args g = {M, N, K, a, b, c, ars, acs, brs, bcs, crs, ccs, ep ? *ep : (sgemm_epilogue){NULL, 0}};
    /* per thread: one a block and one b panel, each a whole number of cache lines (aligned) */
    int64_t kc = ember_min64(blocking.kc, K);
    int64_t afloats = round_up(ember_min64(blocking.mc, round_up(M, MR)) * kc, 16);
    int64_t per_thread = afloats + kc * ember_min64(blocking.nc, round_up(N, NR));
    if (nthreads < 1) nthreads = 1;
    float *buf = ember_cpu_alloc(nthreads * per_thread * (int64_t)sizeof(float));
    if (!buf) return EMBER_ERR_OUT_OF_MEMORY;
    if (nthreads == 1) {
        gemm_alone(&g, buf + afloats, buf);
    } else {
#pragma omp parallel num_threads(nthreads)
        {
            int tm, tn;
            gemm_grid(M, N, omp_get_num_threads(), &tm, &tn);
            float *mine = buf + omp_get_thread_num() * per_thread;
            gemm_slice(&g, omp_get_thread_num(), tm, tn, mine + afloats, mine);
        }
    }
    ember_cpu_free(buf);
    return EMBER_OK;
}

#else /* no AVX-512 kernel on this platform: callers use BLAS */

void ember_cpu_transpose_f32(float *dst, int64_t dst_step, const float *src, int64_t src_step, int64_t rows,
                             int64_t cols, int pad) {
    transpose_scalar(dst, dst_step, src, src_step, rows, 0, cols, pad);
}

int ember_cpu_sgemm_dot(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, const float *b,
                        int64_t bcs, float *c, int64_t crs, int64_t ccs, const sgemm_epilogue *ep,
                        int nthreads) {
    return EMBER_ERR_UNSUPPORTED;
}

int ember_cpu_sgemm_supported(void) { return 0; }

int ember_cpu_sgemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int64_t acs,
                    const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, int64_t ccs,
                    const sgemm_epilogue *ep, int nthreads) {
    return EMBER_ERR_UNSUPPORTED;
}

#endif

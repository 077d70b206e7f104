/*
 * ember's own float32 GEMM for AVX-512: c(M, N) = a(M, K) @ b(K, N), every operand with any
 * element strides (transposed, sliced or flipped views are read in place; no scratch copies).
 *
 * Why not OpenBLAS: scipy-openblas32 pinned to one thread per tile (see NOTES-threads.md) makes
 * every thread pack all of b; here the threads share one packed panel of b, and the kernel and
 * blocking are tuned for this machine class (measurements in NOTES-threads.md).
 *
 * The plan (Goto/BLIS):
 *   for each NC-wide column panel of b, for each KC-deep slice of K:
 *       the threads pack b[kc, nc] together into NR-wide micro-panels (k-major), then barrier;
 *       each thread takes its own rows of a (an M split) or, when M is too short to split, its
 *       own columns of the panel (an N split), packs MC x KC blocks of a into MR-tall slivers,
 *       and runs the MR x NR micro-kernel over every (sliver, micro-panel) pair: the micro-panel
 *       of b stays in L1 while the slivers of the a block stream from L2.
 *   The first KC slice stores into c and later slices add to it, so c is never read before it
 *   is written.  Edge tiles are padded with zeros in the packed buffers and only their valid
 *   part is stored.  The packed b panel is double-buffered: one barrier per slice suffices.
 */
#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_GEMM_F32_X86 1
#include <immintrin.h>
#endif

#ifdef EMBER_GEMM_F32_X86

#define MR 14          /* rows of c per micro-kernel: 14 x 2 accumulators + 2 b vectors = 30 zmm */
#define NR 32          /* columns of c per micro-kernel: two 16-float vectors                    */
#ifndef GEMM_MC
#define GEMM_MC 1008   /* rows of a per packed block (multiple of MR): 1 MiB, L3-resident      */
#endif
#ifndef GEMM_KC
#define GEMM_KC 256    /* depth of a packed slice: an MR x KC sliver of a is 14 KiB (L1)       */
#endif
#ifndef GEMM_NC
#define GEMM_NC 1024   /* columns of b per packed panel (multiple of NR): 1 MiB (L2)           */
#endif
#ifndef PREFETCH_B
#define PREFETCH_B 8   /* k-steps ahead that the micro-kernel prefetches its micro-panel       */
#endif

#define TARGET __attribute__((target("avx512f")))

/* ---- packing -------------------------------------------------------------------------------- */

/* Transposes 16 k-steps of 14 rows of a row-major a (rows src + r * ars, r < MR) into 16
 * consecutive sliver steps of MR floats each.  Four shuffle stages on a 16 x 16 block whose two
 * last rows are zero; each output row is stored with its 14 real lanes. */
TARGET static void transpose_14x16(float *restrict dst, const float *src, int64_t ars) {
    __m512 r[16], t[16];
    for (int i = 0; i < MR; i++) r[i] = _mm512_loadu_ps(src + i * ars);
    r[14] = r[15] = _mm512_setzero_ps();
    for (int i = 0; i < 8; i++) {   /* per 128-bit lane: pairs of rows interleaved */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {   /* r[4g + c], lane L: rows 4g..4g+3 of column 4L + c */
        __m512d x0 = _mm512_castps_pd(t[4 * g]), x1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d x2 = _mm512_castps_pd(t[4 * g + 2]), x3 = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
    }
    for (int c = 0; c < 4; c++) {   /* gather lane L of the four groups: column 4L + c */
        __m512 d0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), d1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        __m512 e0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        __m512 e1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_mask_storeu_ps(dst + (0 + c) * MR, 0x3fff, _mm512_shuffle_f32x4(d0, e0, 0x88));
        _mm512_mask_storeu_ps(dst + (4 + c) * MR, 0x3fff, _mm512_shuffle_f32x4(d1, e1, 0x88));
        _mm512_mask_storeu_ps(dst + (8 + c) * MR, 0x3fff, _mm512_shuffle_f32x4(d0, e0, 0xdd));
        _mm512_mask_storeu_ps(dst + (12 + c) * MR, 0x3fff, _mm512_shuffle_f32x4(d1, e1, 0xdd));
    }
}

/* Packs rows [0, mc) x k in [0, kc) of a into MR-tall slivers: sliver s holds, for each k, the
 * MR values a[s*MR + r][k] (rows past mc are zero). */
static void pack_a(float *restrict dst, const float *a, int64_t ars, int64_t acs, int64_t mc,
                   int64_t kc) {
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        int64_t mr = ember_min64(MR, mc - i0), k = 0;
        const float *src = a + i0 * ars;
        if (acs == 1 && mr == MR)
            for (; k + 16 <= kc; k += 16) transpose_14x16(dst + k * MR, src + k, ars);
        for (; k < kc; k++) {
            int64_t r = 0;
            for (; r < mr; r++) dst[k * MR + r] = src[r * ars + k * acs];
            for (; r < MR; r++) dst[k * MR + r] = 0.0f;
        }
        dst += kc * MR;
    }
}

/* Packs micro-panels [p0, p1) of b's columns [0, nc) x k in [0, kc): micro-panel p holds, for
 * each k, the NR values b[k][p*NR + j] (columns past nc are zero).  The loops follow b's unit
 * stride: along a row of a row-major b, so that the hardware prefetcher sees one sequential
 * stream (walking one micro-panel's rows instead jumps a whole row per access). */
static void pack_b(float *restrict dst, const float *b, int64_t brs, int64_t bcs, int64_t nc,
                   int64_t kc, int64_t p0, int64_t p1) {
    int64_t full_end = ember_min64(p1, nc / NR);   /* micro-panels with NR real columns */
    if (bcs == 1) {
        for (int64_t k = 0; k < kc; k++)
            for (int64_t p = p0; p < full_end; p++)
                memcpy(dst + (p * kc + k) * NR, b + k * brs + p * NR, NR * sizeof(float));
        p0 = ember_max64(p0, full_end);
    }
    for (int64_t p = p0; p < p1; p++) {
        int64_t j0 = p * NR, nr = ember_min64(NR, nc - j0);
        float *d = dst + p * kc * NR;
        const float *src = b + j0 * bcs;
        for (int64_t j = 0; j < nr; j++)
            for (int64_t k = 0; k < kc; k++) d[k * NR + j] = src[k * brs + j * bcs];
        for (int64_t k = 0; k < kc; k++)
            for (int64_t j = nr; j < NR; j++) d[k * NR + j] = 0.0f;
    }
}

/* ---- micro-kernel --------------------------------------------------------------------------- */

/* c (+)= sliver @ micro-panel for a ROWS x (16 * VECS) tile: ROWS rows of the sliver, each of
 * whose k-steps is MR floats apart, against VECS vectors of the NR-wide micro-panel.  mr <= ROWS
 * and nr <= 16 * VECS are the tile's valid part (mr < ROWS only when c is not unit-stride).
 * `accumulate` is 0 for the first KC slice, which stores without reading c.  Instantiated for
 * every ROWS and VECS so that edge tiles cost what they compute. */
static inline __attribute__((always_inline)) void kernel_body(
    const int ROWS, const int VECS, int64_t kc, const float *restrict ap, const float *restrict bp,
    float *c, int64_t crs, int64_t ccs, int64_t mr, int64_t nr, int accumulate) {
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
#pragma GCC unroll 14
        for (int r = 0; r < ROWS; r++) {
            __m512 av = _mm512_set1_ps(ap[r]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            if (VECS > 1) acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
        ap += MR;
        bp += NR;
    }
    if (ccs == 1 && mr == ROWS) {
        /* lanes past nr are masked off: loads and stores never touch them */
        __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
        __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
#pragma GCC unroll 14
        for (int r = 0; r < ROWS; r++) {
            float *row = c + r * crs;
            for (int v = 0; v < VECS; v++) {
                __mmask16 m = v ? m1 : m0;
                __m512 x = acc[r][v];
                if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, row + 16 * v));
                _mm512_mask_storeu_ps(row + 16 * v, m, x);
            }
        }
        return;
    }
    float tile[MR * NR] __attribute__((aligned(64)));
    for (int r = 0; r < ROWS; r++)
        for (int v = 0; v < VECS; v++) _mm512_store_ps(tile + r * NR + 16 * v, acc[r][v]);
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nr; j++) {
            float *dst = c + r * crs + j * ccs;
            *dst = accumulate ? *dst + tile[r * NR + j] : tile[r * NR + j];
        }
}

typedef void (*kernel_fn)(int64_t kc, const float *restrict ap, const float *restrict bp, float *c,
                          int64_t crs, int64_t ccs, int64_t mr, int64_t nr, int accumulate);

#define DEFINE_KERNEL(ROWS, VECS)                                                                 \
    TARGET static void kernel_##ROWS##x##VECS(int64_t kc, const float *restrict ap,               \
                                              const float *restrict bp, float *c, int64_t crs,   \
                                              int64_t ccs, int64_t mr, int64_t nr,               \
                                              int accumulate) {                                  \
        kernel_body(ROWS, VECS, kc, ap, bp, c, crs, ccs, mr, nr, accumulate);                    \
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
} gemm_args;

/* c[m0 + (0..mc), jc + (n0..n1)] (+)= packed a block @ packed b panel columns n0..n1 (relative to
 * the panel; n0 on a micro-panel boundary).  Each sliver of a stays in L1 while the panel's
 * micro-panels stream past it from L2, and c is walked along its rows. */
static void compute_block(const gemm_args *g, const float *apack, const float *bpack, int64_t m0,
                          int64_t mc, int64_t kc, int64_t jc, int64_t n0, int64_t n1,
                          int accumulate) {
    /* with a strided c, edge rows go through the full-height kernel's tile buffer */
    int exact_rows = g->ccs == 1;
    for (int64_t ir = 0; ir < mc; ir += MR) {
        int64_t mr = ember_min64(MR, mc - ir);
        const float *ap = apack + ir * kc;
        float *crow = g->c + (m0 + ir) * g->crs + jc * g->ccs;
        for (int64_t jr = n0; jr < n1; jr += NR) {
            int64_t nr = ember_min64(NR, n1 - jr);
            kernel_fn kernel = kernels[(exact_rows ? mr : MR) - 1][nr > 16];
            kernel(kc, ap, bpack + (jr / NR) * kc * NR, crow + jr * g->ccs, g->crs, g->ccs, mr, nr,
                   accumulate);
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
 * One thread's share of the product.  Loop order: KC slices of K outermost, then chunks of at
 * most MC of this thread's rows (packed once per slice), then NC panels of b, packed by all
 * threads together into bpack[slice & 1].  Every thread runs the same number of panel steps
 * (the chunk count is taken over the longest thread range), so the barriers match up.
 */
static void gemm_thread(const gemm_args *g, float *bpack[2], float *apack, int tid, int nthreads,
                        int split_m) {
    int64_t m0 = 0, m1 = g->M, longest = g->M;
    if (split_m) {
        m0 = split_at(g->M, nthreads, tid, MR);
        m1 = split_at(g->M, nthreads, tid + 1, MR);
        longest = 0;
        for (int q = 0; q < nthreads; q++)
            longest = ember_max64(longest, split_at(g->M, nthreads, q + 1, MR) - split_at(g->M, nthreads, q, MR));
    }
    int64_t chunks = (longest + GEMM_MC - 1) / GEMM_MC;
    unsigned step = 0;
    for (int64_t pc = 0; pc < g->K; pc += GEMM_KC) {
        int64_t kc = ember_min64(GEMM_KC, g->K - pc);
        for (int64_t chunk = 0; chunk < chunks; chunk++) {
            int64_t ic = m0 + chunk * GEMM_MC, mc = ember_min64(GEMM_MC, m1 - ic);
            if (mc > 0) pack_a(apack, g->a + ic * g->ars + pc * g->acs, g->ars, g->acs, mc, kc);
            for (int64_t jc = 0; jc < g->N; jc += GEMM_NC, step++) {
                int64_t nc = ember_min64(GEMM_NC, g->N - jc), panels = (nc + NR - 1) / NR;
                float *bp = bpack[step & 1];
                pack_b(bp, g->b + pc * g->brs + jc * g->bcs, g->brs, g->bcs, nc, kc,
                       split_at(panels, nthreads, tid, 1), split_at(panels, nthreads, tid + 1, 1));
                if (nthreads > 1) {
#pragma omp barrier
                }
                if (split_m) {
                    if (mc > 0) compute_block(g, apack, bp, ic, mc, kc, jc, 0, nc, pc > 0);
                } else {
                    int64_t n0 = split_at(nc, nthreads, tid, NR), n1 = split_at(nc, nthreads, tid + 1, NR);
                    if (n0 < n1) compute_block(g, apack, bp, ic, mc, kc, jc, n0, n1, pc > 0);
                }
            }
        }
    }
}

int ember_cpu_sgemm_supported(void) {
    static int supported = -1;
    if (supported < 0) {
        __builtin_cpu_init();
        supported = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return supported;
}

int ember_cpu_sgemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int64_t acs,
                   const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, int64_t ccs,
                   int nthreads) {
    if (M <= 0 || N <= 0 || K <= 0 || !ember_cpu_sgemm_supported()) return EMBER_ERR_INVALID_ARGUMENT;
    gemm_args g = {M, N, K, a, b, c, ars, acs, brs, bcs, crs, ccs};
    int64_t kc = ember_min64(GEMM_KC, K), nc = ember_min64(GEMM_NC, (N + NR - 1) / NR * NR);
    int64_t bfloats = kc * nc, afloats = ember_min64(GEMM_MC, (M + MR - 1) / MR * MR) * kc;
    if (nthreads < 1) nthreads = 1;
    /* rows are split when every thread gets at least a few slivers; else columns */
    int split_m = M >= (int64_t)nthreads * 4 * MR || N < (int64_t)nthreads * NR;
    float *buf = ember_cpu_alloc((2 * bfloats + nthreads * afloats) * (int64_t)sizeof(float));
    if (!buf) return EMBER_ERR_OUT_OF_MEMORY;
    float *bpack[2] = {buf, buf + bfloats};
    if (nthreads == 1) {
        gemm_thread(&g, bpack, buf + 2 * bfloats, 0, 1, split_m);
    } else {
#pragma omp parallel num_threads(nthreads)
        {
            int tid = omp_get_thread_num(), team = omp_get_num_threads();
            gemm_thread(&g, bpack, buf + 2 * bfloats + tid * afloats, tid, team, split_m);
        }
    }
    ember_cpu_free(buf);
    return EMBER_OK;
}

#else /* no AVX-512 kernel on this platform: callers use BLAS */

int ember_cpu_sgemm_supported(void) { return 0; }

int ember_cpu_sgemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int64_t acs,
                   const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, int64_t ccs,
                   int nthreads) {
    return EMBER_ERR_UNSUPPORTED;
}

#endif

/*
 * Layout helpers: NCHW <-> NHWC transposes on the pthreadpool, the workspace that holds the NHWC
 * copies (and padded copies of inputs XNNPACK would read past), and the special-value checks.
 *
 * XNNPACK's results equal ember's only for "ordinary" inputs: its output clamps (max with
 * output_min, then min with output_max, even at +-inf) turn NaN into -inf or +inf, and it runs
 * with denormals flushed (FTZ/DAZ), so subnormal inputs count as zero.  Every input is checked
 * for NaN, infinities and subnormals (in the same pass as its transpose where there is one), and
 * any such special value makes the kernel decline the call (EXN_STATUS_SPECIAL_VALUES).
 *
 * XNNPACK may read up to XNN_EXTRA_BYTES past the end of any input.  That is harmless unless
 * the over-read crosses into the next page (which may be unmapped), so inputs whose last bytes
 * sit that close to a page end are copied into the workspace first (exn_readable_input).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pthreadpool.h>
#include <xnnpack.h>

#include "layout.h"

#define PAGE_SIZE_MIN 4096
#define TILE 32
#define SCAN_TILE 16384

#define EXPONENT 0x7f800000u
#define MANTISSA 0x007fffffu

/* 1 when any of x[0..n) is NaN or +-inf (all exponent bits set) or subnormal (no exponent bits,
 * some mantissa bits); branch-free, so it vectorises. */
static int any_special(const float *x, size_t n) {
    uint32_t found = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        uint32_t exponent = bits & EXPONENT;
        found |= (exponent == EXPONENT) | ((exponent == 0) & ((bits & MANTISSA) != 0));
    }
    return (int)found;
}

typedef struct {
    const float *x;
    size_t n;
    int special;
} scan_job;

static void scan_tile(void *context, size_t start, size_t count) {
    scan_job *job = context;
    if (any_special(job->x + start, count)) __atomic_store_n(&job->special, 1, __ATOMIC_RELAXED);
}

int exn_all_ordinary(void *pool, const float *x, size_t n) {
    scan_job job = {x, n, 0};
    pthreadpool_parallelize_1d_tile_1d((pthreadpool_t)pool, scan_tile, &job, n, SCAN_TILE, PTHREADPOOL_FLAG_YIELD_WORKERS);
    return !job.special;
}

static struct {
    float *data;
    size_t bytes;
} workspace[EXN_WORKSPACE_SLOTS];

float *exn_workspace(int slot, size_t count) {
    size_t bytes = count * sizeof(float) + XNN_EXTRA_BYTES;
    if (workspace[slot].bytes < bytes) {
        void *mem = NULL;
        free(workspace[slot].data);
        workspace[slot].data = NULL;
        workspace[slot].bytes = 0;
        if (posix_memalign(&mem, 64, bytes) != 0) return NULL;
        workspace[slot].data = mem;
        workspace[slot].bytes = bytes;
    }
    return workspace[slot].data;
}

void exn_release_workspace(void) {
    for (int i = 0; i < EXN_WORKSPACE_SLOTS; i++) {
        free(workspace[i].data);
        workspace[i].data = NULL;
        workspace[i].bytes = 0;
    }
}

size_t exn_workspace_bytes(void) {
    size_t total = 0;
    for (int i = 0; i < EXN_WORKSPACE_SLOTS; i++) total += workspace[i].bytes;
    return total;
}

const float *exn_readable_input(const float *x, size_t count, int slot) {
    uintptr_t last = (uintptr_t)(x + count) - 1;
    if (count == 0 || last / PAGE_SIZE_MIN == (last + XNN_EXTRA_BYTES) / PAGE_SIZE_MIN) return x;
    float *copy = exn_workspace(slot, count);
    if (copy) memcpy(copy, x, count * sizeof(float));
    return copy;
}

/* ---- batched 2-d transpose: dst[b][j][i] = src[b][i][j] ------------------------------------------ */

typedef struct {
    const float *src;
    float *dst;
    size_t rows, cols;
    int check;
    int special;
} transpose_job;

/* rows [i0, i1) x columns [j0, j1) of one matrix, one element at a time; 1 if any was special */
static int transpose_scalar(const transpose_job *job, const float *src, float *dst, size_t i0, size_t i1, size_t j0,
                            size_t j1) {
    int special = 0;
    for (size_t i = i0; i < i1; i++) {
        for (size_t j = j0; j < j1; j++)
            dst[j * job->rows + i] = src[i * job->cols + j];
        if (job->check && j1 > j0) special |= any_special(src + i * job->cols + j0, j1 - j0);
    }
    return special;
}

#ifdef __AVX2__
#include <immintrin.h>

/* One 8x8 block in registers (unpack, shuffle, swap 128-bit halves); with `check`, ORs into *found
 * the lanes that hold a special value (the bit tests of any_special, on integers). */
static inline void transpose8x8(const float *src, size_t src_stride, float *dst, size_t dst_stride, int check,
                                __m256i *found) {
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(src + k * src_stride);
    if (check) {
        const __m256i exponent_bits = _mm256_set1_epi32((int)EXPONENT), mantissa_bits = _mm256_set1_epi32(MANTISSA);
        const __m256i zero = _mm256_setzero_si256();
        for (int k = 0; k < 8; k++) {
            __m256i bits = _mm256_castps_si256(r[k]);
            __m256i exponent = _mm256_and_si256(bits, exponent_bits);
            __m256i no_mantissa = _mm256_cmpeq_epi32(_mm256_and_si256(bits, mantissa_bits), zero);
            __m256i subnormal = _mm256_andnot_si256(no_mantissa, _mm256_cmpeq_epi32(exponent, zero));
            *found = _mm256_or_si256(*found, _mm256_or_si256(_mm256_cmpeq_epi32(exponent, exponent_bits), subnormal));
        }
    }
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + k * dst_stride, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(dst + (k + 4) * dst_stride, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}
#endif

static void transpose_tile(void *context, size_t b, size_t i0, size_t j0, size_t ni, size_t nj) {
    transpose_job *job = context;
    const float *src = job->src + b * job->rows * job->cols;
    float *dst = job->dst + b * job->rows * job->cols;
    int special;
#ifdef __AVX2__
    size_t i8 = i0 + (ni & ~(size_t)7), j8 = j0 + (nj & ~(size_t)7);
    __m256i found = _mm256_setzero_si256();
    for (size_t i = i0; i < i8; i += 8)
        for (size_t j = j0; j < j8; j += 8)
            transpose8x8(src + i * job->cols + j, job->cols, dst + j * job->rows + i, job->rows, job->check, &found);
    special = !_mm256_testz_si256(found, found);
    special |= transpose_scalar(job, src, dst, i0, i0 + ni, j8, j0 + nj);  /* right edge */
    special |= transpose_scalar(job, src, dst, i8, i0 + ni, j0, j8);       /* bottom edge */
#else
    special = transpose_scalar(job, src, dst, i0, i0 + ni, j0, j0 + nj);
#endif
    if (special) __atomic_store_n(&job->special, 1, __ATOMIC_RELAXED);
}

int exn_transpose(void *pool, const float *src, float *dst, size_t batch, size_t rows, size_t cols, int check) {
    if (rows == 1 || cols == 1) {  /* the same bytes in either order */
        if (src != dst) memcpy(dst, src, batch * rows * cols * sizeof(float));
        return !check || exn_all_ordinary(pool, dst, batch * rows * cols);
    }
    transpose_job job = {src, dst, rows, cols, check, 0};
    pthreadpool_parallelize_3d_tile_2d((pthreadpool_t)pool, transpose_tile, &job, batch, rows, cols, TILE, TILE,
                                      PTHREADPOOL_FLAG_YIELD_WORKERS);
    return !job.special;
}

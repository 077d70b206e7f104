/*
 * Layout helpers: NCHW <-> NHWC transposes on the pthreadpool, the workspace that holds the NHWC
 * copies (and padded copies of inputs XNNPACK would read past), and the finiteness checks.
 *
 * XNNPACK's output clamps (max with output_min, then min with output_max, even at +-inf) turn
 * NaN into -inf or +inf, so its results are only ember's for finite inputs: every input is
 * checked (in the same pass as its transpose where there is one), and a non-finite input makes
 * the kernel decline the call (EXN_STATUS_NONFINITE).
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

/* 1 when any of x[0..n) is NaN or +-inf (all exponent bits set); branch-free, so it vectorises. */
static int any_nonfinite(const float *x, size_t n) {
    uint32_t found = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        found |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return (int)found;
}

typedef struct {
    const float *x;
    size_t n;
    int nonfinite;
} scan_job;

static void scan_tile(void *context, size_t start, size_t count) {
    scan_job *job = context;
    if (any_nonfinite(job->x + start, count)) __atomic_store_n(&job->nonfinite, 1, __ATOMIC_RELAXED);
}

int exn_all_finite(void *pool, const float *x, size_t n) {
    scan_job job = {x, n, 0};
    pthreadpool_parallelize_1d_tile_1d((pthreadpool_t)pool, scan_tile, &job, n, SCAN_TILE, 0);
    return !job.nonfinite;
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
    int nonfinite;
} transpose_job;

static void transpose_tile(void *context, size_t b, size_t i0, size_t j0, size_t ni, size_t nj) {
    transpose_job *job = context;
    const float *src = job->src + b * job->rows * job->cols;
    float *dst = job->dst + b * job->rows * job->cols;
    int nonfinite = 0;
    for (size_t i = i0; i < i0 + ni; i++) {
        for (size_t j = j0; j < j0 + nj; j++)
            dst[j * job->rows + i] = src[i * job->cols + j];
        if (job->check) nonfinite |= any_nonfinite(src + i * job->cols + j0, nj);
    }
    if (nonfinite) __atomic_store_n(&job->nonfinite, 1, __ATOMIC_RELAXED);
}

int exn_transpose(void *pool, const float *src, float *dst, size_t batch, size_t rows, size_t cols, int check) {
    if (rows == 1 || cols == 1) {  /* the same bytes in either order */
        if (src != dst) memcpy(dst, src, batch * rows * cols * sizeof(float));
        return !check || exn_all_finite(pool, dst, batch * rows * cols);
    }
    transpose_job job = {src, dst, rows, cols, check, 0};
    pthreadpool_parallelize_3d_tile_2d((pthreadpool_t)pool, transpose_tile, &job, batch, rows, cols, TILE, TILE, 0);
    return !job.nonfinite;
}

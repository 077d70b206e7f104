/*
 * Batched matrix multiplication: out(..., M, N) = a(..., M, K) @ b(..., K, N).
 *
 * The plan, in the order ember_cpu_matmul runs it:
 *   1. validate the descriptors and view each operand as a batch of strided matrices;
 *   2. fold trailing batch dims into M where b is broadcast over them and a and out stack their
 *      rows evenly (x(B, T, K) @ W(K, N) becomes one (B*T, K) @ (K, N) product);
 *   3. pick a compute type: float32/float64/complex go to cblas gemm as they are, float16 and
 *      bfloat16 are converted to float32, integers multiply in the unsigned type of
 *      their width (wrapping arithmetic is exact modulo 2^bits, so signed results come out
 *      as numpy's), bool multiplies as OR of ANDs;
 *   4. give every operand a layout the compute kernel can read in place: BLAS takes a matrix
 *      whose last two dims are row-major or column-major with a leading dimension at least the
 *      other extent; the C loop wants unit column stride in b and out.  A column-major out is
 *      handled by computing out^T = b^T a^T.  Anything else (or a dtype change) is packed into
 *      a contiguous scratch copy, and out then unpacked from its scratch;
 *   5. split the work across OpenMP threads (see run_tiles), each calling single-threaded BLAS
 *      or the C loop on its tile.  OpenBLAS itself stays at one thread: see runtime.c.
 * float32 products of at least NATIVE_MIN_MACS multiply-adds and NATIVE_MIN_N columns per matrix
 * on an AVX-512 machine take ember's own GEMM instead (gemm_f32.c, run_native): it reads every
 * float32 operand with its own strides, so step 4 packs nothing for it.  Thin float32 outputs
 * (DOT_MIN_N to 31 columns) with a's rows and b's columns contiguous along K, as in x @ w.T, take
 * its dot-product kernel, which reads both operands in place.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include <cblas.h>

#include "common.h"
#include "ember_cpu.h"
#include "gemm_f32.h"

/* Products smaller than 2^19 multiply-adds stay on one thread: waking the OpenMP team (~1-2 us
 * when it spins, far more when it sleeps) costs more than it saves below ~80^3 (measured: 64^3
 * took 3.3 us on one thread, 3.8 on two; 96^3 16 us on one, 9 on two).  So for
 * ember_threads_for, MACS_PER_WORK multiply-adds count as one element of work. */
#define MACS_PER_WORK (((int64_t)1 << 19) / (2 * EMBER_THREAD_WORK_DEFAULT))

/* A batch of strided matrices: element (batch index b, i, j) lives at
 * base + (batch_offset(b) + i * rs + j * cs) * itemsize. */
typedef struct {
    char *base;
    int64_t rows, cols, rs, cs;
    int64_t bstrides[EMBER_MAX_NDIM];
} mat;

typedef struct {
    int dtype;        /* the dtype of the user's tensors               */
    int cdt;          /* the dtype the kernel computes and reads in    */
    int nbd;          /* batch dims left after folding                 */
    int64_t bshape[EMBER_MAX_NDIM];
    int64_t nbatch, M, N, K;
    mat a, b, c;      /* views the kernel reads (maybe packed scratch) */
    int native;       /* float32 on ember's own kernels (gemm_f32.c): a native_kind */
    int swapped;      /* computing out^T = b^T a^T (out is column-major)                 */
    const sgemm_epilogue *ep;   /* applied by the native kernels, or NULL                */
    /* BLAS arguments, derived from the layouts of a, b and c */
    enum CBLAS_TRANSPOSE ta, tb;
    int lda, ldb, ldc;
} problem;

typedef void (*tile_fn)(const problem *p, const char *a, const char *b, char *c, int64_t m,
                        int64_t n);

/* ---- validation and views ------------------------------------------------------------------- */

static int validate(const ember_tensor *out, const ember_tensor *a, const ember_tensor *b) {
    if (ember_check_desc(out) || ember_check_desc(a) || ember_check_desc(b)) return 0;
    if (a->dtype != out->dtype || b->dtype != out->dtype) return 0;
    if (out->ndim < 2 || a->ndim != out->ndim || b->ndim != out->ndim) return 0;
    int nd = out->ndim;
    if (!ember_same_dims(a, out, nd - 2) || !ember_same_dims(b, out, nd - 2)) return 0;
    return a->shape[nd - 2] == out->shape[nd - 2] && b->shape[nd - 1] == out->shape[nd - 1] &&
           a->shape[nd - 1] == b->shape[nd - 2];
}

static void view_of(mat *m, const ember_tensor *t) {
    int nd = t->ndim;
    m->base = ember_base(t);
    m->rows = t->shape[nd - 2];
    m->cols = t->shape[nd - 1];
    m->rs = t->strides[nd - 2];
    m->cs = t->strides[nd - 1];
    for (int d = 0; d < nd - 2; d++) m->bstrides[d] = t->strides[d];
}

static void transpose_view(mat *m) {
    int64_t t = m->rows; m->rows = m->cols; m->cols = t;
    t = m->rs; m->rs = m->cs; m->cs = t;
}

/* Element offset of batch `idx` (C order over bshape) in m. */
static int64_t batch_offset(const problem *p, const mat *m, int64_t idx) {
    return ember_flat_offset(p->nbd, p->bshape, m->bstrides, idx);
}

/* Folds trailing batch dims into M while b is broadcast over them and a and out advance by
 * exactly M rows per batch step: many small products become one large one. */
static void fold_batch_into_rows(problem *p) {
    while (p->nbd > 0) {
        int d = p->nbd - 1;
        int64_t n = p->bshape[d];
        if (n == 1) {   /* a unit dim folds trivially, whatever its strides */
            p->nbd--;
            continue;
        }
        /* with one row, the row stride is free: take the batch stride as the row stride */
        int64_t ars = p->M == 1 ? p->a.bstrides[d] : p->a.rs;
        int64_t crs = p->M == 1 ? p->c.bstrides[d] : p->c.rs;
        if (p->b.bstrides[d] != 0 || p->a.bstrides[d] != p->M * ars ||
            p->c.bstrides[d] != p->M * crs)
            return;
        /* keep both in plain row-major layouts so folding never forces a pack */
        if (!(p->a.cs == 1 || p->K == 1) || ars < ember_max64(p->K, 1) || crs < ember_max64(p->N, 1)) return;
        if (!(p->c.cs == 1 || p->N == 1) || p->M * n > INT_MAX) return;
        p->M *= n;
        p->a.rows = p->c.rows = p->M;
        p->a.rs = ars;
        p->c.rs = crs;
        p->nbatch /= n;
        p->nbd--;
    }
}

/* ---- layouts -------------------------------------------------------------------------------- */

enum { LAYOUT_NONE = 0, LAYOUT_ROW = 1, LAYOUT_COL = 2 };

/* Whether m can be read in place as row-major (unit column stride) or column-major (unit row
 * stride) with a leading dimension BLAS accepts; ld receives that leading dimension.  A dim of
 * extent 1 never constrains its stride. */
static int layout_of(const mat *m, int allowed, int64_t *ld) {
    if ((allowed & LAYOUT_ROW) && (m->cols <= 1 || m->cs == 1) &&
        (m->rows <= 1 || (m->rs >= ember_max64(m->cols, 1) && m->rs <= INT_MAX))) {
        *ld = m->rows <= 1 ? ember_max64(m->cols, 1) : m->rs;
        return LAYOUT_ROW;
    }
    if ((allowed & LAYOUT_COL) && (m->rows <= 1 || m->rs == 1) &&
        (m->cols <= 1 || (m->cs >= ember_max64(m->rows, 1) && m->cs <= INT_MAX))) {
        *ld = m->cols <= 1 ? ember_max64(m->rows, 1) : m->cs;
        return LAYOUT_COL;
    }
    return LAYOUT_NONE;
}

/* ---- strided 2-d copies, with or without a dtype conversion ---------------------------------- */

typedef void (*copy_fn)(const char *src, int64_t srs, int64_t scs, char *dst, int64_t drs,
                        int64_t dcs, int64_t rows, int64_t cols);

#define SAME(x) (x)
#define DEFINE_COPY2D(NAME, SRC_T, DST_T, CONV)                                                   \
    static void NAME(const char *src, int64_t srs, int64_t scs, char *dst, int64_t drs,           \
                     int64_t dcs, int64_t rows, int64_t cols) {                                   \
        const SRC_T *s = (const SRC_T *)src;                                                      \
        DST_T *d = (DST_T *)dst;                                                                  \
        for (int64_t i = 0; i < rows; i++)                                                        \
            for (int64_t j = 0; j < cols; j++) d[i * drs + j * dcs] = CONV(s[i * srs + j * scs]); \
    }

DEFINE_COPY2D(copy_1, uint8_t, uint8_t, SAME)
DEFINE_COPY2D(copy_2, uint16_t, uint16_t, SAME)
DEFINE_COPY2D(copy_4, uint32_t, uint32_t, SAME)
DEFINE_COPY2D(copy_8, uint64_t, uint64_t, SAME)
DEFINE_COPY2D(copy_16, double _Complex, double _Complex, SAME)
DEFINE_COPY2D(copy_f16_f32, ember_f16, float, ember_f16_to_f32)
DEFINE_COPY2D(copy_bf16_f32, ember_bf16, float, ember_bf16_to_f32)
DEFINE_COPY2D(copy_f32_f16, float, ember_f16, ember_f32_to_f16)
DEFINE_COPY2D(copy_f32_bf16, float, ember_bf16, ember_f32_to_bf16)

static copy_fn copy_for(int src_dtype, int dst_dtype) {
    if (src_dtype == EMBER_FLOAT16 && dst_dtype == EMBER_FLOAT32) return copy_f16_f32;
    if (src_dtype == EMBER_BFLOAT16 && dst_dtype == EMBER_FLOAT32) return copy_bf16_f32;
    if (src_dtype == EMBER_FLOAT32 && dst_dtype == EMBER_FLOAT16) return copy_f32_f16;
    if (src_dtype == EMBER_FLOAT32 && dst_dtype == EMBER_BFLOAT16) return copy_f32_bf16;
    switch (ember_itemsize[src_dtype]) {   /* same dtype: a plain copy of the bits */
    case 1: return copy_1;
    case 2: return copy_2;
    case 4: return copy_4;
    case 8: return copy_8;
    default: return copy_16;
    }
}

static int all_zero(const int64_t *v, int n) {
    for (int d = 0; d < n; d++)
        if (v[d] != 0) return 0;
    return 1;
}

/* Packs m (of dtype src_dtype) into a contiguous row-major buffer of p->cdt and points m at it.
 * A matrix broadcast over every batch dim is packed once.  Returns the buffer (NULL: no memory). */
static void *pack(const problem *p, mat *m, int src_dtype) {
    int once = all_zero(m->bstrides, p->nbd);
    int64_t count = once ? 1 : p->nbatch, per = m->rows * m->cols;
    int64_t isz = ember_itemsize[p->cdt], src_isz = ember_itemsize[src_dtype];
    char *buf = NULL;
    if (posix_memalign((void **)&buf, 64, (size_t)ember_max64(count * per * isz, 64)) != 0) return NULL;
    copy_fn copy = copy_for(src_dtype, p->cdt);
#pragma omp parallel for num_threads(ember_threads_for(count * per, count))
    for (int64_t bi = 0; bi < count; bi++)
        copy(m->base + batch_offset(p, m, bi) * src_isz, m->rs, m->cs, buf + bi * per * isz, m->cols, 1,
             m->rows, m->cols);
    m->base = buf;
    m->rs = m->cols;
    m->cs = 1;
    /* contiguous batch strides over bshape, or all zero when packed once */
    int64_t stride = once ? 0 : per;
    for (int d = p->nbd - 1; d >= 0; d--) {
        m->bstrides[d] = stride;
        stride *= p->bshape[d];
    }
    return buf;
}

/* Copies the contiguous scratch result into the user's out, converting the dtype back.  The
 * scratch is C-contiguous over out's own shape (folding batch dims into M does not change a
 * contiguous layout), so this walks out's unfolded batch dims. */
static void unpack_out(const problem *p, const char *scratch, const ember_tensor *out) {
    problem q = *p;
    view_of(&q.c, out);
    q.nbd = out->ndim - 2;
    q.nbatch = 1;
    for (int d = 0; d < q.nbd; d++) {
        q.bshape[d] = out->shape[d];
        q.nbatch *= out->shape[d];
    }
    int64_t M = q.c.rows, N = q.c.cols, per = M * N;
    int64_t isz = ember_itemsize[p->cdt], osz = ember_itemsize[out->dtype];
    copy_fn copy = copy_for(p->cdt, out->dtype);
#pragma omp parallel for num_threads(ember_threads_for(q.nbatch * per, q.nbatch))
    for (int64_t bi = 0; bi < q.nbatch; bi++)
        copy(scratch + bi * per * isz, N, 1, q.c.base + batch_offset(&q, &q.c, bi) * osz, q.c.rs, q.c.cs,
             M, N);
}

/* K == 0: every output element is an empty sum.  All-zero bits are 0 in every dtype. */
static void zero_out(const ember_tensor *out) {
    ember_iter it;
    const ember_tensor *ops[1] = {out};
    if (!ember_iter_init(&it, out->ndim, out->shape, 1, ops)) return;
    int64_t isz = ember_itemsize[out->dtype];
    do {
        for (int64_t j = 0; j < it.inner_n; j++)
            memset(it.ptr[0] + j * it.inner_stride[0], 0, (size_t)isz);
    } while (ember_iter_next(&it));
}

/* ---- compute kernels: one tile of out ------------------------------------------------------- */

#define BY_VALUE(x) (x)
#define BY_POINTER(x) (&(x))
#define DEFINE_BLAS_TILE(NAME, T, GEMM, ONE, ZERO, SCALAR)                                        \
    static void NAME(const problem *p, const char *a, const char *b, char *c, int64_t m,          \
                     int64_t n) {                                                                 \
        T alpha = ONE, beta = ZERO;                                                               \
        GEMM(CblasRowMajor, p->ta, p->tb, (int)m, (int)n, (int)p->K, SCALAR(alpha),               \
             (const T *)a, p->lda, (const T *)b, p->ldb, SCALAR(beta), (T *)c, p->ldc);           \
    }

DEFINE_BLAS_TILE(tile_f32, float, scipy_cblas_sgemm, 1.0f, 0.0f, BY_VALUE)
DEFINE_BLAS_TILE(tile_f64, double, scipy_cblas_dgemm, 1.0, 0.0, BY_VALUE)
DEFINE_BLAS_TILE(tile_c64, float _Complex, scipy_cblas_cgemm, 1.0f, 0.0f, BY_POINTER)
DEFINE_BLAS_TILE(tile_c128, double _Complex, scipy_cblas_zgemm, 1.0, 0.0, BY_POINTER)

/*
 * The C loop for integers and bool, blocked so that a KB x NB panel of b stays in L2 (512 KiB)
 * while every row of a streams past it; the innermost loop runs along a row of b and of out
 * (both unit stride), which the compiler vectorises.  Integers: T is the unsigned type of the
 * dtype's width and WIDE a type at least as wide as int, so that the product cannot overflow
 * a signed int after promotion.  Zeros in a skip their row of b (free for sparse inputs, and
 * what makes bool's OR-of-ANDs a plain OR).
 */
#define KB 256
#define NB_FOR(T) ((int64_t)(1 << 19) / (KB * (int64_t)sizeof(T)))

#define INT_A(x) (x)
#define INT_MAC(acc, a, b, WIDE) ((acc) = (acc) + (WIDE)(a) * (WIDE)(b))
#define INT_FINISH(row, n)
#define BOOL_A(x) ((x) != 0)
#define BOOL_MAC(acc, a, b, WIDE) ((acc) |= (b))
#define BOOL_FINISH(row, n) for (int64_t j = 0; j < (n); j++) (row)[j] = (row)[j] != 0

#define DEFINE_LOOP_TILE(NAME, T, WIDE, LOAD_A, MAC, FINISH)                                      \
    static void NAME(const problem *p, const char *a_, const char *b_, char *c_, int64_t m,       \
                     int64_t n) {                                                                 \
        const T *a = (const T *)a_, *b = (const T *)b_;                                           \
        T *c = (T *)c_;                                                                           \
        const int64_t K = p->K, ars = p->a.rs, acs = p->a.cs, brs = p->b.rs, crs = p->c.rs;       \
        for (int64_t j0 = 0; j0 < n; j0 += NB_FOR(T)) {                                           \
            int64_t nb = ember_min64(NB_FOR(T), n - j0);                                                \
            for (int64_t i = 0; i < m; i++) memset(c + i * crs + j0, 0, (size_t)nb * sizeof(T));  \
            for (int64_t k0 = 0; k0 < K; k0 += KB) {                                              \
                int64_t k1 = ember_min64(k0 + KB, K);                                                   \
                for (int64_t i = 0; i < m; i++) {                                                 \
                    T *restrict crow = c + i * crs + j0;                                          \
                    for (int64_t k = k0; k < k1; k++) {                                           \
                        T av = (T)LOAD_A(a[i * ars + k * acs]);                                   \
                        if (av == 0) continue;                                                    \
                        const T *restrict brow = b + k * brs + j0;                                \
                        for (int64_t j = 0; j < nb; j++) MAC(crow[j], av, brow[j], WIDE);         \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
            for (int64_t i = 0; i < m; i++) {                                                     \
                T *crow = c + i * crs + j0;                                                       \
                (void)crow;                                                                       \
                FINISH(crow, nb);                                                                 \
            }                                                                                     \
        }                                                                                         \
    }

DEFINE_LOOP_TILE(tile_u8, uint8_t, uint32_t, INT_A, INT_MAC, INT_FINISH)
DEFINE_LOOP_TILE(tile_u16, uint16_t, uint32_t, INT_A, INT_MAC, INT_FINISH)
DEFINE_LOOP_TILE(tile_u32, uint32_t, uint32_t, INT_A, INT_MAC, INT_FINISH)
DEFINE_LOOP_TILE(tile_u64, uint64_t, uint64_t, INT_A, INT_MAC, INT_FINISH)
DEFINE_LOOP_TILE(tile_bool, uint8_t, uint32_t, BOOL_A, BOOL_MAC, BOOL_FINISH)

/* The dtype a kernel computes in, and the kernel. */
static int compute_dtype(int dtype) {
    return dtype == EMBER_FLOAT16 || dtype == EMBER_BFLOAT16 ? EMBER_FLOAT32 : dtype;
}

static int is_blas(int cdt) {
    return cdt == EMBER_FLOAT32 || cdt == EMBER_FLOAT64 || cdt == EMBER_COMPLEX64 ||
           cdt == EMBER_COMPLEX128;
}

static tile_fn tile_for(int cdt) {
    switch (cdt) {
    case EMBER_FLOAT32: return tile_f32;
    case EMBER_FLOAT64: return tile_f64;
    case EMBER_COMPLEX64: return tile_c64;
    case EMBER_COMPLEX128: return tile_c128;
    case EMBER_BOOL: return tile_bool;
    case EMBER_INT8: case EMBER_UINT8: return tile_u8;
    case EMBER_INT16: return tile_u16;
    case EMBER_INT32: return tile_u32;
    default: return tile_u64;
    }
}

/* ---- threading ------------------------------------------------------------------------------ */

static int64_t gcd64(int64_t x, int64_t y) {
    while (y) { int64_t t = x % y; x = y; y = t; }
    return x;
}

/* Start of part q of [0, extent) split into `parts`, on multiples of 16 where the extent
 * allows (whole micro-kernel panels, cache-line-aligned column starts). */
static int64_t split_point(int64_t extent, int64_t parts, int64_t q) {
    if (q >= parts) return extent;
    int64_t at = extent * q / parts;
    return extent >= 16 * parts ? at / 16 * 16 : at;
}

static void run_tile(const problem *p, tile_fn fn, int64_t bi, int split_rows, int64_t parts,
                     int64_t q) {
    int64_t isz = ember_itemsize[p->cdt];
    int64_t extent = split_rows ? p->M : p->N;
    int64_t lo = split_point(extent, parts, q), hi = split_point(extent, parts, q + 1);
    if (hi <= lo) return;
    const char *a = p->a.base + batch_offset(p, &p->a, bi) * isz;
    const char *b = p->b.base + batch_offset(p, &p->b, bi) * isz;
    char *c = p->c.base + batch_offset(p, &p->c, bi) * isz;
    if (split_rows)
        fn(p, a + lo * p->a.rs * isz, b, c + lo * p->c.rs * isz, hi - lo, p->N);
    else
        fn(p, a, b + lo * p->b.cs * isz, c + lo * p->c.cs * isz, p->M, hi - lo);
}

/* The thread count for the whole product: one below 2^19 multiply-adds (see MACS_PER_WORK). */
static int threads_for_product(const problem *p) {
    double macs = (double)p->nbatch * (double)p->M * (double)p->N * (double)p->K;
    /* no task cap: the work is cut to the thread count by the callers */
    return ember_threads_for((int64_t)fmin(macs / MACS_PER_WORK, 0x1p62), INT64_MAX);
}

/*
 * Distributes (batch, part) tiles over the threads.  Each matrix is split into `parts` slices
 * (along M or N, whichever is longer: each slice re-reads the whole of the other operand) so
 * that the tile count is a multiple of the thread count: one large product gets one slice per
 * thread, batches that divide evenly stay whole, and e.g. 3 batches on 2 threads become 6
 * half-batches.  Many batches are never split: the imbalance is at most one batch in eight.
 */
static void run_tiles(const problem *p, tile_fn fn) {
    int64_t nt = threads_for_product(p);
    if (nt <= 1) {
        for (int64_t bi = 0; bi < p->nbatch; bi++) run_tile(p, fn, bi, 1, 1, 0);
        return;
    }
    int split_rows = p->M >= p->N;
    int64_t parts = (p->nbatch % nt == 0 || p->nbatch >= 8 * nt) ? 1 : nt / gcd64(p->nbatch, nt);
    if ((split_rows ? p->M : p->N) < parts) parts = 1;
    int64_t tasks = p->nbatch * parts;
#pragma omp parallel for num_threads((int)ember_min64(nt, tasks)) schedule(static)
    for (int64_t t = 0; t < tasks; t++) run_tile(p, fn, t / parts, split_rows, parts, t % parts);
}

/* ---- float32: ember's own GEMM (gemm_f32.c) -------------------------------------------------- */

enum native_kind { NATIVE_NONE = 0, NATIVE_GEMM, NATIVE_DOT };

/* Per matrix, products below this many multiply-adds stay with OpenBLAS, whose small-matrix
 * kernels skip packing; so do outputs narrower than the native micro-tile (32 columns), which it
 * would compute mostly as padding (see NOTES-threads.md for the measurements). */
#define NATIVE_MIN_MACS ((int64_t)128 * 128 * 128)
#define NATIVE_MIN_N 32

/* Outputs of DOT_MIN_N to NATIVE_MIN_N - 1 columns whose a rows and b columns are contiguous along
 * K (x @ w.T) take the dot-product kernel, which reads both in place (gemm_f32.c): one thread,
 * 128 x 256 @ 256 x 10 6-7 us vs OpenBLAS 17-19, 128 x 784 @ 784 x 10 16-21 vs 57-61, x 16 or 31
 * columns 1.5x.  OpenBLAS keeps 8 columns or fewer and K below 32, where its small-matrix kernels
 * win (128 x 256 @ 256 x 4: 2.3-2.5 us vs 3.4-4.1; 128 x 10 @ 10 x 10: 1.7 vs 2.7).  Up to
 * DOT_MAX_M rows (inference at batch 1-4) take it at any width: the product is a pass over w,
 * which packing would double (1 x 2048 @ 2048 x 2048, one thread: 0.68 ms vs 1.98 packed, PyTorch
 * 0.66; 4 x 1024 @ 1024 x 1024 packed 0.53 ms, PyTorch 0.33). */
#define DOT_MIN_N 9
#define DOT_MIN_K 32
#define DOT_MAX_M 4

static int wants_native(const problem *p) {
    if (p->cdt != EMBER_FLOAT32 || !ember_cpu_sgemm_supported()) return NATIVE_NONE;
    /* in place only: a float16 or bfloat16 operand is converted (packed) first */
    if (p->dtype == EMBER_FLOAT32 && p->N >= DOT_MIN_N && (p->N < NATIVE_MIN_N || p->M <= DOT_MAX_M) &&
        p->K >= DOT_MIN_K && p->a.cs == 1 && p->b.rs == 1)
        return NATIVE_DOT;
    if (p->N >= NATIVE_MIN_N && (double)p->M * (double)p->N * (double)p->K >= (double)NATIVE_MIN_MACS)
        return NATIVE_GEMM;
    return NATIVE_NONE;
}

static int sgemm_batch(const problem *p, int64_t bi, int nthreads) {
    const float *a = (const float *)p->a.base + batch_offset(p, &p->a, bi);
    const float *b = (const float *)p->b.base + batch_offset(p, &p->b, bi);
    float *c = (float *)p->c.base + batch_offset(p, &p->c, bi);
    if (p->native == NATIVE_DOT)
        return ember_cpu_sgemm_dot(p->M, p->N, p->K, a, p->a.rs, b, p->b.cs, c, p->c.rs, p->c.cs, p->ep,
                                   nthreads);
    return ember_cpu_sgemm(p->M, p->N, p->K, a, p->a.rs, p->a.cs, b, p->b.rs, p->b.cs, c, p->c.rs,
                           p->c.cs, p->ep, nthreads);
}

/* Whole batches per thread when they divide evenly or are many (as run_tiles); otherwise one
 * matrix after another, each with every thread.  Returns an ember_status. */
static int run_native(const problem *p) {
    int nt = threads_for_product(p), status = EMBER_OK;
    if (nt > 1 && p->nbatch > 1 && (p->nbatch % nt == 0 || p->nbatch >= 8 * nt)) {
#pragma omp parallel for num_threads(nt) schedule(static) reduction(max : status)
        for (int64_t bi = 0; bi < p->nbatch; bi++) {
            int s = sgemm_batch(p, bi, 1);
            if (s > status) status = s;
        }
        return status;
    }
    for (int64_t bi = 0; bi < p->nbatch && status == EMBER_OK; bi++) status = sgemm_batch(p, bi, nt);
    return status;
}

/* ---- entry point ---------------------------------------------------------------------------- */

static void init_problem(problem *p, const ember_tensor *out, const ember_tensor *a,
                         const ember_tensor *b) {
    int nd = out->ndim;
    p->dtype = out->dtype;
    p->cdt = compute_dtype(out->dtype);
    p->nbd = nd - 2;
    p->nbatch = 1;
    for (int d = 0; d < p->nbd; d++) {
        p->bshape[d] = out->shape[d];
        p->nbatch *= out->shape[d];
    }
    p->M = out->shape[nd - 2];
    p->N = out->shape[nd - 1];
    p->K = a->shape[nd - 1];
    view_of(&p->a, a);
    view_of(&p->b, b);
    view_of(&p->c, out);
    p->swapped = 0;
    p->ep = NULL;
}

/* Makes every operand readable by the kernel, packing where needed, and chooses p->native;
 * *scratch receives the buffers to free (scratch[2] is out's, to unpack).  The native float32
 * GEMM reads any strides: it needs copies only for a dtype change.  Returns an ember_status. */
static int prepare_operands(problem *p, void *scratch[3]) {
    int blas = is_blas(p->cdt);
    int64_t lda = 0, ldb = 0, ldc = 0;
    int c_layout =
        p->cdt == p->dtype ? layout_of(&p->c, LAYOUT_ROW | LAYOUT_COL, &ldc) : LAYOUT_NONE;
    if (c_layout == LAYOUT_COL) {   /* out^T = b^T a^T, with out^T row-major */
        mat t = p->a;
        p->a = p->b;
        p->b = t;
        transpose_view(&p->a);
        transpose_view(&p->b);
        transpose_view(&p->c);
        t.rows = p->M; p->M = p->N; p->N = t.rows;
        c_layout = layout_of(&p->c, LAYOUT_ROW, &ldc);
        p->swapped = 1;
    }
    p->native = wants_native(p);   /* after the swap: it looks at out's row length */
    if (p->native && p->cdt == p->dtype) return EMBER_OK;
    if (c_layout == LAYOUT_NONE) {   /* compute into contiguous scratch, unpack afterwards */
        int64_t bytes = ember_max64(p->nbatch * p->M * p->N * ember_itemsize[p->cdt], 64);
        if (posix_memalign(&scratch[2], 64, (size_t)bytes) != 0) return EMBER_ERR_OUT_OF_MEMORY;
        p->c.base = scratch[2];
        p->c.rs = p->N;
        p->c.cs = 1;
        int64_t stride = p->M * p->N;
        for (int d = p->nbd - 1; d >= 0; d--) {
            p->c.bstrides[d] = stride;
            stride *= p->bshape[d];
        }
        ldc = ember_max64(p->N, 1);
    }
    /* BLAS reads a and b row- or column-major; the C loop reads a with any strides and needs
     * unit column stride in b.  A dtype change (float16/bfloat16) always packs. */
    int same = p->cdt == p->dtype, la, lb;
    if (blas) {
        la = same ? layout_of(&p->a, LAYOUT_ROW | LAYOUT_COL, &lda) : LAYOUT_NONE;
        lb = same ? layout_of(&p->b, LAYOUT_ROW | LAYOUT_COL, &ldb) : LAYOUT_NONE;
    } else {
        la = LAYOUT_ROW;
        lb = layout_of(&p->b, LAYOUT_ROW, &ldb);
    }
    if (la == LAYOUT_NONE) {
        if (!(scratch[0] = pack(p, &p->a, p->dtype))) return EMBER_ERR_OUT_OF_MEMORY;
        la = layout_of(&p->a, LAYOUT_ROW, &lda);
    }
    if (lb == LAYOUT_NONE) {
        if (!(scratch[1] = pack(p, &p->b, p->dtype))) return EMBER_ERR_OUT_OF_MEMORY;
        lb = layout_of(&p->b, LAYOUT_ROW, &ldb);
    }
    p->ta = la == LAYOUT_COL ? CblasTrans : CblasNoTrans;
    p->tb = lb == LAYOUT_COL ? CblasTrans : CblasNoTrans;
    p->lda = (int)lda;
    p->ldb = (int)ldb;
    p->ldc = (int)ldc;
    return EMBER_OK;
}

int ember_cpu_matmul_fused(const ember_tensor *out, const ember_tensor *a, const ember_tensor *b,
                           const sgemm_epilogue *ep, int *fused) {
    *fused = 0;
    if (!validate(out, a, b)) return EMBER_ERR_INVALID_ARGUMENT;
    problem p;
    init_problem(&p, out, a, b);
    if (p.nbatch == 0 || p.M == 0 || p.N == 0) return EMBER_OK;
    if (p.K == 0) {
        zero_out(out);
        return EMBER_OK;
    }
    /* cblas takes int dimensions (scipy-openblas32 is an LP64 build) */
    if (is_blas(p.cdt) && (p.M > INT_MAX || p.N > INT_MAX || p.K > INT_MAX))
        return EMBER_ERR_UNSUPPORTED;
    fold_batch_into_rows(&p);
    void *scratch[3] = {NULL, NULL, NULL};
    int status = prepare_operands(&p, scratch);
    /* the kernels add bias along the columns of what they compute: out's own, one matrix, in place */
    if (ep && p.native && !p.swapped && p.nbatch == 1 && p.dtype == EMBER_FLOAT32) {
        p.ep = ep;
        *fused = 1;
    }
    if (status == EMBER_OK) {
        if (p.native)
            status = run_native(&p);
        else
            run_tiles(&p, tile_for(p.cdt));
        if (status == EMBER_OK && scratch[2]) unpack_out(&p, scratch[2], out);
    }
    for (int i = 0; i < 3; i++) free(scratch[i]);
    return status;
}

int ember_cpu_matmul(const ember_tensor *out, const ember_tensor *a, const ember_tensor *b) {
    int fused;
    return ember_cpu_matmul_fused(out, a, b, NULL, &fused);
}

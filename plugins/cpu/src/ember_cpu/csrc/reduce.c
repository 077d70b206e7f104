/*
 * reduce.c -- reductions (sum, prod, max, min, any, all), arg-reductions and inclusive scans.
 *
 * Reductions
 * ----------
 * The core hands us x with the reduced dims at the end.  plan_reduce() first simplifies the
 * geometry: size-1 dims go, negative strides are flipped, the reduced dims are reordered by
 * stride and merged where they are contiguous.  Then one of two drivers runs:
 *
 *   reduce_generic  every output element reduces its own block: pairwise over the rows of the
 *                   block and, inside a row, pairwise over leaves of LEAF elements summed with
 *                   LANES independent accumulators.  A contiguous row is pattern (a) (the leaf
 *                   vectorizes), anything else pattern (c).
 *   reduce_cols     pattern (b): the reduced dims are strided but some output dim has unit
 *                   stride in x (sum over axis 0 of a C-contiguous matrix).  Whole rows of
 *                   outputs are accumulated at once, again pairwise over the reduced index.
 *
 * Parallel work is handed out as the top subtrees of the same pairwise tree the serial code
 * walks, and the number of subtrees depends only on the shape, so a result never depends on
 * the number of threads.
 *
 * The per-dtype code (leaves, pairwise recursions, loads and stores) is instantiated from
 * DEFINE_RKERNEL for each op x dtype; the drivers are ordinary functions that reach it through
 * an `rkernel` table of function pointers (one indirect call per output element or per task).
 */
#include <math.h>
#include <stdlib.h>
#include <omp.h>

#include "common.h"
#include "ember_cpu.h"

#define LEAF 1024            /* elements in one leaf of the pairwise tree over a run           */
#define COL_LEAF 16          /* reduced rows in one leaf of reduce_cols' pairwise tree          */
#define COL_TILE_BYTES 16384 /* accumulators per reduce_cols task: stays in L1                  */
#define MAX_CHUNKS 16        /* most parallel subtrees one output (or tile) is split into       */
#define NUM_REDUCE_OPS 6

/* ---- descriptor checks ------------------------------------------------------------------ */

static int desc_ok(const ember_tensor *t) {
    if (t == NULL || t->dtype < 0 || t->dtype >= EMBER_NUM_DTYPES || t->ndim < 0 ||
        t->ndim > EMBER_MAX_NDIM)
        return 0;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return 0;
        n *= t->shape[d];
    }
    return n == 0 || t->data != NULL;
}

/* Byte offset of element `flat` (C order) of an n-d index space with the given byte strides.
 * The outermost dim needs no modulo, so a 1-d space costs one multiply. */
static inline int64_t dims_offset(int n, const int64_t *shape, const int64_t *bstride, int64_t flat) {
    int64_t off = 0;
    for (int d = n - 1; d > 0; d--) {
        off += (flat % shape[d]) * bstride[d];
        flat /= shape[d];
    }
    return n > 0 ? off + flat * bstride[0] : 0;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- the pairwise tree ------------------------------------------------------------------ */

/* Where the pairwise tree splits n units whose leaves hold `leaf` units: at the first leaf
 * boundary at or after the middle, so every leaf but the last is full (n > leaf). */
static inline int64_t pw_split(int64_t n, int64_t leaf) { return (n / 2 + leaf - 1) / leaf * leaf; }

/* Depth of the pairwise tree over n units: the left child is never the smaller, so follow it. */
static int pw_depth(int64_t n, int64_t leaf) {
    int depth = 0;
    while (n > leaf) {
        n = pw_split(n, leaf);
        depth++;
    }
    return depth;
}

/* How many top subtrees of the pairwise tree over `units` units to run as parallel tasks: a power
 * of two chosen from the shape alone.  Every node above the chunks holds more than `leaf` units,
 * so the serial recursion splits exactly there too and both give identical results. */
static int pw_chunks(int64_t work, int64_t units, int64_t leaf) {
    int k = 1;
    while (k < MAX_CHUNKS && work / (2 * k) >= EMBER_PARALLEL_GRAIN && units / (2 * k) > 2 * leaf) k *= 2;
    return k;
}

/* The k (a power of two) chunk boundaries of [lo, hi) into b[0..k]. */
static void pw_bounds(int64_t lo, int64_t hi, int64_t leaf, int k, int64_t *b) {
    if (k == 1) {
        b[0] = lo;
        b[1] = hi;
        return;
    }
    int64_t mid = lo + pw_split(hi - lo, leaf);
    pw_bounds(lo, mid, leaf, k / 2, b);
    pw_bounds(mid, hi, leaf, k / 2, b + k / 2);
}

/* ---- the simplified geometry ------------------------------------------------------------ */

typedef struct {
    char *xbase, *obase;
    int64_t xsize;                          /* itemsize of x                                  */
    int nout;                               /* output dims left after simplification          */
    int64_t oshape[EMBER_MAX_NDIM], oxs[EMBER_MAX_NDIM], oos[EMBER_MAX_NDIM];   /* byte strides */
    int nred;                               /* reduced dims, largest stride first, >= 1       */
    int64_t rshape[EMBER_MAX_NDIM], rxs[EMBER_MAX_NDIM];
    int64_t nouter, nred_total;             /* output elements; elements reduced into each    */
    /* reduce_generic: the block of one output is nrows rows of rowlen elements */
    int64_t nrows, rowlen, rowstride, row_leaf;
    /* reduce_cols: `col` is the output dim with unit x stride (-1: none); the other output dims */
    int col, nout2;
    int64_t o2shape[EMBER_MAX_NDIM], o2xs[EMBER_MAX_NDIM], o2os[EMBER_MAX_NDIM];
} rplan;

/* Output dims: drop size 1, walk negative x strides the other way (in x and out alike, so the
 * same pairs of elements meet), merge neighbours contiguous in both x and out. */
static void plan_outer(rplan *pl, const ember_tensor *out, const ember_tensor *x) {
    int64_t xs = ember_itemsize[x->dtype], os = ember_itemsize[out->dtype];
    pl->nout = 0;
    pl->nouter = 1;
    for (int d = 0; d < out->ndim; d++) {
        int64_t n = x->shape[d], sx = x->strides[d] * xs, so = out->strides[d] * os;
        pl->nouter *= n;
        if (n <= 1) continue;
        if (sx < 0) {
            pl->xbase += (n - 1) * sx;
            pl->obase += (n - 1) * so;
            sx = -sx;
            so = -so;
        }
        int k = pl->nout;
        if (k > 0 && pl->oxs[k - 1] == n * sx && pl->oos[k - 1] == n * so) {
            pl->oshape[k - 1] *= n;
            pl->oxs[k - 1] = sx;
            pl->oos[k - 1] = so;
        } else {
            pl->oshape[k] = n;
            pl->oxs[k] = sx;
            pl->oos[k] = so;
            pl->nout++;
        }
    }
}

/* Reduced dims: order does not matter to the result, so flip negative strides, sort by stride
 * (largest first, broadcast stride-0 dims outermost so that a unit-stride dim ends up
 * innermost) and merge neighbours that are contiguous. */
static void plan_reduced(rplan *pl, const ember_tensor *x, int first) {
    int64_t xs = ember_itemsize[x->dtype];
    int nr = 0;
    pl->nred_total = 1;
    for (int d = first; d < x->ndim; d++) {
        int64_t n = x->shape[d], s = x->strides[d] * xs;
        pl->nred_total *= n;
        if (n <= 1) continue;
        if (s < 0) {
            pl->xbase += (n - 1) * s;
            s = -s;
        }
        int i = nr++;   /* insertion sort: largest stride first, 0 counts as largest */
        while (i > 0 && (pl->rxs[i - 1] != 0 && (s == 0 || s > pl->rxs[i - 1]))) {
            pl->rshape[i] = pl->rshape[i - 1];
            pl->rxs[i] = pl->rxs[i - 1];
            i--;
        }
        pl->rshape[i] = n;
        pl->rxs[i] = s;
    }
    int m = 0;
    for (int i = 0; i < nr; i++) {
        if (m > 0 && pl->rxs[m - 1] == pl->rshape[i] * pl->rxs[i]) {
            pl->rshape[m - 1] *= pl->rshape[i];
            pl->rxs[m - 1] = pl->rxs[i];
        } else {
            pl->rshape[m] = pl->rshape[i];
            pl->rxs[m] = pl->rxs[i];
            m++;
        }
    }
    if (m == 0) {   /* nothing (or one element) reduced: one row of length 1 */
        pl->rshape[0] = 1;
        pl->rxs[0] = xs;
        m = 1;
    }
    pl->nred = m;
}

static void plan_reduce(rplan *pl, const ember_tensor *out, const ember_tensor *x, int nreduce) {
    pl->xbase = ember_base(x);
    pl->obase = ember_base(out);
    pl->xsize = ember_itemsize[x->dtype];
    plan_outer(pl, out, x);
    plan_reduced(pl, x, x->ndim - nreduce);

    pl->nrows = 1;
    for (int d = 0; d < pl->nred - 1; d++) pl->nrows *= pl->rshape[d];
    pl->rowlen = pl->rshape[pl->nred - 1];
    pl->rowstride = pl->rxs[pl->nred - 1];
    /* group short rows so that a leaf of rows holds about LEAF elements, but never more than 16
     * row results are added one after the other */
    pl->row_leaf = pl->rowlen >= LEAF ? 1 : min64(16, LEAF / pl->rowlen);

    pl->col = -1;
    if (pl->rowstride != pl->xsize && pl->nred_total > 1)
        for (int d = pl->nout - 1; d >= 0; d--)
            if (pl->oxs[d] == pl->xsize && pl->oshape[d] >= 16) {
                pl->col = d;
                break;
            }
    pl->nout2 = 0;
    for (int d = 0; d < pl->nout; d++) {
        if (d == pl->col) continue;
        pl->o2shape[pl->nout2] = pl->oshape[d];
        pl->o2xs[pl->nout2] = pl->oxs[d];
        pl->o2os[pl->nout2] = pl->oos[d];
        pl->nout2++;
    }
}

/* ---- per op x dtype kernels ------------------------------------------------------------- */

/* Storage for one accumulator of any dtype (complex128 is the widest). */
typedef struct {
    _Alignas(16) unsigned char b[16];
} accbox;

typedef struct {
    size_t asize;   /* sizeof the accumulator */
    /* reduce units [lo, hi) of the block at xb (rows if nrows > 1, else elements) into *acc */
    void (*part)(const rplan *pl, const char *xb, int64_t lo, int64_t hi, void *acc);
    void (*init)(void *acc, int64_t n);                       /* acc[0..n) = identity        */
    void (*comb)(void *a, const void *b, int64_t n);          /* a[i] = a[i] (op) b[i]       */
    void (*store)(char *o, int64_t os, const void *acc, int64_t n);   /* o[i * os] = acc[i]  */
    /* reduce_cols: acc[0..w) = reduction over reduced rows [r0, r1) of the w outputs at xb;
     * tmp holds one tile of accumulators per level of the pairwise tree */
    void (*cols)(const rplan *pl, const char *xb, int64_t r0, int64_t r1, int64_t w, void *acc,
                 void *tmp, int64_t tile);
} rkernel;

/* Loads turn a stored element into an accumulator (A), stores go back (OT: the output dtype). */
#define LD_CAST(A, v) ((A)(v))
#define LD_F16(A, v) ember_f16_to_f32(v)
#define LD_BF16(A, v) ember_bf16_to_f32(v)
#define ST_CAST(OT, a) ((OT)(a))
#define ST_F16(OT, a) ember_f32_to_f16(a)
#define ST_BF16(OT, a) ember_f32_to_bf16(a)

/* Accumulate ops.  max/min: a NaN wins and then stays (v > NaN and v < NaN are false). */
#define OP_ADD(a, v) ((a) + (v))
#define OP_MUL(a, v) ((a) * (v))
#define OP_MAX(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define OP_MIN(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
/* The contiguous leaf's max/min lanes ignore NaN (these compile to a single vmaxps/vminps) and
 * keep any NaN they meet in separate lanes instead (TRACK_NAN), merged in at the end: GCC does
 * not vectorize the NaN-sticky form when the lanes are unrolled. */
#define LANE_MAX(a, v) ((v) > (a) ? (v) : (a))
#define LANE_MIN(a, v) ((v) < (a) ? (v) : (a))
#define OP_OR(a, v) ((a) | (v))
#define OP_AND(a, v) ((a) & (v))

/* The contiguous leaf keeps LANES independent accumulators: the loop over j vectorizes and the
 * lanes are added pairwise at the end, so each lane sums only LEAF / LANES elements in order.
 * The loops over lanes are unrolled before vectorization (UNROLL): without it GCC keeps the
 * accumulator array in memory and every iteration goes through a store and a reload. */
#define LANES_OF(A) (sizeof(A) >= 8 ? 32 : 64)
#define UNROLL _Pragma("GCC unroll 64")

#define DEFINE_RKERNEL(NAME, T, A, OT, LD, ST, INIT, ACC, LANE, TRACK_NAN)                                        \
    static A NAME##_leaf_contig(const T *p, int64_t n) {                                         \
        enum { L = LANES_OF(A) };                                                                \
        A acc[L], nan[L];                                                                        \
        UNROLL for (int j = 0; j < L; j++) acc[j] = nan[j] = INIT;                               \
        int64_t i = 0;                                                                           \
        for (; i + L <= n; i += L) {                                                             \
            UNROLL for (int j = 0; j < L; j++) {                                                 \
                A v = LD(A, p[i + j]);                                                           \
                acc[j] = LANE(acc[j], v);                                                        \
                if (TRACK_NAN) nan[j] = v != v ? v : nan[j];                                     \
            }                                                                                    \
        }                                                                                        \
        UNROLL for (int w = L / 2; w > 0; w /= 2) {                                              \
            UNROLL for (int j = 0; j < w; j++) acc[j] = ACC(acc[j], acc[j + w]);                 \
        }                                                                                        \
        A r = acc[0];                                                                            \
        if (TRACK_NAN)                                                                           \
            for (int j = 0; j < L; j++) r = ACC(r, nan[j]);                                      \
        for (; i < n; i++) r = ACC(r, LD(A, p[i]));                                              \
        return r;                                                                                \
    }                                                                                            \
    static A NAME##_leaf_strided(const char *p, int64_t n, int64_t bs) {                         \
        A acc[8];                                                                                \
        UNROLL for (int j = 0; j < 8; j++) acc[j] = INIT;                                        \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= n; i += 8) {                                                             \
            UNROLL for (int j = 0; j < 8; j++)                                                   \
                acc[j] = ACC(acc[j], LD(A, *(const T *)(p + (i + j) * bs)));                     \
        }                                                                                        \
        UNROLL for (int w = 4; w > 0; w /= 2) {                                                  \
            UNROLL for (int j = 0; j < w; j++) acc[j] = ACC(acc[j], acc[j + w]);                 \
        }                                                                                        \
        A r = acc[0];                                                                            \
        for (; i < n; i++) r = ACC(r, LD(A, *(const T *)(p + i * bs)));                          \
        return r;                                                                                \
    }                                                                                            \
    /* pairwise over one run of n elements, byte stride bs */                                    \
    static A NAME##_run(const char *p, int64_t n, int64_t bs) {                                  \
        if (n <= LEAF)                                                                           \
            return bs == (int64_t)sizeof(T) ? NAME##_leaf_contig((const T *)p, n)                \
                                            : NAME##_leaf_strided(p, n, bs);                     \
        int64_t m = pw_split(n, LEAF);                                                           \
        A a = NAME##_run(p, m, bs);                                                              \
        A b = NAME##_run(p + m * bs, n - m, bs);                                                 \
        return ACC(a, b);                                                                        \
    }                                                                                            \
    /* pairwise over rows [r0, r1) of a block; a leaf adds up to row_leaf row results */         \
    static A NAME##_rows(const rplan *pl, const char *xb, int64_t r0, int64_t r1) {              \
        if (r1 - r0 <= pl->row_leaf) {                                                           \
            A r = INIT;                                                                          \
            for (int64_t k = r0; k < r1; k++) {                                                  \
                const char *p = xb + dims_offset(pl->nred - 1, pl->rshape, pl->rxs, k);          \
                A v = NAME##_run(p, pl->rowlen, pl->rowstride);                                  \
                r = ACC(r, v);                                                                   \
            }                                                                                    \
            return r;                                                                            \
        }                                                                                        \
        int64_t m = r0 + pw_split(r1 - r0, pl->row_leaf);                                        \
        A a = NAME##_rows(pl, xb, r0, m);                                                        \
        A b = NAME##_rows(pl, xb, m, r1);                                                        \
        return ACC(a, b);                                                                        \
    }                                                                                            \
    static void NAME##_part(const rplan *pl, const char *xb, int64_t lo, int64_t hi, void *acc) { \
        *(A *)acc = pl->nrows > 1 ? NAME##_rows(pl, xb, lo, hi)                                  \
                                  : NAME##_run(xb + lo * pl->rowstride, hi - lo, pl->rowstride); \
    }                                                                                            \
    static void NAME##_init(void *acc, int64_t n) {                                              \
        for (int64_t i = 0; i < n; i++) ((A *)acc)[i] = INIT;                                    \
    }                                                                                            \
    static void NAME##_comb(void *a, const void *b, int64_t n) {                                 \
        A *x = a;                                                                                \
        const A *y = b;                                                                          \
        for (int64_t i = 0; i < n; i++) x[i] = ACC(x[i], y[i]);                                  \
    }                                                                                            \
    static void NAME##_store(char *o, int64_t os, const void *acc, int64_t n) {                  \
        for (int64_t i = 0; i < n; i++) *(OT *)(o + i * os) = ST(OT, ((const A *)acc)[i]);       \
    }                                                                                            \
    /* reduce_cols leaf: acc[0..w) = reduction of up to COL_LEAF rows, one whole row at a   \
     * time (acc stays in L1; the loop over c vectorizes with no reduction in it) */             \
    static void NAME##_cols_leaf(const rplan *pl, const char *xb, int64_t r0, int64_t r1,         \
                                 int64_t w, A *restrict acc) {                                   \
        for (int64_t c = 0; c < w; c++) acc[c] = INIT;                                           \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            const T *restrict p = (const T *)(xb + dims_offset(pl->nred, pl->rshape, pl->rxs, r)); \
            for (int64_t c = 0; c < w; c++) acc[c] = ACC(acc[c], LD(A, p[c]));                   \
        }                                                                                        \
    }                                                                                            \
    static void NAME##_cols(const rplan *pl, const char *xb, int64_t r0, int64_t r1, int64_t w,  \
                            void *accv, void *tmpv, int64_t tile) {                              \
        A *acc = accv, *tmp = tmpv;                                                              \
        if (r1 - r0 <= COL_LEAF) {                                                               \
            NAME##_cols_leaf(pl, xb, r0, r1, w, acc);                                            \
            return;                                                                              \
        }                                                                                        \
        int64_t m = r0 + pw_split(r1 - r0, COL_LEAF);                                            \
        NAME##_cols(pl, xb, r0, m, w, acc, tmp, tile);                                           \
        NAME##_cols(pl, xb, m, r1, w, tmp, tmp + tile, tile);                                    \
        for (int64_t c = 0; c < w; c++) acc[c] = ACC(acc[c], tmp[c]);                            \
    }                                                                                            \
    static const rkernel NAME##_kernel = {sizeof(A),        NAME##_part, NAME##_init,             \
                                          NAME##_comb,      NAME##_store, NAME##_cols};

/* sum and prod: X(name, code, storage, accumulator, load, store).  Integers accumulate in an
 * unsigned type (wrapping, no undefined behaviour) at least as wide as int, so that products
 * of narrow types are not promoted to signed int; the final store truncates modulo 2^bits. */
#define SUM_TYPES(X)                                                                    \
    X(i8, EMBER_INT8, int8_t, uint32_t, LD_CAST, ST_CAST)                               \
    X(i16, EMBER_INT16, int16_t, uint32_t, LD_CAST, ST_CAST)                            \
    X(i32, EMBER_INT32, int32_t, uint32_t, LD_CAST, ST_CAST)                            \
    X(i64, EMBER_INT64, int64_t, uint64_t, LD_CAST, ST_CAST)                            \
    X(u8, EMBER_UINT8, uint8_t, uint32_t, LD_CAST, ST_CAST)                             \
    X(f16, EMBER_FLOAT16, ember_f16, float, LD_F16, ST_F16)                             \
    X(bf16, EMBER_BFLOAT16, ember_bf16, float, LD_BF16, ST_BF16)                        \
    X(f32, EMBER_FLOAT32, float, float, LD_CAST, ST_CAST)                               \
    X(f64, EMBER_FLOAT64, double, double, LD_CAST, ST_CAST)                             \
    X(c64, EMBER_COMPLEX64, float _Complex, float _Complex, LD_CAST, ST_CAST)           \
    X(c128, EMBER_COMPLEX128, double _Complex, double _Complex, LD_CAST, ST_CAST)

/* max, min, argmax, argmin: X(name, code, storage, compare type, load, store, lowest, highest) */
#define ORD_TYPES(X)                                                                    \
    X(b, EMBER_BOOL, uint8_t, uint8_t, LD_CAST, ST_CAST, 0, 1)                          \
    X(i8, EMBER_INT8, int8_t, int8_t, LD_CAST, ST_CAST, INT8_MIN, INT8_MAX)             \
    X(i16, EMBER_INT16, int16_t, int16_t, LD_CAST, ST_CAST, INT16_MIN, INT16_MAX)       \
    X(i32, EMBER_INT32, int32_t, int32_t, LD_CAST, ST_CAST, INT32_MIN, INT32_MAX)       \
    X(i64, EMBER_INT64, int64_t, int64_t, LD_CAST, ST_CAST, INT64_MIN, INT64_MAX)       \
    X(u8, EMBER_UINT8, uint8_t, uint8_t, LD_CAST, ST_CAST, 0, UINT8_MAX)                \
    X(f16, EMBER_FLOAT16, ember_f16, float, LD_F16, ST_F16, -INFINITY, INFINITY)        \
    X(bf16, EMBER_BFLOAT16, ember_bf16, float, LD_BF16, ST_BF16, -INFINITY, INFINITY)   \
    X(f32, EMBER_FLOAT32, float, float, LD_CAST, ST_CAST, -INFINITY, INFINITY)          \
    X(f64, EMBER_FLOAT64, double, double, LD_CAST, ST_CAST, -INFINITY, INFINITY)

/* any and all, over every dtype: X(name, code, storage, nonzero test).  NaN is truthy. */
#define NZ_PLAIN(v) ((v) != 0)
#define NZ_HALF(v) (((v) & 0x7fff) != 0)   /* f16 and bf16: any bit but the sign */
#define TRUTH_TYPES(X)                                \
    X(b, EMBER_BOOL, uint8_t, NZ_PLAIN)               \
    X(i8, EMBER_INT8, int8_t, NZ_PLAIN)               \
    X(i16, EMBER_INT16, int16_t, NZ_PLAIN)            \
    X(i32, EMBER_INT32, int32_t, NZ_PLAIN)            \
    X(i64, EMBER_INT64, int64_t, NZ_PLAIN)            \
    X(u8, EMBER_UINT8, uint8_t, NZ_PLAIN)             \
    X(f16, EMBER_FLOAT16, ember_f16, NZ_HALF)         \
    X(bf16, EMBER_BFLOAT16, ember_bf16, NZ_HALF)      \
    X(f32, EMBER_FLOAT32, float, NZ_PLAIN)            \
    X(f64, EMBER_FLOAT64, double, NZ_PLAIN)           \
    X(c64, EMBER_COMPLEX64, float _Complex, NZ_PLAIN) \
    X(c128, EMBER_COMPLEX128, double _Complex, NZ_PLAIN)

#define DEF_SUM(name, code, T, A, LD, ST) DEFINE_RKERNEL(sum_##name, T, A, T, LD, ST, 0, OP_ADD, OP_ADD, 0)
#define DEF_PROD(name, code, T, A, LD, ST) DEFINE_RKERNEL(prod_##name, T, A, T, LD, ST, 1, OP_MUL, OP_MUL, 0)
#define DEF_MAX(name, code, T, A, LD, ST, LO, HI) \
    DEFINE_RKERNEL(max_##name, T, A, T, LD, ST, LO, OP_MAX, LANE_MAX, 1)
#define DEF_MIN(name, code, T, A, LD, ST, LO, HI) \
    DEFINE_RKERNEL(min_##name, T, A, T, LD, ST, HI, OP_MIN, LANE_MIN, 1)
/* any/all load 0 or 1 into a byte and OR / AND them; the output is bool */
#define DEF_TRUTH(name, code, T, NZ)                                  \
    DEFINE_RKERNEL(any_##name, T, uint8_t, uint8_t, LD_##name##_NZ, ST_CAST, 0, OP_OR, OP_OR, 0) \
    DEFINE_RKERNEL(all_##name, T, uint8_t, uint8_t, LD_##name##_NZ, ST_CAST, 1, OP_AND, OP_AND, 0)

#define DEF_NZ_LOAD(name, code, T, NZ) static inline uint8_t nzload_##name(T v) { return (uint8_t)NZ(v); }
TRUTH_TYPES(DEF_NZ_LOAD)
#define LD_b_NZ(A, v) nzload_b(v)
#define LD_i8_NZ(A, v) nzload_i8(v)
#define LD_i16_NZ(A, v) nzload_i16(v)
#define LD_i32_NZ(A, v) nzload_i32(v)
#define LD_i64_NZ(A, v) nzload_i64(v)
#define LD_u8_NZ(A, v) nzload_u8(v)
#define LD_f16_NZ(A, v) nzload_f16(v)
#define LD_bf16_NZ(A, v) nzload_bf16(v)
#define LD_f32_NZ(A, v) nzload_f32(v)
#define LD_f64_NZ(A, v) nzload_f64(v)
#define LD_c64_NZ(A, v) nzload_c64(v)
#define LD_c128_NZ(A, v) nzload_c128(v)

SUM_TYPES(DEF_SUM)
SUM_TYPES(DEF_PROD)
ORD_TYPES(DEF_MAX)
ORD_TYPES(DEF_MIN)
TRUTH_TYPES(DEF_TRUTH)

#define ENTRY_SUM(name, code, ...) [code] = &sum_##name##_kernel,
#define ENTRY_PROD(name, code, ...) [code] = &prod_##name##_kernel,
#define ENTRY_MAX(name, code, ...) [code] = &max_##name##_kernel,
#define ENTRY_MIN(name, code, ...) [code] = &min_##name##_kernel,
#define ENTRY_ANY(name, code, ...) [code] = &any_##name##_kernel,
#define ENTRY_ALL(name, code, ...) [code] = &all_##name##_kernel,

/* [op][dtype of x]; NULL: unsupported */
static const rkernel *const reduce_kernels[NUM_REDUCE_OPS][EMBER_NUM_DTYPES] = {
    [EMBER_CPU_REDUCE_SUM] = {SUM_TYPES(ENTRY_SUM)},   [EMBER_CPU_REDUCE_PROD] = {SUM_TYPES(ENTRY_PROD)},
    [EMBER_CPU_REDUCE_MAX] = {ORD_TYPES(ENTRY_MAX)},   [EMBER_CPU_REDUCE_MIN] = {ORD_TYPES(ENTRY_MIN)},
    [EMBER_CPU_REDUCE_ANY] = {TRUTH_TYPES(ENTRY_ANY)}, [EMBER_CPU_REDUCE_ALL] = {TRUTH_TYPES(ENTRY_ALL)},
};

/* ---- reduction drivers -------------------------------------------------------------------- */

/* parts[0..nch) (each n accumulators, `stride` bytes apart) combined in the order of the
 * pairwise tree; the result lands in parts[0]. */
static void tree_combine(const rkernel *k, char *parts, int nch, int64_t n, size_t stride) {
    for (int w = nch / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) {
            k->comb(parts + 2 * i * stride, parts + (2 * i + 1) * stride, n);
            if (i > 0) memcpy(parts + i * stride, parts + 2 * i * stride, n * k->asize);
        }
}

static void reduce_empty(const rkernel *k, const rplan *pl) {
    accbox id;
    k->init(&id, 1);
    for (int64_t o = 0; o < pl->nouter; o++)
        k->store(pl->obase + dims_offset(pl->nout, pl->oshape, pl->oos, o), 0, &id, 1);
}

static int reduce_generic(const rkernel *k, const rplan *pl) {
    int64_t units = pl->nrows > 1 ? pl->nrows : pl->rowlen;
    int64_t leaf = pl->nrows > 1 ? pl->row_leaf : LEAF;
    int nch = pl->nouter >= MAX_CHUNKS ? 1 : pw_chunks(pl->nred_total, units, leaf);
    int parallel = pl->nouter * pl->nred_total >= EMBER_PARALLEL_GRAIN;

    if (nch == 1) {   /* one output per task */
#pragma omp parallel for if (parallel && pl->nouter > 1) schedule(static)
        for (int64_t o = 0; o < pl->nouter; o++) {
            accbox acc;
            k->part(pl, pl->xbase + dims_offset(pl->nout, pl->oshape, pl->oxs, o), 0, units, &acc);
            k->store(pl->obase + dims_offset(pl->nout, pl->oshape, pl->oos, o), 0, &acc, 1);
        }
        return EMBER_OK;
    }
    /* few, large outputs: the top subtrees of each one's pairwise tree run in parallel */
    int64_t b[MAX_CHUNKS + 1];
    pw_bounds(0, units, leaf, nch, b);
    for (int64_t o = 0; o < pl->nouter; o++) {
        const char *xb = pl->xbase + dims_offset(pl->nout, pl->oshape, pl->oxs, o);
        accbox parts[MAX_CHUNKS];
#pragma omp parallel for schedule(static)
        for (int c = 0; c < nch; c++) k->part(pl, xb, b[c], b[c + 1], &parts[c]);
        tree_combine(k, (char *)parts, nch, 1, sizeof(accbox));
        k->store(pl->obase + dims_offset(pl->nout, pl->oshape, pl->oos, o), 0, &parts[0], 1);
    }
    return EMBER_OK;
}

/* Pattern (b).  Tasks are (other output index, tile of the unit-stride output dim, chunk of the
 * reduced rows); chunks exist only when there are few tiles, and their partial tiles are combined
 * in pairwise-tree order afterwards. */
static int reduce_cols(const rkernel *k, const rplan *pl) {
    int64_t M = pl->oshape[pl->col], nr = pl->nred_total;
    int64_t tmax = COL_TILE_BYTES / (int64_t)k->asize;
    int64_t ntiles = (M + tmax - 1) / tmax, tile = (M + ntiles - 1) / ntiles;
    int64_t tasks = (pl->nouter / M) * ntiles;
    int nch = tasks < MAX_CHUNKS ? pw_chunks(nr * min64(M, tile), nr, COL_LEAF) : 1;
    int64_t b[MAX_CHUNKS + 1];
    pw_bounds(0, nr, COL_LEAF, nch, b);
    int depth = pw_depth(nr, COL_LEAF);
    size_t tile_bytes = (size_t)tile * k->asize;
    char *parts = NULL;
    if (nch > 1 && !(parts = malloc(tasks * nch * tile_bytes))) return EMBER_ERR_OUT_OF_MEMORY;
    int failed = 0;

#pragma omp parallel if (pl->nouter * nr >= EMBER_PARALLEL_GRAIN)
    {
        char *buf = malloc((depth + 2) * tile_bytes);   /* result tile + one per tree level */
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks * nch; t++) {
            if (!buf) continue;
            int64_t ch = t % nch, tt = t / nch, ti = tt % ntiles, o2 = tt / ntiles;
            int64_t c0 = ti * tile, w = min64(tile, M - c0);
            const char *xb = pl->xbase + dims_offset(pl->nout2, pl->o2shape, pl->o2xs, o2) + c0 * pl->xsize;
            char *dst = nch > 1 ? parts + t * tile_bytes : buf;
            k->cols(pl, xb, b[ch], b[ch + 1], w, dst, buf + tile_bytes, tile);
            if (nch == 1) {
                char *ob = pl->obase + dims_offset(pl->nout2, pl->o2shape, pl->o2os, o2);
                k->store(ob + c0 * pl->oos[pl->col], pl->oos[pl->col], dst, w);
            }
        }
        free(buf);
    }
    if (!failed && nch > 1)
        for (int64_t tt = 0; tt < tasks; tt++) {
            int64_t ti = tt % ntiles, o2 = tt / ntiles, c0 = ti * tile, w = min64(tile, M - c0);
            char *p = parts + tt * nch * tile_bytes;
            tree_combine(k, p, nch, w, tile_bytes);
            char *ob = pl->obase + dims_offset(pl->nout2, pl->o2shape, pl->o2os, o2);
            k->store(ob + c0 * pl->oos[pl->col], pl->oos[pl->col], p, w);
        }
    free(parts);
    return failed ? EMBER_ERR_OUT_OF_MEMORY : EMBER_OK;
}

int ember_cpu_reduce(int op, const ember_tensor *out, const ember_tensor *x, int nreduce) {
    if (!desc_ok(out) || !desc_ok(x) || op < 0 || op >= NUM_REDUCE_OPS || nreduce < 0 ||
        out->ndim + nreduce != x->ndim)
        return EMBER_ERR_INVALID_ARGUMENT;
    for (int d = 0; d < out->ndim; d++)
        if (out->shape[d] != x->shape[d]) return EMBER_ERR_INVALID_ARGUMENT;
    int truth = op == EMBER_CPU_REDUCE_ANY || op == EMBER_CPU_REDUCE_ALL;
    if (out->dtype != (truth ? EMBER_BOOL : x->dtype)) return EMBER_ERR_INVALID_ARGUMENT;
    const rkernel *k = reduce_kernels[op][x->dtype];
    if (k == NULL) return EMBER_ERR_UNSUPPORTED;

    rplan pl;
    plan_reduce(&pl, out, x, nreduce);
    if (pl.nouter == 0) return EMBER_OK;
    if (pl.nred_total == 0) {
        reduce_empty(k, &pl);
        return EMBER_OK;
    }
    return pl.col >= 0 ? reduce_cols(k, &pl) : reduce_generic(k, &pl);
}

/* ---- arg-reductions ------------------------------------------------------------------------ */

/* Leading dims of x (all but the last) and of out, as byte strides, for row offsets. */
typedef struct {
    int nlead;
    int64_t shape[EMBER_MAX_NDIM], xs[EMBER_MAX_NDIM], os[EMBER_MAX_NDIM];
    int64_t rows, n, inner;   /* rows, elements per row, byte stride along the row */
} rowplan;

static void plan_rows(rowplan *rp, const ember_tensor *out, const ember_tensor *x) {
    int64_t xs = ember_itemsize[x->dtype], os = ember_itemsize[out->dtype];
    rp->nlead = x->ndim > 0 ? x->ndim - 1 : 0;
    rp->rows = 1;
    for (int d = 0; d < rp->nlead; d++) {
        rp->shape[d] = x->shape[d];
        rp->xs[d] = x->strides[d] * xs;
        rp->os[d] = out->strides[d] * os;
        rp->rows *= x->shape[d];
    }
    rp->n = x->ndim > 0 ? x->shape[x->ndim - 1] : 1;
    rp->inner = x->ndim > 0 ? x->strides[x->ndim - 1] * xs : xs;
}

typedef struct {
    /* index of the first extreme of elements [lo, hi) of the run at p (byte stride bs), its
     * value into *val; a NaN is the extreme, so the scan stops at the first one */
    int64_t (*scan)(const char *p, int64_t lo, int64_t hi, int64_t bs, void *val);
    /* a later chunk's result a replaces the earlier b: b is not NaN and (a is NaN or beats b) */
    int (*beats)(const void *a, const void *b);
} akernel;

#define DEFINE_AKERNEL(NAME, T, A, LD, BETTER)                                                 \
    static int64_t NAME##_scan(const char *p, int64_t lo, int64_t hi, int64_t bs, void *val) { \
        A best = LD(A, *(const T *)(p + lo * bs));                                             \
        int64_t bi = lo;                                                                       \
        if (best == best)                                                                      \
            for (int64_t i = lo + 1; i < hi; i++) {                                            \
                A v = LD(A, *(const T *)(p + i * bs));                                         \
                if (BETTER(v, best)) {                                                         \
                    best = v;                                                                  \
                    bi = i;                                                                    \
                } else if (v != v) {                                                           \
                    best = v;                                                                  \
                    bi = i;                                                                    \
                    break;                                                                     \
                }                                                                              \
            }                                                                                  \
        *(A *)val = best;                                                                      \
        return bi;                                                                             \
    }                                                                                          \
    static int NAME##_beats(const void *a, const void *b) {                                    \
        A x = *(const A *)a, y = *(const A *)b;                                                \
        return y == y && (x != x || BETTER(x, y));                                             \
    }                                                                                          \
    static const akernel NAME##_akernel = {NAME##_scan, NAME##_beats};

#define BETTER_GT(v, best) ((v) > (best))
#define BETTER_LT(v, best) ((v) < (best))
#define DEF_ARGMAX(name, code, T, A, LD, ST, LO, HI) DEFINE_AKERNEL(argmax_##name, T, A, LD, BETTER_GT)
#define DEF_ARGMIN(name, code, T, A, LD, ST, LO, HI) DEFINE_AKERNEL(argmin_##name, T, A, LD, BETTER_LT)
ORD_TYPES(DEF_ARGMAX)
ORD_TYPES(DEF_ARGMIN)
#define ENTRY_ARGMAX(name, code, ...) [code] = &argmax_##name##_akernel,
#define ENTRY_ARGMIN(name, code, ...) [code] = &argmin_##name##_akernel,
static const akernel *const arg_kernels[2][EMBER_NUM_DTYPES] = {
    [EMBER_CPU_ARGMAX] = {ORD_TYPES(ENTRY_ARGMAX)},
    [EMBER_CPU_ARGMIN] = {ORD_TYPES(ENTRY_ARGMIN)},
};

#define MAX_ARG_CHUNKS 64

/* One long row split into chunks scanned in parallel, then merged in order (ties: earlier). */
static int64_t arg_row_parallel(const akernel *k, const char *p, int64_t n, int64_t bs) {
    int nch = omp_get_max_threads();
    if (nch > MAX_ARG_CHUNKS) nch = MAX_ARG_CHUNKS;
    int64_t idx[MAX_ARG_CHUNKS];
    accbox val[MAX_ARG_CHUNKS];
#pragma omp parallel for num_threads(nch) schedule(static)
    for (int c = 0; c < nch; c++) idx[c] = k->scan(p, n * c / nch, n * (c + 1) / nch, bs, &val[c]);
    int best = 0;
    for (int c = 1; c < nch; c++)
        if (k->beats(&val[c], &val[best])) best = c;
    return idx[best];
}

int ember_cpu_arg_reduce(int op, const ember_tensor *out, const ember_tensor *x) {
    if (!desc_ok(out) || !desc_ok(x) || (op != EMBER_CPU_ARGMAX && op != EMBER_CPU_ARGMIN) ||
        x->ndim < 1 || out->ndim != x->ndim - 1 || out->dtype != EMBER_INT64)
        return EMBER_ERR_INVALID_ARGUMENT;
    for (int d = 0; d < out->ndim; d++)
        if (out->shape[d] != x->shape[d]) return EMBER_ERR_INVALID_ARGUMENT;
    const akernel *k = arg_kernels[op][x->dtype];
    if (k == NULL) return EMBER_ERR_UNSUPPORTED;
    rowplan rp;
    plan_rows(&rp, out, x);
    if (rp.rows == 0) return EMBER_OK;
    if (rp.n == 0) return EMBER_ERR_INVALID_ARGUMENT;   /* argmax of nothing */
    const char *xb = ember_base(x);
    char *ob = ember_base(out);

    if (rp.rows < MAX_CHUNKS && rp.n >= 2 * EMBER_PARALLEL_GRAIN && omp_get_max_threads() > 1) {
        for (int64_t r = 0; r < rp.rows; r++) {
            int64_t i = arg_row_parallel(k, xb + dims_offset(rp.nlead, rp.shape, rp.xs, r), rp.n, rp.inner);
            *(int64_t *)(ob + dims_offset(rp.nlead, rp.shape, rp.os, r)) = i;
        }
        return EMBER_OK;
    }
#pragma omp parallel for if (rp.rows > 1 && rp.rows * rp.n >= EMBER_PARALLEL_GRAIN) schedule(static)
    for (int64_t r = 0; r < rp.rows; r++) {
        accbox val;
        int64_t i = k->scan(xb + dims_offset(rp.nlead, rp.shape, rp.xs, r), 0, rp.n, rp.inner, &val);
        *(int64_t *)(ob + dims_offset(rp.nlead, rp.shape, rp.os, r)) = i;
    }
    return EMBER_OK;
}

/* ---- scans ---------------------------------------------------------------------------------- */

/* A running total in the accumulator type (float for float16/bfloat16, wrapping unsigned for
 * integers), stored after every element.  Reading x[i] before writing out[i] keeps an in-place
 * scan (out == x) correct. */
typedef void (*scan_fn)(const char *x, int64_t xs, char *o, int64_t os, int64_t n);

#define DEFINE_SCAN(NAME, T, A, LD, ST, INIT, ACC)                                  \
    static void NAME(const char *x, int64_t xs, char *o, int64_t os, int64_t n) {   \
        A acc = INIT;                                                               \
        for (int64_t i = 0; i < n; i++) {                                           \
            acc = ACC(acc, LD(A, *(const T *)(x + i * xs)));                        \
            *(T *)(o + i * os) = ST(T, acc);                                        \
        }                                                                           \
    }
#define DEF_CUMSUM(name, code, T, A, LD, ST) DEFINE_SCAN(cumsum_##name, T, A, LD, ST, 0, OP_ADD)
#define DEF_CUMPROD(name, code, T, A, LD, ST) DEFINE_SCAN(cumprod_##name, T, A, LD, ST, 1, OP_MUL)
SUM_TYPES(DEF_CUMSUM)
SUM_TYPES(DEF_CUMPROD)
#define ENTRY_CUMSUM(name, code, ...) [code] = cumsum_##name,
#define ENTRY_CUMPROD(name, code, ...) [code] = cumprod_##name,
static const scan_fn scan_kernels[2][EMBER_NUM_DTYPES] = {
    [EMBER_CPU_SCAN_SUM] = {SUM_TYPES(ENTRY_CUMSUM)},
    [EMBER_CPU_SCAN_PROD] = {SUM_TYPES(ENTRY_CUMPROD)},
};

int ember_cpu_scan(int op, const ember_tensor *out, const ember_tensor *x) {
    if (!desc_ok(out) || !desc_ok(x) || (op != EMBER_CPU_SCAN_SUM && op != EMBER_CPU_SCAN_PROD) ||
        out->ndim != x->ndim || out->dtype != x->dtype)
        return EMBER_ERR_INVALID_ARGUMENT;
    for (int d = 0; d < x->ndim; d++)
        if (out->shape[d] != x->shape[d]) return EMBER_ERR_INVALID_ARGUMENT;
    scan_fn f = scan_kernels[op][x->dtype];
    if (f == NULL) return EMBER_ERR_UNSUPPORTED;
    rowplan rp;
    plan_rows(&rp, out, x);
    int64_t os = out->ndim > 0 ? out->strides[out->ndim - 1] * ember_itemsize[out->dtype] : 0;
    const char *xb = ember_base(x);
    char *ob = ember_base(out);
    if (rp.rows == 0 || rp.n == 0) return EMBER_OK;
    /* a scan is sequential along its row: threads take whole rows */
#pragma omp parallel for if (rp.rows > 1 && rp.rows * rp.n >= EMBER_PARALLEL_GRAIN) schedule(static)
    for (int64_t r = 0; r < rp.rows; r++)
        f(xb + dims_offset(rp.nlead, rp.shape, rp.xs, r), rp.inner,
          ob + dims_offset(rp.nlead, rp.shape, rp.os, r), os, rp.n);
    return EMBER_OK;
}

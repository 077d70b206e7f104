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
 *                   block and, inside a row, pairwise over leaves of LEAF elements, each leaf
 *                   summed in many independent lanes.  A contiguous row is pattern (a) (the leaf
 *                   is explicitly vectorized), anything else pattern (c).
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
 * an `rkernel` table of function pointers (one indirect call per block of outputs or per task).
 */
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "ember_cpu.h"

#define LEAF 1024            /* elements in one leaf of the pairwise tree over a run           */
#define COL_LEAF 16          /* reduced rows in one leaf of reduce_cols' pairwise tree          */
#define COL_TILE_BYTES 16384 /* accumulators per reduce_cols task: stays in L1                  */
/* most parallel subtrees one output (or tile) is split into: a property of its size, never of
 * the thread count, so that a sum's order is the same on 1 or 128 threads */
#define MAX_CHUNKS 64
#define FEW_OUTPUTS 16       /* below this many outputs (or tiles) each is split into subtrees  */
#define NUM_REDUCE_OPS 6

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
    while (k < MAX_CHUNKS && work / (2 * k) >= ember_parallel_grain() && units / (2 * k) > 2 * leaf) k *= 2;
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
    pl->row_leaf = pl->rowlen >= LEAF ? 1 : ember_min64(16, LEAF / pl->rowlen);

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

/* Reduced row r of the block at xb in reduce_cols, where every reduced dim is a row (the outputs
 * run along the unit-stride dim). */
static inline const char *cols_row(const rplan *pl, const char *xb, int64_t r) {
    return xb + ember_flat_offset(pl->nred, pl->rshape, pl->rxs, r);
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
    void (*outs)(const rplan *pl, int64_t o0, int64_t o1);   /* outputs [o0, o1) in full     */
    void (*init)(void *acc, int64_t n);                       /* acc[0..n) = identity        */
    void (*comb)(void *a, const void *b, int64_t n);          /* a[i] = a[i] (op) b[i]       */
    void (*store)(char *o, int64_t os, const void *acc, int64_t n);   /* o[i * os] = acc[i]  */
    /* reduce_cols: acc[0..w) = reduction over reduced rows [r0, r1) of the w outputs at xb;
     * tmp holds one tile of accumulators per level of the pairwise tree */
    void (*cols)(const rplan *pl, const char *xb, int64_t r0, int64_t r1, int64_t w, void *acc,
                 void *tmp, int64_t tile);
} rkernel;

/* Loads turn a stored element into an accumulator (A), stores go back (OT: the output dtype).
 * float16 loads use the integer converter, which GCC vectorizes (strided and column leaves). */
#define LD_CAST(A, v) ((A)(v))
#define LD_F16(A, v) ember_f16_to_f32_int(v)
#define LD_BF16(A, v) ember_bf16_to_f32(v)
#define ST_CAST(OT, a) ((OT)(a))
#define ST_F16(OT, a) ember_f32_to_f16(a)
#define ST_BF16(OT, a) ember_f32_to_bf16(a)

/* Accumulate ops.  max/min: a NaN wins and then stays (v > NaN and v < NaN are false). */
#define OP_ADD(a, v) ((a) + (v))
#define OP_MUL(a, v) ((a) * (v))
#define OP_MAX(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define OP_MIN(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
#define OP_OR(a, v) ((a) | (v))
#define OP_AND(a, v) ((a) & (v))

/*
 * Contiguous leaves.  Real dtypes use GCC vector extensions: four independent 64-byte vector
 * accumulators of A (64 float lanes, 32 double lanes, ...), so a float32 leaf of LEAF elements
 * adds only 16 elements per lane in order before the lanes are combined pairwise.  (Plain loops
 * over an array of lanes are not reliably vectorized by GCC 12: NaN-sticky selects, float16
 * loads and narrow integers all came out scalar.)  Complex dtypes keep an unrolled array of
 * scalar lanes (LEAF_LANES).
 *
 * Vector loads (VLD_*) read VL = 64 / sizeof(A) elements of T and convert them to a vector of A.
 */
#define VBYTES 64
#define UNROLL _Pragma("GCC unroll 64")

#define VLD_CAST(vA, T, p)                                                                 \
    ({                                                                                     \
        typedef T vT_ __attribute__((vector_size(VBYTES / sizeof((vA){}[0]) * sizeof(T)))); \
        vT_ t_;                                                                            \
        memcpy(&t_, (p), sizeof t_);                                                       \
        __builtin_convertvector(t_, vA);                                                   \
    })
#define VLD_BF16(vA, T, p)                                                                 \
    ({                                                                                     \
        typedef uint16_t vT_ __attribute__((vector_size(VBYTES / 2)));                     \
        typedef uint32_t vU_ __attribute__((vector_size(VBYTES)));                         \
        vT_ t_;                                                                            \
        memcpy(&t_, (p), sizeof t_);                                                       \
        (vA)(__builtin_convertvector(t_, vU_) << 16);                                      \
    })
/* float16: through a float buffer the hardware converts into (GCC 12 does not vectorize
 * _Float16 conversions); GCC keeps the buffer in registers.  VBYTES = 64: 16 floats. */
#define VLD_F16(vA, T, p)                                                                  \
    ({                                                                                     \
        float f_[16];                                                                      \
        vA r_;                                                                             \
        ember_f16x16_to_f32(f_, (p));                                                      \
        memcpy(&r_, f_, sizeof r_);                                                        \
        r_;                                                                                \
    })

/* Vector ops.  VMAX/VMIN are the NaN-sticky OP_MAX/OP_MIN as a bitwise select: C has no ?: on
 * vectors, and a comparison yields a vector of 0 / -1 integers of the lanes' width. */
#define VADD(a, v) ((a) + (v))
#define VMUL(a, v) ((a) * (v))
#define VOR(a, v) ((a) | (v))
#define VAND(a, v) ((a) & (v))
#define VSEL(a, v, m) ((__typeof__(a))(((__typeof__(m))(v) & (m)) | ((__typeof__(m))(a) & ~(m))))
#define VMAX(a, v) VSEL(a, v, ((v) > (a)) | ((v) != (v)))
#define VMIN(a, v) VSEL(a, v, ((v) < (a)) | ((v) != (v)))

#define LEAF_VEC(NAME, T, A, LD, INIT, ACC, VLD, VOP)                                            \
    static A NAME##_leaf_contig(const T *p, int64_t n) {                                         \
        typedef A vA __attribute__((vector_size(VBYTES)));                                       \
        enum { VL = VBYTES / sizeof(A) };                                                        \
        vA a0, a1, a2, a3;                                                                       \
        for (int j = 0; j < VL; j++) a0[j] = INIT;                                               \
        a1 = a2 = a3 = a0;                                                                       \
        int64_t i = 0;                                                                           \
        for (; i + 4 * VL <= n; i += 4 * VL) {                                                   \
            a0 = VOP(a0, VLD(vA, T, p + i));                                                     \
            a1 = VOP(a1, VLD(vA, T, p + i + VL));                                                \
            a2 = VOP(a2, VLD(vA, T, p + i + 2 * VL));                                            \
            a3 = VOP(a3, VLD(vA, T, p + i + 3 * VL));                                            \
        }                                                                                        \
        for (; i + VL <= n; i += VL) a1 = VOP(a1, VLD(vA, T, p + i)); /* short rows */          \
        a0 = VOP(VOP(a0, a1), VOP(a2, a3));                                                      \
        A lanes[VL];                                                                             \
        memcpy(lanes, &a0, sizeof lanes);                                                        \
        for (int w = VL / 2; w > 0; w /= 2)                                                      \
            for (int j = 0; j < w; j++) lanes[j] = ACC(lanes[j], lanes[j + w]);                  \
        A r = lanes[0];                                                                          \
        for (; i < n; i++) r = ACC(r, LD(A, p[i]));                                              \
        return r;                                                                                \
    }

/* any/all: the lanes are 0 / -1 masks as wide as T (M), from a vector test; OR / AND them and
 * return 0 or 1.  INIT is 0 (any) or 1 (all). */
#define VNZ(vM, T, p)                                                                       \
    ({                                                                                      \
        typedef T vT_ __attribute__((vector_size(VBYTES)));                                 \
        vT_ t_;                                                                             \
        memcpy(&t_, (p), sizeof t_);                                                        \
        (vM)(t_ != 0);                                                                      \
    })
#define VNZ_HALF(vM, T, p)                                                                  \
    ({                                                                                      \
        vM t_;                                                                              \
        memcpy(&t_, (p), sizeof t_);                                                        \
        (vM)((t_ & 0x7fff) != 0);                                                           \
    })

#define LEAF_TRUTH(NAME, T, A, LD, INIT, ACC, VLD, VOP, M)                                       \
    static A NAME##_leaf_contig(const T *p, int64_t n) {                                         \
        typedef M vM __attribute__((vector_size(VBYTES)));                                       \
        enum { VL = VBYTES / sizeof(M) };                                                        \
        vM a0, a1;                                                                               \
        for (int j = 0; j < VL; j++) a0[j] = (M)-(INIT);                                         \
        a1 = a0;                                                                                 \
        int64_t i = 0;                                                                           \
        for (; i + 2 * VL <= n; i += 2 * VL) {                                                   \
            a0 = VOP(a0, VLD(vM, T, p + i));                                                     \
            a1 = VOP(a1, VLD(vM, T, p + i + VL));                                                \
        }                                                                                        \
        for (; i + VL <= n; i += VL) a1 = VOP(a1, VLD(vM, T, p + i));                            \
        a0 = VOP(a0, a1);                                                                        \
        A r = INIT;                                                                              \
        for (int j = 0; j < VL; j++) r = ACC(r, (A)(a0[j] != 0));                                \
        for (; i < n; i++) r = ACC(r, LD(A, p[i]));                                              \
        return r;                                                                                \
    }

/* complex: an unrolled array of scalar lanes, which GCC keeps in registers */
#define LEAF_LANES(NAME, T, A, LD, INIT, ACC, VLD, VOP)                                          \
    static A NAME##_leaf_contig(const T *p, int64_t n) {                                         \
        enum { L = 16 };                                                                         \
        A acc[L];                                                                                \
        UNROLL for (int j = 0; j < L; j++) acc[j] = INIT;                                        \
        int64_t i = 0;                                                                           \
        for (; i + L <= n; i += L) {                                                             \
            UNROLL for (int j = 0; j < L; j++) acc[j] = ACC(acc[j], LD(A, p[i + j]));           \
        }                                                                                        \
        UNROLL for (int w = L / 2; w > 0; w /= 2) {                                              \
            UNROLL for (int j = 0; j < w; j++) acc[j] = ACC(acc[j], acc[j + w]);                 \
        }                                                                                        \
        A r = acc[0];                                                                            \
        for (; i < n; i++) r = ACC(r, LD(A, p[i]));                                              \
        return r;                                                                                \
    }

/* LEAFDEF(...) defines NAME##_leaf_contig; the rest is common to every op x dtype. */
#define DEFINE_RKERNEL(NAME, T, A, OT, LD, ST, INIT, ACC, LEAFDEF)                               \
    LEAFDEF                                                                                      \
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
                const char *p = xb + ember_flat_offset(pl->nred - 1, pl->rshape, pl->rxs, k);    \
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
    /* outputs [o0, o1), each over its whole block (typed, so short rows cost no indirect calls) */ \
    static void NAME##_outs(const rplan *pl, int64_t o0, int64_t o1) {                           \
        for (int64_t o = o0; o < o1; o++) {                                                      \
            const char *xb = pl->xbase + ember_flat_offset(pl->nout, pl->oshape, pl->oxs, o);    \
            A r = pl->nrows > 1 ? NAME##_rows(pl, xb, 0, pl->nrows)                              \
                                : NAME##_run(xb, pl->rowlen, pl->rowstride);                     \
            *(OT *)(pl->obase + ember_flat_offset(pl->nout, pl->oshape, pl->oos, o)) = ST(OT, r); \
        }                                                                                        \
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
    /* reduce_cols leaf: acc[0..w) = reduction of up to COL_LEAF rows, whole rows at a time    \
     * (acc stays in L1; the loops over c vectorize with no reduction in them).  Four rows are   \
     * combined pairwise before they meet acc, which quarters the loads and stores of acc. */    \
    static void NAME##_cols_leaf(const rplan *pl, const char *xb, int64_t r0, int64_t r1,         \
                                 int64_t w, A *restrict acc) {                                   \
        for (int64_t c = 0; c < w; c++) acc[c] = INIT;                                           \
        int64_t r = r0;                                                                          \
        for (; r + 4 <= r1; r += 4) {                                                            \
            const T *restrict p0 = (const T *)cols_row(pl, xb, r);                               \
            const T *restrict p1 = (const T *)cols_row(pl, xb, r + 1);                           \
            const T *restrict p2 = (const T *)cols_row(pl, xb, r + 2);                           \
            const T *restrict p3 = (const T *)cols_row(pl, xb, r + 3);                           \
            for (int64_t c = 0; c < w; c++) {                                                    \
                A a = ACC(LD(A, p0[c]), LD(A, p1[c])), b = ACC(LD(A, p2[c]), LD(A, p3[c]));      \
                acc[c] = ACC(acc[c], ACC(a, b));                                                 \
            }                                                                                    \
        }                                                                                        \
        for (; r < r1; r++) {                                                                    \
            const T *restrict p = (const T *)cols_row(pl, xb, r);                                \
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
    static const rkernel NAME##_kernel = {sizeof(A),   NAME##_part, NAME##_outs, NAME##_init,     \
                                          NAME##_comb, NAME##_store, NAME##_cols};

/* sum and prod: X(name, code, storage, sum accumulator, prod accumulator, load, store, leaf,
 * vector load).  Integers accumulate in unsigned types (wrapping, no undefined behaviour); the
 * final store truncates modulo 2^bits, so a sum may use T's own width, but a product of two
 * uint16 would be promoted to (signed) int and overflow, hence uint32 for int16 products. */
#define SUM_TYPES(X)                                                                                    \
    X(i8, EMBER_INT8, int8_t, uint8_t, uint8_t, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)                   \
    X(i16, EMBER_INT16, int16_t, uint16_t, uint32_t, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)              \
    X(i32, EMBER_INT32, int32_t, uint32_t, uint32_t, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)              \
    X(i64, EMBER_INT64, int64_t, uint64_t, uint64_t, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)              \
    X(u8, EMBER_UINT8, uint8_t, uint8_t, uint8_t, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)                 \
    X(f16, EMBER_FLOAT16, ember_f16, float, float, LD_F16, ST_F16, LEAF_VEC, VLD_F16)                   \
    X(bf16, EMBER_BFLOAT16, ember_bf16, float, float, LD_BF16, ST_BF16, LEAF_VEC, VLD_BF16)             \
    X(f32, EMBER_FLOAT32, float, float, float, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)                    \
    X(f64, EMBER_FLOAT64, double, double, double, LD_CAST, ST_CAST, LEAF_VEC, VLD_CAST)                 \
    X(c64, EMBER_COMPLEX64, float _Complex, float _Complex, float _Complex, LD_CAST, ST_CAST, LEAF_LANES, -) \
    X(c128, EMBER_COMPLEX128, double _Complex, double _Complex, double _Complex, LD_CAST, ST_CAST, LEAF_LANES, -)

/* max, min, argmax, argmin: X(name, code, storage, compare type, load, store, lowest, highest,
 * vector load) */
#define ORD_TYPES(X)                                                                              \
    X(b, EMBER_BOOL, uint8_t, uint8_t, LD_CAST, ST_CAST, 0, 1, VLD_CAST)                          \
    X(i8, EMBER_INT8, int8_t, int8_t, LD_CAST, ST_CAST, INT8_MIN, INT8_MAX, VLD_CAST)             \
    X(i16, EMBER_INT16, int16_t, int16_t, LD_CAST, ST_CAST, INT16_MIN, INT16_MAX, VLD_CAST)       \
    X(i32, EMBER_INT32, int32_t, int32_t, LD_CAST, ST_CAST, INT32_MIN, INT32_MAX, VLD_CAST)       \
    X(i64, EMBER_INT64, int64_t, int64_t, LD_CAST, ST_CAST, INT64_MIN, INT64_MAX, VLD_CAST)       \
    X(u8, EMBER_UINT8, uint8_t, uint8_t, LD_CAST, ST_CAST, 0, UINT8_MAX, VLD_CAST)                \
    X(f16, EMBER_FLOAT16, ember_f16, float, LD_F16, ST_F16, -INFINITY, INFINITY, VLD_F16)         \
    X(bf16, EMBER_BFLOAT16, ember_bf16, float, LD_BF16, ST_BF16, -INFINITY, INFINITY, VLD_BF16)   \
    X(f32, EMBER_FLOAT32, float, float, LD_CAST, ST_CAST, -INFINITY, INFINITY, VLD_CAST)          \
    X(f64, EMBER_FLOAT64, double, double, LD_CAST, ST_CAST, -INFINITY, INFINITY, VLD_CAST)

/* any and all, over every dtype: X(name, code, storage, load as 0/1, leaf, mask type, vector
 * test).  NaN is truthy; float16/bfloat16 test every bit but the sign. */
#define LD_NZ(A, v) ((uint8_t)((v) != 0))
#define LD_NZ_HALF(A, v) ((uint8_t)(((v) & 0x7fff) != 0))
#define TRUTH_TYPES(X)                                                              \
    X(b, EMBER_BOOL, uint8_t, LD_NZ, LEAF_TRUTH, int8_t, VNZ)                       \
    X(i8, EMBER_INT8, int8_t, LD_NZ, LEAF_TRUTH, int8_t, VNZ)                       \
    X(i16, EMBER_INT16, int16_t, LD_NZ, LEAF_TRUTH, int16_t, VNZ)                   \
    X(i32, EMBER_INT32, int32_t, LD_NZ, LEAF_TRUTH, int32_t, VNZ)                   \
    X(i64, EMBER_INT64, int64_t, LD_NZ, LEAF_TRUTH, int64_t, VNZ)                   \
    X(u8, EMBER_UINT8, uint8_t, LD_NZ, LEAF_TRUTH, int8_t, VNZ)                     \
    X(f16, EMBER_FLOAT16, ember_f16, LD_NZ_HALF, LEAF_TRUTH, int16_t, VNZ_HALF)     \
    X(bf16, EMBER_BFLOAT16, ember_bf16, LD_NZ_HALF, LEAF_TRUTH, int16_t, VNZ_HALF)  \
    X(f32, EMBER_FLOAT32, float, LD_NZ, LEAF_TRUTH, int32_t, VNZ)                   \
    X(f64, EMBER_FLOAT64, double, LD_NZ, LEAF_TRUTH, int64_t, VNZ)                  \
    X(c64, EMBER_COMPLEX64, float _Complex, LD_NZ, LEAF_LANES_T, -, -)              \
    X(c128, EMBER_COMPLEX128, double _Complex, LD_NZ, LEAF_LANES_T, -, -)

#define DEF_SUM(name, code, T, SA, PA, LD, ST, LEAFK, VLD) \
    DEFINE_RKERNEL(sum_##name, T, SA, T, LD, ST, 0, OP_ADD, LEAFK(sum_##name, T, SA, LD, 0, OP_ADD, VLD, VADD))
#define DEF_PROD(name, code, T, SA, PA, LD, ST, LEAFK, VLD) \
    DEFINE_RKERNEL(prod_##name, T, PA, T, LD, ST, 1, OP_MUL, LEAFK(prod_##name, T, PA, LD, 1, OP_MUL, VLD, VMUL))
#define DEF_MAX(name, code, T, A, LD, ST, LO, HI, VLD) \
    DEFINE_RKERNEL(max_##name, T, A, T, LD, ST, LO, OP_MAX, LEAF_VEC(max_##name, T, A, LD, LO, OP_MAX, VLD, VMAX))
#define DEF_MIN(name, code, T, A, LD, ST, LO, HI, VLD) \
    DEFINE_RKERNEL(min_##name, T, A, T, LD, ST, HI, OP_MIN, LEAF_VEC(min_##name, T, A, LD, HI, OP_MIN, VLD, VMIN))
/* any/all load 0 or 1 into a byte and OR / AND them; the output is bool.  (Complex has no
 * vector leaf: LEAF_LANES_T drops the mask-type argument.) */
#define LEAF_LANES_T(NAME, T, A, LD, INIT, ACC, VLD, VOP, M) LEAF_LANES(NAME, T, A, LD, INIT, ACC, VLD, VOP)
#define DEF_TRUTH(name, code, T, LD, LEAFK, M, VT)                                                  \
    DEFINE_RKERNEL(any_##name, T, uint8_t, uint8_t, LD, ST_CAST, 0, OP_OR,                          \
                   LEAFK(any_##name, T, uint8_t, LD, 0, OP_OR, VT, VOR, M))                          \
    DEFINE_RKERNEL(all_##name, T, uint8_t, uint8_t, LD, ST_CAST, 1, OP_AND,                         \
                   LEAFK(all_##name, T, uint8_t, LD, 1, OP_AND, VT, VAND, M))

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
        k->store(pl->obase + ember_flat_offset(pl->nout, pl->oshape, pl->oos, o), 0, &id, 1);
}

static int reduce_generic(const rkernel *k, const rplan *pl) {
    int64_t units = pl->nrows > 1 ? pl->nrows : pl->rowlen;
    int64_t leaf = pl->nrows > 1 ? pl->row_leaf : LEAF;
    int nch = pl->nouter >= FEW_OUTPUTS ? 1 : pw_chunks(pl->nred_total, units, leaf);
    int64_t work = pl->nouter * pl->nred_total;

    if (nch == 1) {   /* whole outputs per task, in blocks */
        int nt = ember_threads_for(work, pl->nouter);
        int64_t nblocks = nt > 1 ? ember_min64(pl->nouter, 64 * (int64_t)nt) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t b = 0; b < nblocks; b++)
            k->outs(pl, pl->nouter * b / nblocks, pl->nouter * (b + 1) / nblocks);
        return EMBER_OK;
    }
    /* few, large outputs: the top subtrees of each one's pairwise tree run in parallel */
    int64_t b[MAX_CHUNKS + 1];
    pw_bounds(0, units, leaf, nch, b);
    int nt = ember_threads_for(work, nch);
    for (int64_t o = 0; o < pl->nouter; o++) {
        const char *xb = pl->xbase + ember_flat_offset(pl->nout, pl->oshape, pl->oxs, o);
        accbox parts[MAX_CHUNKS];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int c = 0; c < nch; c++) k->part(pl, xb, b[c], b[c + 1], &parts[c]);
        tree_combine(k, (char *)parts, nch, 1, sizeof(accbox));
        k->store(pl->obase + ember_flat_offset(pl->nout, pl->oshape, pl->oos, o), 0, &parts[0], 1);
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
    int nch = tasks < FEW_OUTPUTS ? pw_chunks(nr * ember_min64(M, tile), nr, COL_LEAF) : 1;
    int64_t b[MAX_CHUNKS + 1];
    pw_bounds(0, nr, COL_LEAF, nch, b);
    int depth = pw_depth(nr, COL_LEAF);
    size_t tile_bytes = (size_t)tile * k->asize;
    char *parts = NULL;
    if (nch > 1 && !(parts = malloc(tasks * nch * tile_bytes))) return EMBER_ERR_OUT_OF_MEMORY;
    int failed = 0;

#pragma omp parallel num_threads(ember_threads_for(pl->nouter * nr, tasks * nch))
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
            int64_t c0 = ti * tile, w = ember_min64(tile, M - c0);
            const char *xb =
                pl->xbase + ember_flat_offset(pl->nout2, pl->o2shape, pl->o2xs, o2) + c0 * pl->xsize;
            char *dst = nch > 1 ? parts + t * tile_bytes : buf;
            k->cols(pl, xb, b[ch], b[ch + 1], w, dst, buf + tile_bytes, tile);
            if (nch == 1) {
                char *ob = pl->obase + ember_flat_offset(pl->nout2, pl->o2shape, pl->o2os, o2);
                k->store(ob + c0 * pl->oos[pl->col], pl->oos[pl->col], dst, w);
            }
        }
        free(buf);
    }
    if (!failed && nch > 1)
        for (int64_t tt = 0; tt < tasks; tt++) {
            int64_t ti = tt % ntiles, o2 = tt / ntiles, c0 = ti * tile, w = ember_min64(tile, M - c0);
            char *p = parts + tt * nch * tile_bytes;
            tree_combine(k, p, nch, w, tile_bytes);
            char *ob = pl->obase + ember_flat_offset(pl->nout2, pl->o2shape, pl->o2os, o2);
            k->store(ob + c0 * pl->oos[pl->col], pl->oos[pl->col], p, w);
        }
    free(parts);
    return failed ? EMBER_ERR_OUT_OF_MEMORY : EMBER_OK;
}

int ember_cpu_reduce(int op, const ember_tensor *out, const ember_tensor *x, int nreduce) {
    if (ember_check_desc(out) || ember_check_desc(x) || op < 0 || op >= NUM_REDUCE_OPS ||
        nreduce < 0 || out->ndim + nreduce != x->ndim || !ember_same_dims(out, x, out->ndim))
        return EMBER_ERR_INVALID_ARGUMENT;
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

typedef struct {
    /* index of the first extreme of elements [lo, hi) of the run at p (byte stride bs), its
     * value into *val; a NaN is the extreme, so the scan stops at the first one */
    int64_t (*scan)(const char *p, int64_t lo, int64_t hi, int64_t bs, void *val);
    /* a later chunk's result a replaces the earlier b: b is not NaN and (a is NaN or beats b) */
    int (*beats)(const void *a, const void *b);
} akernel;

/* A contiguous run is scanned a LEAF-sized block at a time with the vectorized max/min leaf
 * (EXTREME): a NaN block is searched for its first NaN; otherwise only the first block that holds
 * the (strictly) best value so far is remembered, and searched for it at the end. */
#define DEFINE_AKERNEL(NAME, T, A, LD, BETTER, EXTREME)                                        \
    static int64_t NAME##_contig(const T *p, int64_t lo, int64_t hi, A *val) {                 \
        A best = LD(A, p[lo]);                                                                 \
        int64_t bb = lo;                                                                       \
        for (int64_t b = lo; b < hi; b += LEAF) {                                              \
            A m = EXTREME(p + b, hi - b < LEAF ? hi - b : LEAF);                               \
            if (m != m) {                                                                      \
                for (int64_t i = b;; i++)                                                      \
                    if (LD(A, p[i]) != LD(A, p[i])) {                                          \
                        *val = LD(A, p[i]);                                                    \
                        return i;                                                              \
                    }                                                                          \
            }                                                                                  \
            if (BETTER(m, best)) {                                                             \
                best = m;                                                                      \
                bb = b;                                                                        \
            }                                                                                  \
        }                                                                                      \
        *val = best;                                                                           \
        for (int64_t i = bb; i < hi; i++)                                                      \
            if (LD(A, p[i]) == best) return i;                                                 \
        return bb; /* not reached */                                                           \
    }                                                                                          \
    static int64_t NAME##_scan(const char *p, int64_t lo, int64_t hi, int64_t bs, void *val) { \
        if (bs == (int64_t)sizeof(T)) return NAME##_contig((const T *)p, lo, hi, val);         \
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
#define DEF_ARGMAX(name, code, T, A, LD, ST, LO, HI, VLD) \
    DEFINE_AKERNEL(argmax_##name, T, A, LD, BETTER_GT, max_##name##_leaf_contig)
#define DEF_ARGMIN(name, code, T, A, LD, ST, LO, HI, VLD) \
    DEFINE_AKERNEL(argmin_##name, T, A, LD, BETTER_LT, min_##name##_leaf_contig)
ORD_TYPES(DEF_ARGMAX)
ORD_TYPES(DEF_ARGMIN)
#define ENTRY_ARGMAX(name, code, ...) [code] = &argmax_##name##_akernel,
#define ENTRY_ARGMIN(name, code, ...) [code] = &argmin_##name##_akernel,
static const akernel *const arg_kernels[2][EMBER_NUM_DTYPES] = {
    [EMBER_CPU_ARGMAX] = {ORD_TYPES(ENTRY_ARGMAX)},
    [EMBER_CPU_ARGMIN] = {ORD_TYPES(ENTRY_ARGMIN)},
};

#define MAX_ARG_CHUNKS 64

/* One long row split into nch <= MAX_ARG_CHUNKS chunks, one per thread, then merged in order
 * (ties: earlier). */
static int64_t arg_row_parallel(const akernel *k, const char *p, int64_t n, int64_t bs, int nch) {
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
    if (ember_check_desc(out) || ember_check_desc(x) ||
        (op != EMBER_CPU_ARGMAX && op != EMBER_CPU_ARGMIN) || x->ndim < 1 ||
        out->ndim != x->ndim - 1 || out->dtype != EMBER_INT64 || !ember_same_dims(out, x, out->ndim))
        return EMBER_ERR_INVALID_ARGUMENT;
    const akernel *k = arg_kernels[op][x->dtype];
    if (k == NULL) return EMBER_ERR_UNSUPPORTED;
    ember_rows rp;
    ember_rows_init(&rp, out, x);
    if (rp.rows == 0) return EMBER_OK;
    if (rp.n == 0) return EMBER_ERR_INVALID_ARGUMENT;   /* argmax of nothing */
    const char *xb = ember_base(x);
    char *ob = ember_base(out);

    int nch = ember_threads_for(rp.n, MAX_ARG_CHUNKS);
    if (rp.rows < FEW_OUTPUTS && rp.n >= 2 * ember_parallel_grain() && nch > 1) {
        for (int64_t r = 0; r < rp.rows; r++) {
            const char *row = xb + ember_flat_offset(rp.nlead, rp.shape, rp.xs, r);
            int64_t i = arg_row_parallel(k, row, rp.n, rp.xinner, nch);
            *(int64_t *)(ob + ember_flat_offset(rp.nlead, rp.shape, rp.os, r)) = i;
        }
        return EMBER_OK;
    }
#pragma omp parallel for num_threads(ember_threads_for(rp.rows * rp.n, rp.rows)) schedule(static)
    for (int64_t r = 0; r < rp.rows; r++) {
        accbox val;
        int64_t i = k->scan(xb + ember_flat_offset(rp.nlead, rp.shape, rp.xs, r), 0, rp.n, rp.xinner, &val);
        *(int64_t *)(ob + ember_flat_offset(rp.nlead, rp.shape, rp.os, r)) = i;
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
#define DEF_CUMSUM(name, code, T, SA, PA, LD, ST, ...) DEFINE_SCAN(cumsum_##name, T, SA, LD, ST, 0, OP_ADD)
#define DEF_CUMPROD(name, code, T, SA, PA, LD, ST, ...) DEFINE_SCAN(cumprod_##name, T, PA, LD, ST, 1, OP_MUL)
SUM_TYPES(DEF_CUMSUM)
SUM_TYPES(DEF_CUMPROD)
#define ENTRY_CUMSUM(name, code, ...) [code] = cumsum_##name,
#define ENTRY_CUMPROD(name, code, ...) [code] = cumprod_##name,
static const scan_fn scan_kernels[2][EMBER_NUM_DTYPES] = {
    [EMBER_CPU_SCAN_SUM] = {SUM_TYPES(ENTRY_CUMSUM)},
    [EMBER_CPU_SCAN_PROD] = {SUM_TYPES(ENTRY_CUMPROD)},
};

int ember_cpu_scan(int op, const ember_tensor *out, const ember_tensor *x) {
    if (ember_check_desc(out) || ember_check_desc(x) ||
        (op != EMBER_CPU_SCAN_SUM && op != EMBER_CPU_SCAN_PROD) || out->dtype != x->dtype ||
        !ember_same_shape(out, x))
        return EMBER_ERR_INVALID_ARGUMENT;
    scan_fn f = scan_kernels[op][x->dtype];
    if (f == NULL) return EMBER_ERR_UNSUPPORTED;
    ember_rows rp;
    ember_rows_init(&rp, out, x);
    const char *xb = ember_base(x);
    char *ob = ember_base(out);
    if (rp.rows == 0 || rp.n == 0) return EMBER_OK;
    /* a scan is sequential along its row: threads take whole rows */
#pragma omp parallel for num_threads(ember_threads_for(rp.rows * rp.n, rp.rows)) schedule(static)
    for (int64_t r = 0; r < rp.rows; r++)
        f(xb + ember_flat_offset(rp.nlead, rp.shape, rp.xs, r), rp.xinner,
          ob + ember_flat_offset(rp.nlead, rp.shape, rp.os, r), rp.oinner, rp.n);
    return EMBER_OK;
}

/*
 * index.c -- gather (take), scatter (put, with or without accumulation), count_nonzero and
 * nonzero.
 *
 * take and put work on 3-d views (outer, n, inner) indexed along the middle dim by a 1-d int64
 * index tensor.  All indices are checked before anything is written, so an out-of-range index
 * leaves the destination untouched.  put keeps the order of the indices for every destination
 * element (threads split the outer and inner dims, never the index list), so with repeated
 * indices the last write wins and accumulation adds in index order.
 */
#include <stdlib.h>

#include "common.h"
#include "ember_cpu.h"

#define INNER_CHUNK 65536   /* inner elements one task copies when rows are few and long  */
#define ROW_BLOCK 4096      /* take: about this many elements of work per task            */
#define MAX_PARTS 256       /* most ranges count_nonzero / nonzero split their input into  */
#define POS_BUF 1024        /* nonzero: positions found per call of a dtype kernel         */

/* ---- per-dtype helpers ------------------------------------------------------------------- */

/* Index j of a strided int64 index list, wrapped into [0, n) (the caller checked the range). */
static inline int64_t index_at(const char *p, int64_t bs, int64_t j, int64_t n) {
    int64_t k = *(const int64_t *)(p + j * bs);
    return k < 0 ? k + n : k;
}

/* Accumulating adds that never invoke undefined behaviour: integers wrap through their
 * unsigned type, bool ORs (True + True stays True), float16/bfloat16 add in float32. */
#define ADD_INT(name, T, U) \
    static inline T add_##name(T a, T b) { return (T)((U)a + (U)b); }
ADD_INT(i8, int8_t, uint8_t)
ADD_INT(i16, int16_t, uint16_t)
ADD_INT(i32, int32_t, uint32_t)
ADD_INT(i64, int64_t, uint64_t)
ADD_INT(u8, uint8_t, uint8_t)
static inline uint8_t add_b(uint8_t a, uint8_t b) { return (uint8_t)((a | b) != 0); }
static inline ember_f16 add_f16(ember_f16 a, ember_f16 b) {
    return ember_f32_to_f16(ember_f16_to_f32(a) + ember_f16_to_f32(b));
}
static inline ember_bf16 add_bf16(ember_bf16 a, ember_bf16 b) {
    return ember_f32_to_bf16(ember_bf16_to_f32(a) + ember_bf16_to_f32(b));
}
static inline float add_f32(float a, float b) { return a + b; }
static inline double add_f64(double a, double b) { return a + b; }
static inline float _Complex add_c64(float _Complex a, float _Complex b) { return a + b; }
static inline double _Complex add_c128(double _Complex a, double _Complex b) { return a + b; }

/* Non-zero tests; NaN counts as non-zero, float16/bfloat16 test every bit but the sign. */
#define NZ_PLAIN(v) ((v) != 0)
#define NZ_HALF(v) (((v) & 0x7fff) != 0)

/* X(name, code, storage, nonzero test) */
#define ALL_TYPES(X)                                  \
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

/* add_run: d[i] += v[i] over n elements (byte strides).
 * add_scatter: d[idx[j] * ds] += v[j * vs] for the m indices in order (put with inner == 1).
 * count_run: non-zeros among n elements.
 * find_run: the positions i in [lo, hi) of non-zeros, into pos[]; returns how many. */
typedef void (*add_fn)(char *d, int64_t ds, const char *v, int64_t vs, int64_t n);
typedef void (*add_scatter_fn)(char *d, int64_t ds, const char *v, int64_t vs, const char *ib,
                               int64_t ibs, int64_t n, int64_t m);
typedef int64_t (*count_fn)(const char *p, int64_t n, int64_t bs);
typedef int64_t (*find_fn)(const char *p, int64_t lo, int64_t hi, int64_t bs, int64_t *pos);

#define DEFINE_INDEX_KERNELS(name, code, T, NZ)                                             \
    static void add_run_##name(char *d, int64_t ds, const char *v, int64_t vs, int64_t n) { \
        for (int64_t i = 0; i < n; i++)                                                     \
            *(T *)(d + i * ds) = add_##name(*(T *)(d + i * ds), *(const T *)(v + i * vs));  \
    }                                                                                       \
    static void add_scatter_##name(char *d, int64_t ds, const char *v, int64_t vs,          \
                                   const char *ib, int64_t ibs, int64_t n, int64_t m) {     \
        for (int64_t j = 0; j < m; j++) {                                                   \
            T *q = (T *)(d + index_at(ib, ibs, j, n) * ds);                                 \
            *q = add_##name(*q, *(const T *)(v + j * vs));                                  \
        }                                                                                   \
    }                                                                                       \
    static int64_t count_run_##name(const char *p, int64_t n, int64_t bs) {                 \
        int64_t c = 0;                                                                      \
        if (bs == (int64_t)sizeof(T)) { /* separate loop so that it vectorizes */          \
            const T *q = (const T *)p;                                                      \
            for (int64_t i = 0; i < n; i++) c += NZ(q[i]);                                  \
        } else {                                                                            \
            for (int64_t i = 0; i < n; i++) c += NZ(*(const T *)(p + i * bs));              \
        }                                                                                   \
        return c;                                                                           \
    }                                                                                       \
    static int64_t find_run_##name(const char *p, int64_t lo, int64_t hi, int64_t bs,       \
                                   int64_t *pos) {                                          \
        int64_t c = 0;                                                                      \
        for (int64_t i = lo; i < hi; i++) {                                                 \
            pos[c] = i;                                                                     \
            c += NZ(*(const T *)(p + i * bs));                                              \
        }                                                                                   \
        return c;                                                                           \
    }
ALL_TYPES(DEFINE_INDEX_KERNELS)

#define ENTRY_ADD(name, code, ...) [code] = add_run_##name,
#define ENTRY_ADD_SCATTER(name, code, ...) [code] = add_scatter_##name,
#define ENTRY_COUNT(name, code, ...) [code] = count_run_##name,
#define ENTRY_FIND(name, code, ...) [code] = find_run_##name,
static const add_fn add_kernels[EMBER_NUM_DTYPES] = {ALL_TYPES(ENTRY_ADD)};
static const add_scatter_fn add_scatter_kernels[EMBER_NUM_DTYPES] = {ALL_TYPES(ENTRY_ADD_SCATTER)};
static const count_fn count_kernels[EMBER_NUM_DTYPES] = {ALL_TYPES(ENTRY_COUNT)};
static const find_fn find_kernels[EMBER_NUM_DTYPES] = {ALL_TYPES(ENTRY_FIND)};

/* Runs BODY with U a type of isz bytes (the kernels below only move bytes around). */
#define FOR_ITEMSIZE(isz, BODY)                              \
    switch (isz) {                                           \
    case 1: { typedef uint8_t U; BODY; } break;              \
    case 2: { typedef uint16_t U; BODY; } break;             \
    case 4: { typedef uint32_t U; BODY; } break;             \
    case 8: { typedef uint64_t U; BODY; } break;             \
    default: { typedef double _Complex U; BODY; } break;     \
    }

/* Copies n elements of isz bytes between byte-strided runs. */
static void copy_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, int64_t isz) {
    if (n > 1 && ds == isz && ss == isz) {
        memcpy(d, s, (size_t)(n * isz));
        return;
    }
    FOR_ITEMSIZE(isz, for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, sizeof(U)))
}

/* One element per index (inner == 1), so the loop is over indices, not over rows:
 *   gather:  d[j * ds] = s[idx[j] * ss] for j in [j0, j1);
 *   scatter: d[idx[j] * ds] = s[j * ss] for j in [0, m), in order (the last write wins). */
static void gather_elems(char *d, int64_t ds, const char *s, int64_t ss, const char *ib, int64_t ibs,
                         int64_t n, int64_t j0, int64_t j1, int64_t isz) {
    FOR_ITEMSIZE(isz, for (int64_t j = j0; j < j1; j++)
                          memcpy(d + j * ds, s + index_at(ib, ibs, j, n) * ss, sizeof(U)))
}

static void scatter_elems(char *d, int64_t ds, const char *s, int64_t ss, const char *ib, int64_t ibs,
                          int64_t n, int64_t m, int64_t isz) {
    FOR_ITEMSIZE(isz, for (int64_t j = 0; j < m; j++)
                          memcpy(d + index_at(ib, ibs, j, n) * ds, s + j * ss, sizeof(U)))
}

/* ---- take / put ------------------------------------------------------------------------ */

/* Every index in [-n, n)? (Checked in full before any write.) */
static int indices_ok(const ember_tensor *idx, int64_t n) {
    const char *p = ember_base(idx);
    int64_t m = idx->shape[0], bs = idx->strides[0] * 8;
    for (int64_t j = 0; j < m; j++) {
        int64_t k = *(const int64_t *)(p + j * bs);
        if (k < -n || k >= n) return 0;
    }
    return 1;
}

/* A 3-d view: its first element and byte strides. */
typedef struct {
    char *base;
    int64_t s0, s1, s2;
} view3;

static view3 view3_of(const ember_tensor *t) {
    int64_t isz = ember_itemsize[t->dtype];
    return (view3){ember_base(t), t->strides[0] * isz, t->strides[1] * isz, t->strides[2] * isz};
}

/* Element (o, j, c) of v. */
static inline char *at3(const view3 *v, int64_t o, int64_t j, int64_t c) {
    return v->base + o * v->s0 + j * v->s1 + c * v->s2;
}

/* A take or put: `small` (outer, m, inner) and `big` (outer, n, inner) agree on outer and inner,
 * and row j of small goes with row idx[j] of big. */
typedef struct {
    int64_t outer, n, inner, m, isz;
    view3 small, big;
    const char *ib;   /* the index list and its byte stride */
    int64_t ibs;
} gather;

/* Checks the operands (every index too, before anything is written) and fills g. */
static int gather_init(gather *g, const ember_tensor *small, const ember_tensor *big,
                       const ember_tensor *idx) {
    if (ember_check_desc(small) || ember_check_desc(big) || ember_check_desc(idx) || small->ndim != 3 ||
        big->ndim != 3 || idx->ndim != 1 || idx->dtype != EMBER_INT64 || small->dtype != big->dtype ||
        small->shape[0] != big->shape[0] || small->shape[1] != idx->shape[0] ||
        small->shape[2] != big->shape[2])
        return EMBER_ERR_INVALID_ARGUMENT;
    if (!indices_ok(idx, big->shape[1])) return EMBER_ERR_INDEX;
    g->outer = big->shape[0];
    g->n = big->shape[1];
    g->inner = big->shape[2];
    g->m = idx->shape[0];
    g->isz = ember_itemsize[big->dtype];
    g->small = view3_of(small);
    g->big = view3_of(big);
    g->ib = ember_base(idx);
    g->ibs = idx->strides[0] * 8;
    return EMBER_OK;
}

static int gather_empty(const gather *g) { return g->outer == 0 || g->m == 0 || g->inner == 0; }

int ember_cpu_take(const ember_tensor *out, const ember_tensor *x, const ember_tensor *idx) {
    gather g;
    int st = gather_init(&g, out, x, idx);
    if (st != EMBER_OK || gather_empty(&g)) return st;
    const int64_t outer = g.outer, n = g.n, inner = g.inner, m = g.m, isz = g.isz;
    const view3 *ov = &g.small, *xv = &g.big;

    if (inner == 1) {   /* gathering single elements: blocks of indices per task */
        int64_t nb = (m + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for num_threads(ember_threads_for(outer * m, outer * nb)) schedule(static)
        for (int64_t t = 0; t < outer * nb; t++) {
            int64_t o = t / nb, j0 = (t % nb) * ROW_BLOCK;
            gather_elems(at3(ov, o, 0, 0), ov->s1, at3(xv, o, 0, 0), xv->s1, g.ib, g.ibs, n, j0,
                         ember_min64(m, j0 + ROW_BLOCK), isz);
        }
        return EMBER_OK;
    }
    /* a task copies `jb` consecutive indices' rows, or one chunk of one long row */
    int64_t jb = inner >= ROW_BLOCK ? 1 : ember_min64(m, ROW_BLOCK / inner);
    int64_t nj = (m + jb - 1) / jb;
    int64_t nic = outer * m >= 64 ? 1 : (inner + INNER_CHUNK - 1) / INNER_CHUNK;
    int64_t ic = (inner + nic - 1) / nic;
    int64_t tasks = outer * nj * nic;
#pragma omp parallel for num_threads(ember_threads_for(outer * m * inner, tasks)) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t c = t % nic, jblk = (t / nic) % nj, o = t / nic / nj;
        int64_t c0 = c * ic, len = ember_min64(ic, inner - c0);
        for (int64_t j = jblk * jb; j < ember_min64(m, (jblk + 1) * jb); j++) {
            int64_t k = index_at(g.ib, g.ibs, j, n);
            copy_run(at3(ov, o, j, c0), ov->s2, at3(xv, o, k, c0), xv->s2, len, isz);
        }
    }
    return EMBER_OK;
}

int ember_cpu_put(const ember_tensor *dst, const ember_tensor *idx, const ember_tensor *values,
                  int accumulate) {
    gather g;
    int st = gather_init(&g, values, dst, idx);
    if (st != EMBER_OK || gather_empty(&g)) return st;
    const int64_t outer = g.outer, n = g.n, inner = g.inner, m = g.m, isz = g.isz;
    const view3 *vv = &g.small, *dv = &g.big;
    add_fn add = add_kernels[dst->dtype];

    if (inner == 1) {   /* single elements: a task owns an outer index, indices in order */
#pragma omp parallel for num_threads(ember_threads_for(outer * m, outer)) schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            char *d = at3(dv, o, 0, 0);
            const char *v = at3(vv, o, 0, 0);
            if (accumulate)
                add_scatter_kernels[dst->dtype](d, dv->s1, v, vv->s1, g.ib, g.ibs, n, m);
            else
                scatter_elems(d, dv->s1, v, vv->s1, g.ib, g.ibs, n, m, isz);
        }
        return EMBER_OK;
    }
    /* a task owns (outer index, inner chunk) and runs through all indices in order */
    int64_t nic = outer >= 64 ? 1 : (inner + INNER_CHUNK - 1) / INNER_CHUNK;
    int64_t ic = (inner + nic - 1) / nic;
    int64_t tasks = outer * nic;
#pragma omp parallel for num_threads(ember_threads_for(outer * m * inner, tasks)) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / nic, c0 = (t % nic) * ic, len = ember_min64(ic, inner - c0);
        for (int64_t j = 0; j < m; j++) {
            char *d = at3(dv, o, index_at(g.ib, g.ibs, j, n), c0);
            const char *v = at3(vv, o, j, c0);
            if (accumulate)
                add(d, dv->s2, v, vv->s2, len);
            else
                copy_run(d, dv->s2, v, vv->s2, len, isz);
        }
    }
    return EMBER_OK;
}

/* ---- count_nonzero / nonzero ------------------------------------------------------------- */

/* x's elements in ranges, one per thread (at most MAX_PARTS, the size of nonzero's table). */
static int split_init(ember_split *s, const ember_tensor *x) {
    const ember_tensor *ops[1] = {x};
    return ember_split_init(s, x->ndim, x->shape, 1, ops, MAX_PARTS);
}

static int64_t count_part(const ember_split *s, int p, count_fn f) {
    ember_iter my;
    int64_t col, left = ember_split_seek(s, p, &my, &col), c = 0;
    while (left > 0) {
        int64_t len = ember_min64(my.inner_n - col, left);
        c += f(my.ptr[0] + col * my.inner_stride[0], len, my.inner_stride[0]);
        left -= len;
        col = 0;
        if (left > 0) ember_iter_next(&my);
    }
    return c;
}

int ember_cpu_count_nonzero(const ember_tensor *x, int64_t *count) {
    if (ember_check_desc(x) || count == NULL) return EMBER_ERR_INVALID_ARGUMENT;
    ember_split s;
    int64_t c = 0;
    if (split_init(&s, x)) {
#pragma omp parallel for num_threads(s.nparts) reduction(+ : c) schedule(static)
        for (int p = 0; p < s.nparts; p++) c += count_part(&s, p, count_kernels[x->dtype]);
    }
    *count = c;
    return EMBER_OK;
}

/* Writes the coordinates of part p's non-zeros into out rows first, first + 1, ... */
static void nonzero_part(const ember_split *s, int p, find_fn f, int ndim, char *ob, int64_t os0,
                         int64_t os1, int64_t first) {
    ember_iter my;
    int64_t col, left = ember_split_seek(s, p, &my, &col), row = first;
    int64_t pos[POS_BUF];
    while (left > 0) {
        int64_t end = ember_min64(my.inner_n, col + left);
        left -= end - col;
        for (int64_t lo = col; lo < end; lo += POS_BUF) {
            int64_t found = f(my.ptr[0], lo, ember_min64(end, lo + POS_BUF), my.inner_stride[0], pos);
            for (int64_t i = 0; i < found; i++, row++) {
                char *o = ob + row * os0;
                for (int d = 0; d < ndim - 1; d++) *(int64_t *)(o + d * os1) = my.index[d];
                *(int64_t *)(o + (ndim - 1) * os1) = pos[i];
            }
        }
        col = 0;
        if (left > 0) ember_iter_next(&my);
    }
}

int ember_cpu_nonzero(const ember_tensor *out, const ember_tensor *x) {
    if (ember_check_desc(out) || ember_check_desc(x) || out->dtype != EMBER_INT64 || out->ndim != 2 ||
        out->shape[1] != x->ndim)
        return EMBER_ERR_INVALID_ARGUMENT;
    ember_split s;
    int64_t counts[MAX_PARTS + 1] = {0};
    int any = split_init(&s, x);
    if (any) {
#pragma omp parallel for num_threads(s.nparts) schedule(static)
        for (int p = 0; p < s.nparts; p++) counts[p + 1] = count_part(&s, p, count_kernels[x->dtype]);
        for (int p = 0; p < s.nparts; p++) counts[p + 1] += counts[p];   /* -> first rows */
    }
    if (counts[any ? s.nparts : 0] != out->shape[0]) return EMBER_ERR_INVALID_ARGUMENT;
    if (!any || x->ndim == 0 || out->shape[0] == 0) return EMBER_OK;   /* 0-d: no columns */
    char *ob = ember_base(out);
    int64_t os0 = out->strides[0] * 8, os1 = out->strides[1] * 8;
#pragma omp parallel for num_threads(s.nparts) schedule(static)
    for (int p = 0; p < s.nparts; p++)
        nonzero_part(&s, p, find_kernels[x->dtype], x->ndim, ob, os0, os1, counts[p]);
    return EMBER_OK;
}

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
#include <omp.h>

#include "common.h"
#include "ember_cpu.h"

#define INNER_CHUNK 65536   /* inner elements one task copies when rows are few and long  */
#define ROW_BLOCK 4096      /* take: about this many elements of work per task            */
#define MAX_PARTS 256       /* most ranges count_nonzero / nonzero split their input into  */
#define POS_BUF 1024        /* nonzero: positions found per call of a dtype kernel         */

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

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

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

/* (a, m, c) and (a, n, c) 3-d views that agree on a and c, with a 1-d int64 index of m. */
static int check_gather(const ember_tensor *small, const ember_tensor *big, const ember_tensor *idx) {
    if (!desc_ok(small) || !desc_ok(big) || !desc_ok(idx) || small->ndim != 3 || big->ndim != 3 ||
        idx->ndim != 1 || idx->dtype != EMBER_INT64 || small->dtype != big->dtype ||
        small->shape[0] != big->shape[0] || small->shape[1] != idx->shape[0] ||
        small->shape[2] != big->shape[2])
        return EMBER_ERR_INVALID_ARGUMENT;
    return indices_ok(idx, big->shape[1]) ? EMBER_OK : EMBER_ERR_INDEX;
}

int ember_cpu_take(const ember_tensor *out, const ember_tensor *x, const ember_tensor *idx) {
    int st = check_gather(out, x, idx);
    if (st != EMBER_OK) return st;
    int64_t outer = x->shape[0], n = x->shape[1], inner = x->shape[2], m = idx->shape[0];
    if (outer == 0 || m == 0 || inner == 0) return EMBER_OK;
    int64_t isz = ember_itemsize[x->dtype];
    int64_t xs0 = x->strides[0] * isz, xs1 = x->strides[1] * isz, xs2 = x->strides[2] * isz;
    int64_t os0 = out->strides[0] * isz, os1 = out->strides[1] * isz, os2 = out->strides[2] * isz;
    const char *xb = ember_base(x), *ib = ember_base(idx);
    char *ob = ember_base(out);
    int64_t ibs = idx->strides[0] * 8;

    if (inner == 1) {   /* gathering single elements: blocks of indices per task */
        int64_t nb = (m + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for if (outer * m >= EMBER_PARALLEL_GRAIN && outer * nb > 1) schedule(static)
        for (int64_t t = 0; t < outer * nb; t++) {
            int64_t o = t / nb, j0 = (t % nb) * ROW_BLOCK;
            gather_elems(ob + o * os0, os1, xb + o * xs0, xs1, ib, ibs, n, j0, min64(m, j0 + ROW_BLOCK), isz);
        }
        return EMBER_OK;
    }
    /* a task copies `jb` consecutive indices' rows, or one chunk of one long row */
    int64_t jb = inner >= ROW_BLOCK ? 1 : min64(m, ROW_BLOCK / inner);
    int64_t nj = (m + jb - 1) / jb;
    int64_t nic = outer * m >= 64 ? 1 : (inner + INNER_CHUNK - 1) / INNER_CHUNK;
    int64_t ic = (inner + nic - 1) / nic;
    int64_t tasks = outer * nj * nic;
#pragma omp parallel for if (outer * m * inner >= EMBER_PARALLEL_GRAIN && tasks > 1) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t c = t % nic, jblk = (t / nic) % nj, o = t / nic / nj;
        int64_t c0 = c * ic, len = min64(ic, inner - c0);
        for (int64_t j = jblk * jb; j < min64(m, (jblk + 1) * jb); j++) {
            int64_t k = index_at(ib, ibs, j, n);
            copy_run(ob + o * os0 + j * os1 + c0 * os2, os2, xb + o * xs0 + k * xs1 + c0 * xs2, xs2,
                     len, isz);
        }
    }
    return EMBER_OK;
}

int ember_cpu_put(const ember_tensor *dst, const ember_tensor *idx, const ember_tensor *values,
                  int accumulate) {
    int st = check_gather(values, dst, idx);
    if (st != EMBER_OK) return st;
    int64_t outer = dst->shape[0], n = dst->shape[1], inner = dst->shape[2], m = idx->shape[0];
    if (outer == 0 || m == 0 || inner == 0) return EMBER_OK;
    int64_t isz = ember_itemsize[dst->dtype];
    int64_t ds0 = dst->strides[0] * isz, ds1 = dst->strides[1] * isz, ds2 = dst->strides[2] * isz;
    int64_t vs0 = values->strides[0] * isz, vs1 = values->strides[1] * isz, vs2 = values->strides[2] * isz;
    const char *vb = ember_base(values), *ib = ember_base(idx);
    char *db = ember_base(dst);
    int64_t ibs = idx->strides[0] * 8;
    add_fn add = add_kernels[dst->dtype];

    if (inner == 1) {   /* single elements: a task owns an outer index, indices in order */
#pragma omp parallel for if (outer * m >= EMBER_PARALLEL_GRAIN && outer > 1) schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            if (accumulate)
                add_scatter_kernels[dst->dtype](db + o * ds0, ds1, vb + o * vs0, vs1, ib, ibs, n, m);
            else
                scatter_elems(db + o * ds0, ds1, vb + o * vs0, vs1, ib, ibs, n, m, isz);
        }
        return EMBER_OK;
    }
    /* a task owns (outer index, inner chunk) and runs through all indices in order */
    int64_t nic = outer >= 64 ? 1 : (inner + INNER_CHUNK - 1) / INNER_CHUNK;
    int64_t ic = (inner + nic - 1) / nic;
    int64_t tasks = outer * nic;
#pragma omp parallel for if (outer * m * inner >= EMBER_PARALLEL_GRAIN && tasks > 1) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / nic, c0 = (t % nic) * ic, len = min64(ic, inner - c0);
        for (int64_t j = 0; j < m; j++) {
            int64_t k = index_at(ib, ibs, j, n);
            char *d = db + o * ds0 + k * ds1 + c0 * ds2;
            const char *v = vb + o * vs0 + j * vs1 + c0 * vs2;
            if (accumulate)
                add(d, ds2, v, vs2, len);
            else
                copy_run(d, ds2, v, vs2, len, isz);
        }
    }
    return EMBER_OK;
}

/* ---- count_nonzero / nonzero ------------------------------------------------------------- */

/* The elements of x split into `nparts` C-order ranges of about equal size. */
typedef struct {
    ember_iter it;
    int64_t total;
    int nparts;
} split;

static int split_init(split *s, const ember_tensor *x) {
    const ember_tensor *ops[1] = {x};
    /* ember_iter_init divides by every dim (in its seek): never hand it an empty shape */
    s->total = ember_numel(x) > 0 && ember_iter_init(&s->it, x->ndim, x->shape, 1, ops)
                   ? s->it.rows * s->it.inner_n : 0;
    s->nparts = 1;
    if (s->total >= EMBER_PARALLEL_GRAIN) {
        s->nparts = omp_get_max_threads();
        if (s->nparts > MAX_PARTS) s->nparts = MAX_PARTS;
    }
    return s->total > 0;
}

/* Positions the iterator `my` at the start of part p; returns the part's element count and the
 * column of its first element in *col. */
static int64_t split_seek(const split *s, int p, ember_iter *my, int64_t *col) {
    int64_t a = s->total * p / s->nparts, b = s->total * (p + 1) / s->nparts;
    *my = s->it;
    if (a < b) ember_iter_seek(my, a / s->it.inner_n);
    *col = a % s->it.inner_n;
    return b - a;
}

static int64_t count_part(const split *s, int p, count_fn f) {
    ember_iter my;
    int64_t col, left = split_seek(s, p, &my, &col), c = 0;
    while (left > 0) {
        int64_t len = min64(my.inner_n - col, left);
        c += f(my.ptr[0] + col * my.inner_stride[0], len, my.inner_stride[0]);
        left -= len;
        col = 0;
        if (left > 0) ember_iter_next(&my);
    }
    return c;
}

int ember_cpu_count_nonzero(const ember_tensor *x, int64_t *count) {
    if (!desc_ok(x) || count == NULL) return EMBER_ERR_INVALID_ARGUMENT;
    split s;
    int64_t c = 0;
    if (split_init(&s, x)) {
#pragma omp parallel for if (s.nparts > 1) num_threads(s.nparts) reduction(+ : c) schedule(static)
        for (int p = 0; p < s.nparts; p++) c += count_part(&s, p, count_kernels[x->dtype]);
    }
    *count = c;
    return EMBER_OK;
}

/* Writes the coordinates of part p's non-zeros into out rows first, first + 1, ... */
static void nonzero_part(const split *s, int p, find_fn f, int ndim, char *ob, int64_t os0,
                         int64_t os1, int64_t first) {
    ember_iter my;
    int64_t col, left = split_seek(s, p, &my, &col), row = first;
    int64_t pos[POS_BUF];
    while (left > 0) {
        int64_t end = min64(my.inner_n, col + left);
        left -= end - col;
        for (int64_t lo = col; lo < end; lo += POS_BUF) {
            int64_t found = f(my.ptr[0], lo, min64(end, lo + POS_BUF), my.inner_stride[0], pos);
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
    if (!desc_ok(out) || !desc_ok(x) || out->dtype != EMBER_INT64 || out->ndim != 2 ||
        out->shape[1] != x->ndim)
        return EMBER_ERR_INVALID_ARGUMENT;
    split s;
    int64_t counts[MAX_PARTS + 1] = {0};
    int any = split_init(&s, x);
    if (any) {
#pragma omp parallel for if (s.nparts > 1) num_threads(s.nparts) schedule(static)
        for (int p = 0; p < s.nparts; p++) counts[p + 1] = count_part(&s, p, count_kernels[x->dtype]);
        for (int p = 0; p < s.nparts; p++) counts[p + 1] += counts[p];   /* -> first rows */
    }
    if (counts[any ? s.nparts : 0] != out->shape[0]) return EMBER_ERR_INVALID_ARGUMENT;
    if (!any || x->ndim == 0 || out->shape[0] == 0) return EMBER_OK;   /* 0-d: no columns */
    char *ob = ember_base(out);
    int64_t os0 = out->strides[0] * 8, os1 = out->strides[1] * 8;
#pragma omp parallel for if (s.nparts > 1) num_threads(s.nparts) schedule(static)
    for (int p = 0; p < s.nparts; p++)
        nonzero_part(&s, p, find_kernels[x->dtype], x->ndim, ob, os0, os1, counts[p]);
    return EMBER_OK;
}

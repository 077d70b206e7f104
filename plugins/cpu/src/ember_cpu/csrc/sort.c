/*
 * sort.c -- stable sort and argsort along the last dim, and searchsorted.
 *
 * Every sortable dtype (bool, integers, float16, bfloat16, float32, float64) maps to an unsigned
 * key of its own width whose unsigned order is numpy's order of the values:
 *   - signed integers: flip the sign bit;
 *   - floats: flip all bits of negatives and the sign bit of positives; -0.0 becomes +0.0 (they
 *     compare equal, so the stable sort keeps them in input order) and every NaN becomes the
 *     largest key (NaNs sort last, in input order, as numpy does).
 * Sorting is then a radix sort of (key, payload) pairs -- stable by construction; see
 * DEFINE_RADIX -- with insertion sort for short rows.  The payload is the element's index (argsort) or its raw bits (sort, so NaN payloads
 * and the sign of zero come through untouched).
 *
 * Descending order sorts the complemented key: NaNs first, then the largest values, and equal
 * elements KEEP THEIR INPUT ORDER (a stable descending sort).  So sort(x, descending) equals
 * x[argsort(x, descending)] exactly, and its values equal numpy's np.flip(np.sort(x)) (elements
 * that compare equal -- such as -0.0 and 0.0 -- may differ in order but not in value).
 *
 * searchsorted compares keys too, which gives numpy's NaN-last order for free.
 */
#include <stdlib.h>

#include "common.h"
#include "ember_cpu.h"

#define INSERTION_MAX 48   /* rows this short are insertion-sorted: radix passes cost more */

/* ---- keys ------------------------------------------------------------------------------- */

#define KEY_SINT(K, v, bits) ((K)((K)(v) ^ ((K)1 << ((bits) - 1))))

static inline uint8_t key_b(uint8_t v) { return v; }
static inline uint8_t key_u8(uint8_t v) { return v; }
static inline uint8_t key_i8(int8_t v) { return KEY_SINT(uint8_t, v, 8); }
static inline uint16_t key_i16(int16_t v) { return KEY_SINT(uint16_t, v, 16); }
static inline uint32_t key_i32(int32_t v) { return KEY_SINT(uint32_t, v, 32); }
static inline uint64_t key_i64(int64_t v) { return KEY_SINT(uint64_t, v, 64); }

/* IEEE bits u of a float with `bits` bits whose exponent field is all ones at `inf` */
#define KEY_FLOAT(K, u, bits, inf)                                               \
    do {                                                                         \
        const K sign = (K)1 << ((bits) - 1);                                     \
        K mag = (K)((u) & (K)~sign);                                             \
        if (mag > (inf)) return (K)~(K)0;        /* NaN: after everything */     \
        if (mag == 0) return sign;               /* -0.0 == +0.0           */    \
        return ((u) & sign) ? (K)~(u) : (K)((u) | sign);                         \
    } while (0)

static inline uint16_t key_f16(uint16_t u) { KEY_FLOAT(uint16_t, u, 16, 0x7c00u); }
static inline uint16_t key_bf16(uint16_t u) { KEY_FLOAT(uint16_t, u, 16, 0x7f80u); }
static inline uint32_t key_f32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    KEY_FLOAT(uint32_t, u, 32, 0x7f800000u);
}
static inline uint64_t key_f64(double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    KEY_FLOAT(uint64_t, u, 64, 0x7ff0000000000000ull);
}

/* X(name, code, storage, key type) */
#define SORT_TYPES(X)                          \
    X(b, EMBER_BOOL, uint8_t, uint8_t)         \
    X(i8, EMBER_INT8, int8_t, uint8_t)         \
    X(i16, EMBER_INT16, int16_t, uint16_t)     \
    X(i32, EMBER_INT32, int32_t, uint32_t)     \
    X(i64, EMBER_INT64, int64_t, uint64_t)     \
    X(u8, EMBER_UINT8, uint8_t, uint8_t)       \
    X(f16, EMBER_FLOAT16, uint16_t, uint16_t)  \
    X(bf16, EMBER_BFLOAT16, uint16_t, uint16_t) \
    X(f32, EMBER_FLOAT32, float, uint32_t)     \
    X(f64, EMBER_FLOAT64, double, uint64_t)

/* Keys of n elements at x (byte stride bs) into key[], XOR `flip` (all ones: descending). */
typedef void (*keys_fn)(const char *x, int64_t n, int64_t bs, void *key, uint64_t flip);
/* First i in [0, n) of the run x1 whose key is >= (right: >) the key of *v; n if none. */
typedef int64_t (*search_fn)(const char *x1, int64_t n, int64_t bs, const char *v, int right);

#define DEFINE_KEYS(name, code, T, K)                                                          \
    static void keys_##name(const char *x, int64_t n, int64_t bs, void *key, uint64_t flip) {   \
        K *k = key;                                                                           \
        for (int64_t i = 0; i < n; i++) k[i] = (K)(key_##name(*(const T *)(x + i * bs)) ^ (K)flip); \
    }                                                                                         \
    static int64_t search_##name(const char *x1, int64_t n, int64_t bs, const char *v, int right) { \
        K kv = key_##name(*(const T *)v);                                                     \
        int64_t lo = 0, hi = n;                                                               \
        while (lo < hi) {                                                                     \
            int64_t mid = lo + (hi - lo) / 2;                                                 \
            K km = key_##name(*(const T *)(x1 + mid * bs));                                   \
            if (right ? km <= kv : km < kv)                                                   \
                lo = mid + 1;                                                                 \
            else                                                                              \
                hi = mid;                                                                     \
        }                                                                                     \
        return lo;                                                                            \
    }
SORT_TYPES(DEFINE_KEYS)

#define ENTRY_KEYS(name, code, ...) [code] = keys_##name,
#define ENTRY_SEARCH(name, code, ...) [code] = search_##name,
static const keys_fn keys_kernels[EMBER_NUM_DTYPES] = {SORT_TYPES(ENTRY_KEYS)};
static const search_fn search_kernels[EMBER_NUM_DTYPES] = {SORT_TYPES(ENTRY_SEARCH)};

/* ---- radix sort ------------------------------------------------------------------------- */

/*
 * Stable radix sort of (key, payload) pairs, result always back in (k, p); (k2, p2) is scratch of
 * the same size.  Small inputs: insertion sort.  Inputs that fit in L2: LSD, one counting pass per
 * key byte, bytes on which all keys agree skipped.  Larger inputs: one MSD pass on the most
 * significant byte that varies, then each bucket recursively.  Why not LSD throughout: a pass
 * scatters into 256 buckets x 2 arrays far apart in memory, and once those span more pages than
 * the TLB holds, each write costs a page walk (measured 4-10x slower on this VM); after one MSD
 * pass the buckets are small and their LSD passes stay in cache.
 */
#define LSD_MAX 32768   /* elements an LSD sort handles in cache */

#define DEFINE_RADIX(NAME, K, P)                                                        \
    static void NAME##_insertion(K *k, P *p, int64_t n) {                               \
        for (int64_t i = 1; i < n; i++) {                                               \
            K kk = k[i];                                                                \
            P pp = p[i];                                                                \
            int64_t j = i;                                                              \
            for (; j > 0 && k[j - 1] > kk; j--) {                                       \
                k[j] = k[j - 1];                                                        \
                p[j] = p[j - 1];                                                        \
            }                                                                           \
            k[j] = kk;                                                                  \
            p[j] = pp;                                                                  \
        }                                                                               \
    }                                                                                   \
    /* one stable counting pass by byte b of (sk, sp) into (dk, dp); count[] = histogram */ \
    static void NAME##_pass(const K *sk, const P *sp, K *dk, P *dp, int64_t n, int b,    \
                            int64_t *count) {                                           \
        int64_t pos = 0;                                                                \
        for (int d = 0; d < 256; d++) {                                                 \
            int64_t c = count[d];                                                       \
            count[d] = pos;                                                             \
            pos += c;                                                                   \
        }                                                                               \
        for (int64_t i = 0; i < n; i++) {                                               \
            int64_t at = count[(sk[i] >> (8 * b)) & 255]++;                             \
            dk[at] = sk[i];                                                             \
            dp[at] = sp[i];                                                             \
        }                                                                               \
    }                                                                                   \
    /* sorts by key bytes [0, nbytes) (the higher bytes are equal across the input) */  \
    static void NAME(K *k, P *p, K *k2, P *p2, int64_t n, int nbytes) {                 \
        if (n <= INSERTION_MAX) {                                                       \
            NAME##_insertion(k, p, n);                                                  \
            return;                                                                     \
        }                                                                               \
        int64_t count[sizeof(K)][256];                                                  \
        memset(count, 0, sizeof count);                                                 \
        for (int64_t i = 0; i < n; i++)                                                 \
            for (int b = 0; b < nbytes; b++) count[b][(k[i] >> (8 * b)) & 255]++;       \
        int top = nbytes - 1; /* most significant byte that varies */                   \
        while (top >= 0 && count[top][(k[0] >> (8 * top)) & 255] == n) top--;           \
        if (top < 0) return; /* all keys equal */                                       \
        if (n <= LSD_MAX) {                                                             \
            K *sk = k, *dk = k2;                                                        \
            P *sp = p, *dp = p2;                                                        \
            for (int b = 0; b <= top; b++) {                                            \
                if (count[b][(k[0] >> (8 * b)) & 255] == n) continue;                   \
                NAME##_pass(sk, sp, dk, dp, n, b, count[b]);                            \
                K *tk = sk; sk = dk; dk = tk;                                           \
                P *tp = sp; sp = dp; dp = tp;                                           \
            }                                                                           \
            if (sk != k) {                                                              \
                memcpy(k, sk, (size_t)n * sizeof(K));                                   \
                memcpy(p, sp, (size_t)n * sizeof(P));                                   \
            }                                                                           \
            return;                                                                     \
        }                                                                               \
        int64_t start[257];                                                             \
        start[0] = 0;                                                                   \
        for (int d = 0; d < 256; d++) start[d + 1] = start[d] + count[top][d];          \
        NAME##_pass(k, p, k2, p2, n, top, count[top]);                                  \
        for (int d = 0; d < 256; d++)                                                   \
            NAME(k2 + start[d], p2 + start[d], k + start[d], p + start[d],              \
                 start[d + 1] - start[d], top);                                         \
        memcpy(k, k2, (size_t)n * sizeof(K));                                           \
        memcpy(p, p2, (size_t)n * sizeof(P));                                           \
    }

DEFINE_RADIX(radix_u8_idx, uint8_t, int64_t)
DEFINE_RADIX(radix_u16_idx, uint16_t, int64_t)
DEFINE_RADIX(radix_u32_idx, uint32_t, int64_t)
DEFINE_RADIX(radix_u64_idx, uint64_t, int64_t)
DEFINE_RADIX(radix_u8_bits, uint8_t, uint8_t)
DEFINE_RADIX(radix_u16_bits, uint16_t, uint16_t)
DEFINE_RADIX(radix_u32_bits, uint32_t, uint32_t)
DEFINE_RADIX(radix_u64_bits, uint64_t, uint64_t)

/* Dispatches on the key width w (bytes); the payload is int64 indices or w-byte raw bits. */
static void radix_sort(int w, int bits, void *k, void *p, void *k2, void *p2, int64_t n) {
    switch (w * 2 + bits) {
    case 2: radix_u8_idx(k, p, k2, p2, n, 1); break;
    case 4: radix_u16_idx(k, p, k2, p2, n, 2); break;
    case 8: radix_u32_idx(k, p, k2, p2, n, 4); break;
    case 16: radix_u64_idx(k, p, k2, p2, n, 8); break;
    case 3: radix_u8_bits(k, p, k2, p2, n, 1); break;
    case 5: radix_u16_bits(k, p, k2, p2, n, 2); break;
    case 9: radix_u32_bits(k, p, k2, p2, n, 4); break;
    default: radix_u64_bits(k, p, k2, p2, n, 8); break;
    }
}

/* Copies n elements of w bytes between byte-strided runs. */
static void copy_elems(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, int w) {
#define COPY_AS(U) \
    for (int64_t i = 0; i < n; i++) *(U *)(dst + i * ds) = *(const U *)(src + i * ss)
    switch (w) {
    case 1: COPY_AS(uint8_t); break;
    case 2: COPY_AS(uint16_t); break;
    case 4: COPY_AS(uint32_t); break;
    default: COPY_AS(uint64_t); break;
    }
#undef COPY_AS
}

/* ---- sort / argsort drivers --------------------------------------------------------------- */

/* One row: keys, payloads, radix sort, write out.  `scratch` holds 2 * n payloads of 8 bytes
 * (first, so that they are aligned) and 2 * n keys. */
static void sort_row(const ember_rows *sp, int dtype, int want_index, uint64_t flip, const char *x,
                     char *o, char *scratch) {
    int w = (int)ember_itemsize[dtype];
    int64_t n = sp->n;
    char *p = scratch, *p2 = p + n * 8, *k = p2 + n * 8, *k2 = k + n * w;
    keys_kernels[dtype](x, n, sp->xinner, k, flip);
    if (want_index)
        for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = i;
    else
        copy_elems(p, w, x, sp->xinner, n, w);
    radix_sort(w, !want_index, k, p, k2, p2, n);
    if (want_index)
        copy_elems(o, sp->oinner, p, 8, n, 8);
    else
        copy_elems(o, sp->oinner, p, w, n, w);
}

static int sort_common(const ember_tensor *out, const ember_tensor *x, int descending, int want_index) {
    if (ember_check_desc(out) || ember_check_desc(x) || !ember_same_shape(out, x) ||
        out->dtype != (want_index ? EMBER_INT64 : x->dtype))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (keys_kernels[x->dtype] == NULL) return EMBER_ERR_UNSUPPORTED;
    ember_rows sp;
    ember_rows_init(&sp, out, x);
    if (sp.rows == 0 || sp.n == 0) return EMBER_OK;
    uint64_t flip = descending ? ~(uint64_t)0 : 0;
    size_t scratch_bytes = (size_t)sp.n * (2 * ember_itemsize[x->dtype] + 16);
    const char *xb = ember_base(x);
    char *ob = ember_base(out);
    int failed = 0;

#pragma omp parallel num_threads(ember_threads_for(sp.rows * sp.n, sp.rows))
    {
        char *scratch = malloc(scratch_bytes);
        if (!scratch) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < sp.rows; r++) {
            if (!scratch) continue;
            sort_row(&sp, x->dtype, want_index, flip, xb + ember_flat_offset(sp.nlead, sp.shape, sp.xs, r),
                     ob + ember_flat_offset(sp.nlead, sp.shape, sp.os, r), scratch);
        }
        free(scratch);
    }
    return failed ? EMBER_ERR_OUT_OF_MEMORY : EMBER_OK;
}

int ember_cpu_sort(const ember_tensor *out, const ember_tensor *x, int descending) {
    return sort_common(out, x, descending, 0);
}

int ember_cpu_argsort(const ember_tensor *out, const ember_tensor *x, int descending) {
    return sort_common(out, x, descending, 1);
}

/* ---- searchsorted ------------------------------------------------------------------------ */

int ember_cpu_searchsorted(const ember_tensor *out, const ember_tensor *x1, const ember_tensor *values,
                           int right) {
    if (ember_check_desc(out) || ember_check_desc(x1) || ember_check_desc(values) || x1->ndim != 1 ||
        x1->dtype != values->dtype || out->dtype != EMBER_INT64 || !ember_same_shape(out, values))
        return EMBER_ERR_INVALID_ARGUMENT;
    search_fn f = search_kernels[values->dtype];
    if (f == NULL) return EMBER_ERR_UNSUPPORTED;
    const ember_tensor *ops[2] = {values, out};
    ember_split s;
    if (!ember_split_init(&s, values->ndim, values->shape, 2, ops, INT64_MAX)) return EMBER_OK;
    const char *xb = ember_base(x1);
    int64_t n = x1->shape[0], bs = x1->strides[0] * ember_itemsize[x1->dtype];

    /* each thread walks its own contiguous range of the values in C order */
#pragma omp parallel for num_threads(s.nparts) schedule(static)
    for (int part = 0; part < s.nparts; part++) {
        ember_iter my;
        int64_t col, left = ember_split_seek(&s, part, &my, &col);
        while (left > 0) {
            int64_t end = ember_min64(my.inner_n, col + left);
            for (int64_t i = col; i < end; i++)
                *(int64_t *)(my.ptr[1] + i * my.inner_stride[1]) =
                    f(xb, n, bs, my.ptr[0] + i * my.inner_stride[0], right);
            left -= end - col;
            col = 0;
            if (left > 0) ember_iter_next(&my);
        }
    }
    return EMBER_OK;
}

/*
 * Elementwise entry points of ember-cpu: copy (astype), fill, unary, binary, where.
 *
 * The typed inner loops and their dispatch tables are generated from kernels.toml by codegen.py
 * (gen_unary.c, gen_binary.c, gen_copy.c); this file validates descriptors, picks the loop and
 * drives it over the operands:
 *   - every operand contiguous: one flat run of numel elements (the loops' vectorised branch);
 *   - otherwise ember_iter walks the rows; a loop call covers one row (its branches specialise
 *     unit strides and stride-0 broadcast operands).
 * Above ember_parallel_grain() elements the flat index range is split evenly across the threads
 * (one per started grain, see ew_pieces; a split may fall inside a row); below it no parallel
 * region is entered.
 * An output of EW_STREAM_BYTES or more (not also an input) whose rows are contiguous is computed
 * in blocks into an L1-resident buffer and copied out with non-temporal stores: it would not
 * stay cached anyway, and skipping the read-for-ownership of its lines saves a quarter of the
 * memory traffic of a binary op.
 * Operands may alias exactly (out == x for in-place ops) but must not partially overlap.
 */
#include <stddef.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include "common.h"
#include "ember_cpu.h"

/* ---- validation --------------------------------------------------------------------------- */

/* All operands valid and shaped like ops[0]. */
static int ew_valid_all(int nops, const ember_tensor *const *ops)
{
    for (int k = 0; k < nops; k++)
        if (ember_check_desc(ops[k]) || !ember_same_shape(ops[k], ops[0])) return 0;
    return 1;
}

static int ew_dtype_ok(int dtype) { return dtype >= 0 && dtype < EMBER_NUM_DTYPES; }

/* ---- drivers ------------------------------------------------------------------------------ */

/* The inner loop a driver runs: a generated loop of one or two inputs, or where's select.  ew_call
 * runs it over n elements; p / s are per-operand byte pointers and strides, operand 0 the output. */
typedef struct {
    int kind; /* 1: ember_ew_loop1, 2: ember_ew_loop2, 3: where */
    union {
        ember_ew_loop1 f1;
        ember_ew_loop2 f2;
        int itemsize;
    } u;
} ew_kernel;

static void ew_where_row(int itemsize, int64_t n, char *const *p, const int64_t *s);

static inline void ew_call(const ew_kernel *k, int64_t n, char *const *p, const int64_t *s)
{
    switch (k->kind) {
    case 1: k->u.f1(n, p[0], s[0], p[1], s[1]); break;
    case 2: k->u.f2(n, p[0], s[0], p[1], s[1], p[2], s[2]); break;
    default: ew_where_row(k->u.itemsize, n, p, s); break;
    }
}

/* How many pieces n elements make for ember_threads_for: one per started grain, so that no
 * thread's share of a memory-bound loop is too short to repay its wake-up. */
static int64_t ew_pieces(int64_t n) {
    int64_t grain = ember_parallel_grain();
    return (n + grain - 1) / grain;
}

/* ---- streaming stores -------------------------------------------------------------------- */

#ifndef EW_STREAM_BYTES
#define EW_STREAM_BYTES ((int64_t)8 << 20) /* outputs from this size on bypass the caches */
#endif
#define EW_BLOCK_BYTES 8192                 /* the L1 staging buffer of one thread          */

#if defined(__AVX512F__)
#define EW_HAVE_STREAM 1
static inline void ew_stream64(char *dst, const char *src)
{
    _mm512_stream_si512((__m512i *)dst, _mm512_load_si512((const void *)src));
}
#elif defined(__AVX__)
#define EW_HAVE_STREAM 1
static inline void ew_stream64(char *dst, const char *src)
{
    _mm256_stream_si256((__m256i *)dst, _mm256_load_si256((const __m256i *)src));
    _mm256_stream_si256((__m256i *)(dst + 32), _mm256_load_si256((const __m256i *)(src + 32)));
}
#elif defined(__SSE2__)
#define EW_HAVE_STREAM 1
static inline void ew_stream64(char *dst, const char *src)
{
    for (int j = 0; j < 64; j += 16)
        _mm_stream_si128((__m128i *)(dst + j), _mm_load_si128((const __m128i *)(src + j)));
}
#else
#define EW_HAVE_STREAM 0
#endif

/* n elements as ew_call would (s: byte strides, s[0] the output's itemsize: a contiguous output
 * run), with the output written by streaming stores.  The head up to the first 64-byte boundary
 * of the output and the tail go through plain stores. */
static void ew_call_streaming(const ew_kernel *k, int nops, int64_t n, char *const *p, const int64_t *s)
{
#if EW_HAVE_STREAM
    _Alignas(64) char buf[EW_BLOCK_BYTES];
    const int64_t osz = s[0];
    char *q[EMBER_ITER_MAX] = {0}, *tmp[EMBER_ITER_MAX] = {0};
    for (int j = 0; j < nops; j++) q[j] = p[j];
    int64_t mis = (int64_t)((uintptr_t)q[0] & 63);
    int64_t head = mis ? (64 - mis) / osz : 0;
    if (head > n) head = n;
    if (head) {
        ew_call(k, head, q, s);
        for (int j = 0; j < nops; j++) q[j] += head * s[j];
        n -= head;
    }
    const int64_t block = EW_BLOCK_BYTES / osz;
    while (n >= 64) {
        int64_t len = n < block ? n & ~(int64_t)63 : block; /* whole cache lines for every osz */
        tmp[0] = buf;
        for (int j = 1; j < nops; j++) tmp[j] = q[j];
        ew_call(k, len, tmp, s);
        for (int64_t off = 0; off < len * osz; off += 64) ew_stream64(q[0] + off, buf + off);
        for (int j = 0; j < nops; j++) q[j] += len * s[j];
        n -= len;
    }
    if (n) ew_call(k, n, q, s);
    _mm_sfence();
#else
    (void)nops;
    ew_call(k, n, p, s);
#endif
}

/* Streaming stores pay off for outputs of EW_STREAM_BYTES and more that no input shares (an
 * in-place op already has the output's lines in cache); `osz` is the output's itemsize. */
static int ew_want_stream(int nops, char *const *p, int64_t nbytes, int64_t osz)
{
    if (!EW_HAVE_STREAM || nbytes < EW_STREAM_BYTES || (uintptr_t)p[0] % (uintptr_t)osz != 0) return 0;
    for (int j = 1; j < nops; j++)
        if (p[j] == p[0]) return 0;
    return 1;
}

static inline void ew_call_maybe_streaming(const ew_kernel *k, int nops, int stream, int64_t n, char *const *p,
                                           const int64_t *s)
{
    if (stream && n >= 64) ew_call_streaming(k, nops, n, p, s);
    else if (n > 0) ew_call(k, n, p, s);
}

/* Flat run over contiguous operands: p[k] are element-0 byte pointers, isz[k] itemsizes (0 for an
 * input that repeats one element). */
static void ew_run_flat(const ew_kernel *k, int nops, int64_t n, char *const *p, const int64_t *isz)
{
    int stream = ew_want_stream(nops, p, n * isz[0], isz[0]);
    int nt = ember_threads_for(n, ew_pieces(n));
    if (nt <= 1) {
        ew_call_maybe_streaming(k, nops, stream, n, p, isz);
        return;
    }
    /* chunks of a multiple of 64 elements keep chunk edges on cache lines for every dtype */
    int64_t chunk = ((n + nt - 1) / nt + 63) & ~(int64_t)63;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
        int64_t start = (int64_t)t * chunk;
        if (start >= n) continue;
        int64_t len = ember_min64(n - start, chunk);
        char *q[EMBER_ITER_MAX] = {0};
        for (int j = 0; j < nops; j++) q[j] = p[j] + start * isz[j];
        ew_call_maybe_streaming(k, nops, stream, len, q, isz);
    }
}

/* Range `part` of the split, one loop call per (part of a) row. */
static void ew_run_part(const ew_kernel *k, const ember_split *s, int stream, int part)
{
    ember_iter my;
    int64_t col, left = ember_split_seek(s, part, &my, &col);
    while (left > 0) {
        int64_t len = ember_min64(my.inner_n - col, left);
        char *q[EMBER_ITER_MAX] = {0};
        for (int j = 0; j < my.nops; j++) q[j] = my.ptr[j] + col * my.inner_stride[j];
        ew_call_maybe_streaming(k, my.nops, stream, len, q, my.inner_stride);
        left -= len;
        col = 0;
        if (left > 0) ember_iter_next(&my);
    }
}

static int ew_run(const ew_kernel *k, int nops, const ember_tensor *const *ops)
{
    const ember_tensor *out = ops[0];
    const int64_t osz = ember_itemsize[out->dtype];
    int contiguous = 1;
    for (int j = 0; j < nops; j++) contiguous &= ember_is_contiguous(ops[j]);
    if (contiguous) {
        char *p[EMBER_ITER_MAX] = {0};
        int64_t isz[EMBER_ITER_MAX] = {0};
        for (int j = 0; j < nops; j++) {
            p[j] = ember_base(ops[j]);
            isz[j] = ember_itemsize[ops[j]->dtype];
        }
        ew_run_flat(k, nops, ember_numel(out), p, isz);
        return EMBER_OK;
    }
    ember_split s;
    int64_t total = ember_numel(out);
    if (!ember_split_init(&s, out->ndim, out->shape, nops, ops, ew_pieces(total))) return EMBER_OK;
    /* rows of a contiguous output (broadcast inputs: x * scalar, x + row) may stream too */
    int stream = s.it.inner_stride[0] == osz && ew_want_stream(nops, s.it.base, total * osz, osz);
    if (s.nparts <= 1) {
        ew_run_part(k, &s, stream, 0);
        return EMBER_OK;
    }
#pragma omp parallel for num_threads(s.nparts) schedule(static, 1)
    for (int t = 0; t < s.nparts; t++) ew_run_part(k, &s, stream, t);
    return EMBER_OK;
}

/* ---- entry points ------------------------------------------------------------------------- */

int ember_cpu_copy(const ember_tensor *dst, const ember_tensor *src)
{
    const ember_tensor *ops[2] = {dst, src};
    if (!ew_valid_all(2, ops)) return EMBER_ERR_INVALID_ARGUMENT;
    ember_ew_loop1 f = ember_ew_copy_loops[dst->dtype][src->dtype];
    if (!f) return EMBER_ERR_UNSUPPORTED;
    ew_kernel k = {.kind = 1, .u.f1 = f};
    return ew_run(&k, 2, ops);
}

int ember_cpu_fill(const ember_tensor *dst, double re, double im, int64_t ival)
{
    if (ember_check_desc(dst)) return EMBER_ERR_INVALID_ARGUMENT;
    /* A stride-0 source of the widest type of dst's kind, converted by the astype loops (their
     * stride-0 branch converts once and stores the value n times). */
    int64_t ivalue = ival;
    double dvalue = re;
    double _Complex cvalue = CMPLX(re, im);
    ember_tensor src = *dst;
    switch (dst->dtype) {
    case EMBER_BOOL: case EMBER_INT8: case EMBER_INT16: case EMBER_INT32: case EMBER_INT64:
    case EMBER_UINT8:
        src.dtype = EMBER_INT64;
        src.data = &ivalue;
        break;
    case EMBER_COMPLEX64: case EMBER_COMPLEX128:
        src.dtype = EMBER_COMPLEX128;
        src.data = &cvalue;
        break;
    default:
        src.dtype = EMBER_FLOAT64;
        src.data = &dvalue;
        break;
    }
    src.offset = 0;
    for (int d = 0; d < src.ndim; d++) src.strides[d] = 0;
    const ember_tensor *ops[2] = {dst, &src};
    ew_kernel k = {.kind = 1, .u.f1 = ember_ew_copy_loops[dst->dtype][src.dtype]};
    if (ember_is_contiguous(dst)) {
        char *p[EMBER_ITER_MAX] = {ember_base(dst), (char *)src.data};
        int64_t s[EMBER_ITER_MAX] = {ember_itemsize[dst->dtype], 0};
        ew_run_flat(&k, 2, ember_numel(dst), p, s);
        return EMBER_OK;
    }
    return ew_run(&k, 2, ops);
}

static int ew_unary(int op, const ember_tensor *out, const ember_tensor *x)
{
    const ember_tensor *ops[2] = {out, x};
    if (op < 0 || op >= EMBER_CPU_UNARY_COUNT || !ew_valid_all(2, ops)) return EMBER_ERR_INVALID_ARGUMENT;
    ember_ew_loop1 f = ember_ew_unary_loops[op][x->dtype];
    if (!f) return EMBER_ERR_UNSUPPORTED;
    if (out->dtype != ember_ew_unary_result[op][x->dtype]) return EMBER_ERR_INVALID_ARGUMENT;
    ew_kernel k = {.kind = 1, .u.f1 = f};
    return ew_run(&k, 2, ops);
}

int ember_cpu_unary(int op, const ember_tensor *out, const ember_tensor *x) { return ew_unary(op, out, x); }

int ember_cpu_binary(int op, const ember_tensor *out, const ember_tensor *a, const ember_tensor *b)
{
    const ember_tensor *ops[3] = {out, a, b};
    if (op < 0 || op >= EMBER_CPU_BINARY_COUNT || !ew_valid_all(3, ops) || a->dtype != b->dtype)
        return EMBER_ERR_INVALID_ARGUMENT;
    ember_ew_loop2 f = ember_ew_binary_loops[op][a->dtype];
    if (!f) return EMBER_ERR_UNSUPPORTED;
    if (out->dtype != ember_ew_binary_result[op][a->dtype]) return EMBER_ERR_INVALID_ARGUMENT;
    ew_kernel k = {.kind = 2, .u.f2 = f};
    return ew_run(&k, 3, ops);
}

int ember_cpu_unary_contig(int op, int dtype, int64_t n, void *out, int64_t out_off, const void *x,
                           int64_t x_off)
{
    if (op < 0 || op >= EMBER_CPU_UNARY_COUNT || !ew_dtype_ok(dtype) || n < 0)
        return EMBER_ERR_INVALID_ARGUMENT;
    ember_ew_loop1 f = ember_ew_unary_loops[op][dtype];
    if (!f) return EMBER_ERR_UNSUPPORTED;
    if (n == 0) return EMBER_OK;
    int64_t isz[EMBER_ITER_MAX] = {ember_itemsize[ember_ew_unary_result[op][dtype]], ember_itemsize[dtype]};
    char *p[EMBER_ITER_MAX] = {(char *)out + out_off * isz[0], (char *)x + x_off * isz[1]};
    ew_kernel k = {.kind = 1, .u.f1 = f};
    ew_run_flat(&k, 2, n, p, isz);
    return EMBER_OK;
}

int ember_cpu_binary_flat(int op, int dtype, int64_t n, void *out, int64_t out_off, const void *a,
                          int64_t a_off, int a_step, const void *b, int64_t b_off, int b_step)
{
    if (op < 0 || op >= EMBER_CPU_BINARY_COUNT || !ew_dtype_ok(dtype) || n < 0 || (a_step != 0 && a_step != 1) ||
        (b_step != 0 && b_step != 1))
        return EMBER_ERR_INVALID_ARGUMENT;
    ember_ew_loop2 f = ember_ew_binary_loops[op][dtype];
    if (!f) return EMBER_ERR_UNSUPPORTED;
    if (n == 0) return EMBER_OK;
    const int64_t isz = ember_itemsize[dtype];
    int64_t s[EMBER_ITER_MAX] = {ember_itemsize[ember_ew_binary_result[op][dtype]], isz * a_step, isz * b_step};
    char *p[EMBER_ITER_MAX] = {(char *)out + out_off * s[0], (char *)a + a_off * isz, (char *)b + b_off * isz};
    ew_kernel k = {.kind = 2, .u.f2 = f};
    ew_run_flat(&k, 3, n, p, s);
    return EMBER_OK;
}

/* ---- where: a select of stored bits, so one loop per itemsize serves every dtype ----------- */

typedef struct {
    uint64_t lo, hi;
} ew_u128;

#define EW_WHERE_ROW(T)                                                                          \
    do {                                                                                         \
        if (s[0] == (int64_t)sizeof(T) && s[1] == 1 && s[2] == (int64_t)sizeof(T) &&             \
            s[3] == (int64_t)sizeof(T)) {                                                        \
            T *o = (T *)p[0];                                                                    \
            const uint8_t *c = (const uint8_t *)p[1];                                            \
            const T *a = (const T *)p[2], *b = (const T *)p[3];                                  \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : b[i];                           \
        } else if (s[0] == (int64_t)sizeof(T) && s[1] == 1 && s[2] == (int64_t)sizeof(T) &&      \
                   s[3] == 0) { /* relu's backward: where(x > 0, grad, 0), a branch-free blend */ \
            T *o = (T *)p[0];                                                                    \
            const uint8_t *c = (const uint8_t *)p[1];                                            \
            const T *a = (const T *)p[2], bv = *(const T *)p[3];                                 \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : bv;                             \
        } else if (s[0] == (int64_t)sizeof(T) && s[1] == 1 && s[2] == 0 &&                       \
                   s[3] == (int64_t)sizeof(T)) {                                                 \
            T *o = (T *)p[0];                                                                    \
            const uint8_t *c = (const uint8_t *)p[1];                                            \
            const T av = *(const T *)p[2], *b = (const T *)p[3];                                 \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? av : b[i];                             \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                      \
                *(T *)(p[0] + i * s[0]) = p[1][i * s[1]] ? *(const T *)(p[2] + i * s[2])         \
                                                         : *(const T *)(p[3] + i * s[3]);        \
        }                                                                                        \
    } while (0)

static void ew_where_row(int itemsize, int64_t n, char *const *p, const int64_t *s)
{
    switch (itemsize) {
    case 1: EW_WHERE_ROW(uint8_t); break;
    case 2: EW_WHERE_ROW(uint16_t); break;
    case 4: EW_WHERE_ROW(uint32_t); break;
    case 8: EW_WHERE_ROW(uint64_t); break;
    default: EW_WHERE_ROW(ew_u128); break;
    }
}

int ember_cpu_where(const ember_tensor *out, const ember_tensor *cond, const ember_tensor *a,
                    const ember_tensor *b)
{
    const ember_tensor *ops[4] = {out, cond, a, b};
    if (!ew_valid_all(4, ops) || cond->dtype != EMBER_BOOL || a->dtype != out->dtype ||
        b->dtype != out->dtype)
        return EMBER_ERR_INVALID_ARGUMENT;
    ew_kernel k = {.kind = 3, .u.itemsize = (int)ember_itemsize[out->dtype]};
    return ew_run(&k, 4, ops);
}

int ember_cpu_where_flat(int dtype, int64_t n, void *out, int64_t out_off, const void *cond, int64_t cond_off,
                         int cond_step, const void *a, int64_t a_off, int a_step, const void *b, int64_t b_off,
                         int b_step)
{
    if (!ew_dtype_ok(dtype) || n < 0 || (cond_step != 0 && cond_step != 1) || (a_step != 0 && a_step != 1) ||
        (b_step != 0 && b_step != 1))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (n == 0) return EMBER_OK;
    const int64_t isz = ember_itemsize[dtype];
    int64_t s[EMBER_ITER_MAX] = {isz, cond_step, isz * a_step, isz * b_step};
    char *p[EMBER_ITER_MAX] = {(char *)out + out_off * isz, (char *)cond + cond_off, (char *)a + a_off * isz,
                               (char *)b + b_off * isz};
    ew_kernel k = {.kind = 3, .u.itemsize = (int)isz};
    ew_run_flat(&k, 4, n, p, s);
    return EMBER_OK;
}

/* Helpers shared by the ember-cpu kernel files: dtype sizes, half-precision conversions and a
 * strided N-d iterator.  Internal to the plugin; not part of the ABI. */
#ifndef EMBER_CPU_COMMON_H
#define EMBER_CPU_COMMON_H

#include <complex.h>
#include <stdint.h>
#include <string.h>
#include "ember.h"

typedef uint16_t ember_f16;   /* IEEE binary16 bits */
typedef uint16_t ember_bf16;  /* bfloat16 bits      */

static const int64_t ember_itemsize[EMBER_NUM_DTYPES] = {1, 1, 2, 4, 8, 1, 2, 2, 4, 8, 8, 16};

static inline float ember_bf16_to_f32(ember_bf16 h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline ember_bf16 ember_f32_to_bf16(float f) {   /* round to nearest even, NaN kept */
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (ember_bf16)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (ember_bf16)(bits >> 16);
}

static inline float ember_f16_to_f32(ember_f16 h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

static inline ember_f16 ember_f32_to_f16(float f) {
    _Float16 v = (_Float16)f;
    ember_f16 h;
    memcpy(&h, &v, 2);
    return h;
}

static inline int ember_is_contiguous(const ember_tensor *t) {
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expected) return 0;
        expected *= t->shape[d];
    }
    return 1;
}

static inline int64_t ember_numel(const ember_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static inline char *ember_base(const ember_tensor *t) {
    return (char *)t->data + t->offset * ember_itemsize[t->dtype];
}

/*
 * Walks the outer dims (all but the last) of up to EMBER_ITER_MAX operands that share `shape`,
 * yielding byte pointers to the start of each innermost row.  Usage:
 *
 *     ember_iter it;
 *     ember_iter_init(&it, ndim, shape, nops, tensors);
 *     do { ...it.ptr[k] points at row start, it.inner_stride[k] is its byte stride,
 *          it.inner_n is the row length... } while (ember_iter_next(&it));
 *
 * Rows can be split across threads with ember_iter_seek(&it, row_index).
 */
#define EMBER_ITER_MAX 4

typedef struct {
    int ndim, nops;
    int64_t inner_n, rows;
    int64_t shape[EMBER_MAX_NDIM];
    int64_t byte_strides[EMBER_ITER_MAX][EMBER_MAX_NDIM];
    int64_t index[EMBER_MAX_NDIM];
    char *base[EMBER_ITER_MAX];
    char *ptr[EMBER_ITER_MAX];
    int64_t inner_stride[EMBER_ITER_MAX];
} ember_iter;

static inline void ember_iter_seek(ember_iter *it, int64_t row) {
    for (int k = 0; k < it->nops; k++) it->ptr[k] = it->base[k];
    for (int d = it->ndim - 2; d >= 0; d--) {
        int64_t i = row % it->shape[d];
        row /= it->shape[d];
        it->index[d] = i;
        for (int k = 0; k < it->nops; k++) it->ptr[k] += i * it->byte_strides[k][d];
    }
}

/* A 0-d operand set iterates as one row of one element.  Returns 0 when there is nothing to do
 * (some dim is 0). */
static inline int ember_iter_init(ember_iter *it, int ndim, const int64_t *shape, int nops,
                                  const ember_tensor *const *ops) {
    it->ndim = ndim > 0 ? ndim : 1;
    it->nops = nops;
    it->rows = 1;
    for (int d = 0; d < it->ndim; d++) {
        it->shape[d] = ndim > 0 ? shape[d] : 1;
        for (int k = 0; k < nops; k++)
            it->byte_strides[k][d] = ndim > 0 ? ops[k]->strides[d] * ember_itemsize[ops[k]->dtype] : 0;
    }
    for (int d = 0; d < it->ndim - 1; d++) it->rows *= it->shape[d];
    it->inner_n = it->shape[it->ndim - 1];
    for (int k = 0; k < nops; k++) {
        it->base[k] = ember_base(ops[k]);
        it->inner_stride[k] = it->byte_strides[k][it->ndim - 1];
    }
    if (it->rows == 0 || it->inner_n == 0) return 0;  /* seeking would divide by a zero extent */
    ember_iter_seek(it, 0);
    return 1;
}

static inline int ember_iter_next(ember_iter *it) {
    for (int d = it->ndim - 2; d >= 0; d--) {
        for (int k = 0; k < it->nops; k++) it->ptr[k] += it->byte_strides[k][d];
        if (++it->index[d] < it->shape[d]) return 1;
        for (int k = 0; k < it->nops; k++) it->ptr[k] -= it->shape[d] * it->byte_strides[k][d];
        it->index[d] = 0;
    }
    return 0;
}

/* Below this many elements a kernel stays on one thread: waking a second costs more. */
#define EMBER_PARALLEL_GRAIN 32768

#endif /* EMBER_CPU_COMMON_H */

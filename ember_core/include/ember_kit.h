/*
 * ember_kit.h -- helpers for a backend's C kernels (ember new-backend's kernels use them):
 * item sizes, the C type of each dtype, the conversions ember defines where C does not, and an
 * iterator that walks operands of one shape through their strides.  Header-only; no ABI of its own.
 */
#ifndef EMBER_KIT_H
#define EMBER_KIT_H

#include <stdint.h>
#include <string.h>
#include "ember.h"

#define EMBER_KIT_MAX_OPERANDS 4

/* Bytes per element of a dtype (0 for an unknown code). */
static inline int64_t ember_itemsize(int32_t dtype)
{
    static const int64_t sizes[EMBER_NUM_DTYPES] = {1, 1, 2, 4, 8, 1, 2, 2, 4, 8, 8, 16};
    return dtype >= 0 && dtype < EMBER_NUM_DTYPES ? sizes[dtype] : 0;
}

/* X(code, C type) for every dtype a plain C type holds (bool is one byte holding 0 or 1). */
#define EMBER_KIT_REAL_DTYPES(X) \
    X(EMBER_BOOL, uint8_t) X(EMBER_INT8, int8_t) X(EMBER_INT16, int16_t) X(EMBER_INT32, int32_t) \
    X(EMBER_INT64, int64_t) X(EMBER_UINT8, uint8_t) X(EMBER_FLOAT32, float) X(EMBER_FLOAT64, double)

/* A real floating value as an integer dtype: truncation toward zero, NaN -> 0, +-inf and values
 * out of range -> the dtype's min / max.  `limit` is max + 1, a power of two (exact as a double,
 * unlike INT64_MAX). */
static inline int64_t ember_float_to_int(double v, int64_t min, double limit, int64_t max)
{
    if (v != v)
        return 0;
    if (v >= limit)
        return max;
    if (v < (double)min)
        return min;
    return (int64_t)v;
}

/* float -> IEEE half, rounded to nearest even (subnormals, overflow to inf, NaN kept).  Through
 * float, double -> half is correctly rounded too: float carries more than 2 * 11 + 2 bits. */
static inline uint16_t ember_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu, biased = absx >> 23;
    if (absx > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (biased >= 143)                         /* >= 2**16: infinity (inf itself too) */
        return (uint16_t)(sign | 0x7c00u);
    if (biased >= 113) {                       /* a normal half, or rounds up into infinity */
        uint32_t h = ((biased - 112) << 10) | ((absx >> 13) & 0x3ffu);
        const uint32_t rest = absx & 0x1fffu;
        h += rest > 0x1000u || (rest == 0x1000u && (h & 1u));
        return (uint16_t)(sign | h);
    }
    const uint32_t shift = 126 - biased;      /* a subnormal half: mantissa * 2**-24 */
    if (biased == 0 || shift > 24)
        return (uint16_t)sign;
    const uint32_t mantissa = (absx & 0x7fffffu) | 0x800000u, rest = mantissa & ((1u << shift) - 1);
    uint32_t h = mantissa >> shift;
    h += rest > (1u << (shift - 1)) || (rest == (1u << (shift - 1)) && (h & 1u));
    return (uint16_t)(sign | h);
}

/* float -> bfloat16 (the top half of a float), rounded to nearest even, NaN kept quiet. */
static inline uint16_t ember_float_to_bfloat16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Convert one real value (an integer when from_is_float is 0) into the dtype `to` at `dst`; an
 * unknown dtype code sets `status` to EMBER_ERR_UNSUPPORTED.  Complex results get imaginary 0. */
#define EMBER_KIT_CONVERT(from_is_float, src_value, to, dst, status)                                 \
    do {                                                                                           \
        switch (to) {                                                                              \
        case EMBER_BOOL: *(uint8_t *)(dst) = (src_value) != 0; break;                              \
        case EMBER_FLOAT32: *(float *)(dst) = (float)(src_value); break;                           \
        case EMBER_FLOAT64: *(double *)(dst) = (double)(src_value); break;                         \
        case EMBER_FLOAT16: *(uint16_t *)(dst) = ember_float_to_half((float)(src_value)); break;   \
        case EMBER_BFLOAT16: *(uint16_t *)(dst) = ember_float_to_bfloat16((float)(src_value)); break; \
        case EMBER_COMPLEX64: ((float *)(dst))[0] = (float)(src_value); ((float *)(dst))[1] = 0; break; \
        case EMBER_COMPLEX128: ((double *)(dst))[0] = (double)(src_value); ((double *)(dst))[1] = 0; break; \
        EMBER_KIT_CONVERT_INT(from_is_float, src_value, EMBER_INT8, int8_t, INT8_MIN, 0x1p7, INT8_MAX, dst) \
        EMBER_KIT_CONVERT_INT(from_is_float, src_value, EMBER_INT16, int16_t, INT16_MIN, 0x1p15, INT16_MAX, dst) \
        EMBER_KIT_CONVERT_INT(from_is_float, src_value, EMBER_INT32, int32_t, INT32_MIN, 0x1p31, INT32_MAX, dst) \
        EMBER_KIT_CONVERT_INT(from_is_float, src_value, EMBER_INT64, int64_t, INT64_MIN, 0x1p63, INT64_MAX, dst) \
        EMBER_KIT_CONVERT_INT(from_is_float, src_value, EMBER_UINT8, uint8_t, 0, 0x1p8, UINT8_MAX, dst) \
        default: (status) = EMBER_ERR_UNSUPPORTED;                                                 \
        }                                                                                          \
    } while (0)

/* Integers to a narrower integer wrap (through uint64_t: defined in C); floats saturate. */
#define EMBER_KIT_CONVERT_INT(from_is_float, v, code, type, min, limit, max, dst)                  \
    case code:                                                                                     \
        *(type *)(dst) = (from_is_float) ? (type)ember_float_to_int((double)(v), (min), (limit), (max)) \
                                         : (type)(uint64_t)(int64_t)(v);                           \
        break;

/* Walks every element of up to EMBER_KIT_MAX_OPERANDS tensors of one shape (the first one's),
 * in row-major order, keeping each operand's element offset:
 *
 *     const ember_tensor *ops[] = {out, a, b};
 *     for (ember_iter it = ember_iter_begin(3, ops); it.remaining > 0; ember_iter_next(&it))
 *         *EMBER_AT(it, 0, float) = *EMBER_AT(it, 1, float) + *EMBER_AT(it, 2, float);
 */
typedef struct {
    int32_t count;                             /* operands */
    int32_t ndim;
    int64_t remaining;                         /* elements not yet visited */
    int64_t index[EMBER_MAX_NDIM];
    int64_t pos[EMBER_KIT_MAX_OPERANDS];       /* each operand's element offset from its data */
    const ember_tensor *t[EMBER_KIT_MAX_OPERANDS];
} ember_iter;

#define EMBER_AT(it, k, type) ((type *)(it).t[k]->data + (it).pos[k])

static inline ember_iter ember_iter_begin(int32_t count, const ember_tensor *const *tensors)
{
    ember_iter it = {0};
    it.count = count;
    it.ndim = tensors[0]->ndim;
    it.remaining = 1;
    for (int32_t d = 0; d < it.ndim; d++)
        it.remaining *= tensors[0]->shape[d];
    for (int32_t k = 0; k < count; k++) {
        it.t[k] = tensors[k];
        it.pos[k] = tensors[k]->offset;
    }
    return it;
}

static inline void ember_iter_next(ember_iter *it)
{
    it->remaining--;
    for (int32_t d = it->ndim - 1; d >= 0; d--) {
        const int64_t n = it->t[0]->shape[d];
        for (int32_t k = 0; k < it->count; k++)
            it->pos[k] += it->t[k]->strides[d];
        if (++it->index[d] < n)
            return;
        it->index[d] = 0;
        for (int32_t k = 0; k < it->count; k++)
            it->pos[k] -= it->t[k]->strides[d] * n;
    }
}

#endif /* EMBER_KIT_H */

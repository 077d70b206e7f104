/*
 * eg_sort.h -- stable sort and argsort along the last dim (eg_sort_args; abi.h says how to
 * launch).  Every sortable dtype maps to an unsigned key whose order is numpy's order of the
 * values, as ember-cpu's sort.c: signed integers flip the sign bit; floats flip every bit of a
 * negative and the sign bit of a positive, -0.0 keys as +0.0 and every NaN as the largest key
 * (NaN last); descending complements the key (NaN first).  A key struct (gen_sort.py):
 *     struct Key { typedef ... in_t; enum { bits = ... }; static EG_HD eg_u64 key(in_t v); };
 * One block sorts a row: the pairs (key, index) are distinct, so any sorting network orders them
 * exactly as a stable sort does; this one is bitonic over the row padded to a power of two, in
 * shared memory up to EG_SORT_SHARED elements, else in the block's slice of a scratch buffer.
 * sort writes the elements at the sorted indices (their stored bits: NaN payloads and the sign of
 * zero come through), argsort the indices.
 */
#ifndef EG_SORT_H
#define EG_SORT_H

#define EG_SORT_SHARED 1024

template <class K> static EG_HD EG_INLINE eg_u64 eg_sint_key(K u)
{
    return (eg_u64)(K)(u ^ ((K)1 << (sizeof(K) * 8 - 1)));
}

/* the IEEE bits u of a float whose exponent is all ones at `inf` */
template <class K> static EG_HD EG_INLINE eg_u64 eg_float_key(K u, K inf)
{
    const K sign = (K)1 << (sizeof(K) * 8 - 1), mag = (K)(u & (K)~sign);
    if (mag > inf) return (eg_u64)(K)~(K)0;   /* NaN: after everything */
    if (mag == 0) return sign;                /* -0.0 == +0.0 */
    return (eg_u64)(K)((u & sign) ? (K)~u : (K)(u | sign));
}

struct eg_sort_pair {
    eg_u64 key, index;
};

static EG_HD EG_INLINE bool eg_sort_after(eg_sort_pair a, eg_sort_pair b)
{
    return a.key > b.key || (a.key == b.key && a.index > b.index);
}

/* The offset (elements) of row r's first element, over the leading ndim - 1 dims. */
static __device__ EG_INLINE eg_i64 eg_sort_row(const eg_sort_args &a, const long long *strides, eg_i64 r)
{
    eg_i64 off = 0;
    for (int d = a.ndim - 2; d >= 0; d--) {
        const eg_i64 q = d ? r / a.shape[d] : 0;
        off += (r - q * a.shape[d]) * strides[d];
        r = q;
    }
    return off;
}

template <class Key, bool Index>
static __device__ EG_INLINE void eg_sort(const eg_sort_args a)
{
    typedef typename Key::in_t T;
    __shared__ eg_sort_pair shared[EG_SORT_SHARED];
    const eg_i64 n = a.shape[a.ndim - 1], xs = a.x_strides[a.ndim - 1], os = a.out_strides[a.ndim - 1];
    eg_i64 width = 1;
    while (width < n) width *= 2;
    eg_sort_pair *pair = width <= EG_SORT_SHARED ? shared : (eg_sort_pair *)a.scratch + (eg_i64)blockIdx.x * width;
    const eg_u64 flip = !a.descending ? 0 : Key::bits == 64 ? ~(eg_u64)0 : ((eg_u64)1 << Key::bits) - 1;
    const unsigned t = threadIdx.x;
    for (eg_i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const T *x = (const T *)a.x + eg_sort_row(a, a.x_strides, r);
        for (eg_i64 i = t; i < width; i += blockDim.x) {
            eg_sort_pair p = {~(eg_u64)0, ~(eg_u64)0};   /* padding: after every element */
            if (i < n) p = eg_sort_pair{Key::key(x[i * xs]) ^ flip, (eg_u64)i};
            pair[i] = p;
        }
        EG_SYNC_THREADS();
        for (eg_i64 k = 2; k <= width; k *= 2)
            for (eg_i64 j = k / 2; j > 0; j /= 2) {
                for (eg_i64 i = t; i < width; i += blockDim.x) {
                    const eg_i64 l = i ^ j;
                    if (l > i && eg_sort_after(pair[i], pair[l]) == ((i & k) == 0)) {
                        const eg_sort_pair swap = pair[i];
                        pair[i] = pair[l];
                        pair[l] = swap;
                    }
                }
                EG_SYNC_THREADS();
            }
        if (Index) {
            eg_i64 *out = (eg_i64 *)a.out + eg_sort_row(a, a.out_strides, r);
            for (eg_i64 i = t; i < n; i += blockDim.x) out[i * os] = (eg_i64)pair[i].index;
        } else {
            T *out = (T *)a.out + eg_sort_row(a, a.out_strides, r);
            for (eg_i64 i = t; i < n; i += blockDim.x) out[i * os] = x[(eg_i64)pair[i].index * xs];
        }
        EG_SYNC_THREADS();   /* pair is refilled by the block's next row */
    }
}

/* searchsorted: out[i] = the first j of the sorted x1 whose key is >= (right: >) value i's, by
 * binary search (numpy's NaN-last order); one thread per value, any block and grid. */
template <class Key>
static __device__ EG_INLINE void eg_search(const eg_search_args a)
{
    typedef typename Key::in_t T;
    const T *x1 = (const T *)a.x1, *values = (const T *)a.values;
    const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 i = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += threads) {
        eg_i64 rest = i, vo = 0, oo = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            const eg_i64 q = d ? rest / a.shape[d] : 0, idx = rest - q * a.shape[d];
            vo += idx * a.value_strides[d];
            oo += idx * a.out_strides[d];
            rest = q;
        }
        const eg_u64 key = Key::key(values[vo]);
        eg_i64 lo = 0, hi = a.n;
        while (lo < hi) {
            const eg_i64 mid = lo + (hi - lo) / 2;
            const eg_u64 k = Key::key(x1[mid * a.x1_stride]);
            if (a.right ? k <= key : k < key) lo = mid + 1;
            else hi = mid;
        }
        ((eg_i64 *)a.out)[oo] = lo;
    }
}

/* sort, argsort and searchsorted of one dtype: eg_sort_sort_<dtype>, eg_sort_argsort_<dtype>,
 * eg_search_searchsorted_<dtype> */
#define EG_SORT_KERNELS(dtype, Key)                                                                  \
    EG_KERNEL(eg_sort_sort_##dtype, eg_sort_args) { eg_sort<Key, false>(args); }                     \
    EG_KERNEL(eg_sort_argsort_##dtype, eg_sort_args) { eg_sort<Key, true>(args); }                   \
    EG_KERNEL(eg_search_searchsorted_##dtype, eg_search_args) { eg_search<Key>(args); }

#endif /* EG_SORT_H */

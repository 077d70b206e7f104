/*
 * eg_scan.h -- inclusive scans along the last dim (cumulative_sum, cumulative_prod): out[.., i] =
 * x[.., 0] (op) ... (op) x[.., i], with the op structs of eg_reduce.h (sum and prod: ember-cpu's
 * accumulators).  Deterministic (eg_scan_args says how to launch):
 *   EG_SCAN_THREAD  one thread per row, in order: ember-cpu's own order, so its bits;
 *   EG_SCAN_BLOCK   one block per row, blockDim.x elements at a time: a Hillis-Steele scan of the
 *                   chunk in shared memory (the same tree for every chunk and every vendor), each
 *                   combined with the carry, the total of the chunks before it.
 * Each chunk is read before it is written, so out may be x (an in-place scan).
 */
#ifndef EG_SCAN_H
#define EG_SCAN_H

/* The offset (elements) of row r's first element, over the leading ndim - 1 dims of the layout. */
static __device__ EG_INLINE eg_i64 eg_scan_row(const long long *shape, const long long *strides, int ndim, eg_i64 r)
{
    eg_i64 off = 0;
    for (int d = ndim - 2; d >= 0; d--) {
        const eg_i64 q = d ? r / shape[d] : 0;
        off += (r - q * shape[d]) * strides[d];
        r = q;
    }
    return off;
}

template <class Op>
static __device__ EG_INLINE void eg_scan(const eg_scan_args a)
{
    typedef typename Op::in_t T;
    typedef typename Op::acc_t A;
    const eg_i64 n = a.shape[a.ndim - 1], xs = a.x_strides[a.ndim - 1], os = a.out_strides[a.ndim - 1];
    if (a.mode == EG_SCAN_THREAD) {
        const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x;
        for (eg_i64 r = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; r < a.rows; r += threads) {
            const T *x = (const T *)a.x + eg_scan_row(a.shape, a.x_strides, a.ndim, r);
            typename Op::out_t *out = (typename Op::out_t *)a.out + eg_scan_row(a.shape, a.out_strides, a.ndim, r);
            A acc = Op::identity();
            for (eg_i64 i = 0; i < n; i++) {
                acc = Op::combine(acc, Op::load(x[i * xs], i));
                out[i * os] = Op::store(acc);
            }
        }
        return;
    }
    __shared__ A part[EG_BLOCK];
    const unsigned t = threadIdx.x, width = blockDim.x;
    for (eg_i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const T *x = (const T *)a.x + eg_scan_row(a.shape, a.x_strides, a.ndim, r);
        typename Op::out_t *out = (typename Op::out_t *)a.out + eg_scan_row(a.shape, a.out_strides, a.ndim, r);
        A carry = Op::identity();
        for (eg_i64 base = 0; base < n; base += width) {
            const eg_i64 i = base + t;
            A v = i < n ? Op::load(x[i * xs], i) : Op::identity();
            part[t] = v;
            EG_SYNC_THREADS();
            for (unsigned step = 1; step < width; step *= 2) {
                if (t >= step) v = Op::combine(part[t - step], v);
                EG_SYNC_THREADS();
                part[t] = v;
                EG_SYNC_THREADS();
            }
            if (i < n) out[i * os] = Op::store(Op::combine(carry, v));
            carry = Op::combine(carry, part[width - 1]);
            EG_SYNC_THREADS();   /* part is refilled by the next chunk */
        }
    }
}

#define EG_SCAN_KERNEL(name, Op) \
    EG_KERNEL(name, eg_scan_args) { eg_scan<Op>(args); }

#endif /* EG_SCAN_H */

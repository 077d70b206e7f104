/*
 * eg_index.h -- gather (take), scatter (index_put, with or without accumulation) and the integer
 * matmul.  take and put work on 3-d views (outer, n, inner) indexed along the middle dim by a
 * contiguous int64 index list, every index in [-n, n) (the core checks them before any kernel
 * runs); negative ones count from the end.
 *   take:  one thread per output element; moves stored elements (kernels per element size).
 *   put:   one thread per (outer, inner) pair walks the whole index list in order, so with
 *          repeated indices the last write wins and accumulation adds in index order, as ember-cpu
 *          (the same bits), deterministically.  Parallel over outer * inner only.
 *   matmul (integers): one thread per output element, the products added in k order, wrapping.
 *   nonzero: two launches, a count per block and the coordinates (below).
 */
#ifndef EG_INDEX_H
#define EG_INDEX_H

/* stored elements of 1, 2, 4, 8 and 16 bytes, moved whole */
template <int Bytes> struct EG_ALIGN(Bytes) eg_bytes { unsigned char b[Bytes]; };

static __device__ EG_INLINE eg_i64 eg_wrap_index(eg_i64 k, eg_i64 n) { return k < 0 ? k + n : k; }

template <int Bytes>
static __device__ EG_INLINE void eg_take(const eg_index_args a)
{
    typedef eg_bytes<Bytes> E;
    const eg_i64 total = a.outer * a.m * a.inner, threads = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 e = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += threads) {
        const eg_i64 c = e % a.inner, oj = e / a.inner, j = oj % a.m, o = oj / a.m;
        const eg_i64 k = eg_wrap_index(a.indices[j], a.n);
        ((E *)a.dst)[o * a.dst_strides[0] + j * a.dst_strides[1] + c * a.dst_strides[2]] =
            ((const E *)a.src)[o * a.src_strides[0] + k * a.src_strides[1] + c * a.src_strides[2]];
    }
}

/* Op: struct { typedef ... T; static EG_HD T apply(T old, T value); } (the new element) */
template <class Op>
static __device__ EG_INLINE void eg_put(const eg_index_args a)
{
    typedef typename Op::T T;
    const eg_i64 total = a.outer * a.inner, threads = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 e = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += threads) {
        const eg_i64 c = e % a.inner, o = e / a.inner;
        T *dst = (T *)a.dst + o * a.dst_strides[0] + c * a.dst_strides[2];
        const T *src = (const T *)a.src + o * a.src_strides[0] + c * a.src_strides[2];
        for (eg_i64 j = 0; j < a.m; j++) {
            T *d = dst + eg_wrap_index(a.indices[j], a.n) * a.dst_strides[1];
            *d = Op::apply(*d, src[j * a.src_strides[1]]);
        }
    }
}

template <int Bytes> struct eg_put_store {
    typedef eg_bytes<Bytes> T;
    static EG_HD EG_INLINE T apply(T, T value) { return value; }
};

#define EG_MOVE_KERNELS(bytes)                                                                       \
    EG_KERNEL(eg_index_take_##bytes, eg_index_args) { eg_take<bytes>(args); }                        \
    EG_KERNEL(eg_index_put_##bytes, eg_index_args) { eg_put<eg_put_store<bytes> >(args); }
#define EG_PUT_ADD_KERNEL(name, Op) \
    EG_KERNEL(name, eg_index_args) { eg_put<Op>(args); }

/* Op: struct { typedef ... T, acc_t; static EG_HD acc_t load(T); static EG_HD T store(acc_t); } */
template <class Op>
static __device__ EG_INLINE void eg_matmul(const eg_matmul_args a)
{
    typedef typename Op::T T;
    const eg_i64 total = a.batch * a.m * a.n, threads = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 e = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += threads) {
        const eg_i64 j = e % a.n, bi = e / a.n, i = bi % a.m, b = bi / a.m;
        const T *x = (const T *)a.a + b * a.a_strides[0] + i * a.a_strides[1];
        const T *y = (const T *)a.b + b * a.b_strides[0] + j * a.b_strides[2];
        typename Op::acc_t acc = 0;
        for (eg_i64 k = 0; k < a.k; k++) acc += Op::load(x[k * a.a_strides[2]]) * Op::load(y[k * a.b_strides[1]]);
        ((T *)a.out)[b * a.out_strides[0] + i * a.out_strides[1] + j * a.out_strides[2]] = Op::store(acc);
    }
}

#define EG_MATMUL_KERNEL(name, Op) \
    EG_KERNEL(name, eg_matmul_args) { eg_matmul<Op>(args); }

/* ---- nonzero: the coordinates of the true elements, in C order ------------------------------------
 * Block b owns elements [b * chunk, (b + 1) * chunk) of x in C order, thread t of it a contiguous
 * run of those.  EG_NONZERO_COUNT: counts[b] = the block's true elements.  EG_NONZERO_WRITE (same
 * args, after COUNT): the block's first row is the sum of counts[0 .. b), each thread's the block's
 * plus an exclusive scan of the threads' counts; each thread writes its rows in order.
 * Op: struct { typedef ... T; static EG_HD bool truth(T v); } */
template <class Op>
static __device__ EG_INLINE void eg_nonzero(const eg_nonzero_args a)
{
    typedef typename Op::T T;
    __shared__ eg_i64 before[EG_BLOCK];
    const unsigned t = threadIdx.x;
    const eg_i64 first = (eg_i64)blockIdx.x * a.chunk, end = first + a.chunk < a.total ? first + a.chunk : a.total;
    const eg_i64 per = (a.chunk + blockDim.x - 1) / blockDim.x, lo = first + t * per;
    const eg_i64 hi = lo + per < end ? lo + per : end;
    const T *x = (const T *)a.x;
    eg_i64 mine = 0;
    for (eg_i64 e = lo; e < hi; e++) {
        eg_i64 rest = e, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            const eg_i64 q = d ? rest / a.shape[d] : 0;
            off += (rest - q * a.shape[d]) * a.strides[d];
            rest = q;
        }
        mine += Op::truth(x[off]);
    }
    /* inclusive scan of the threads' counts (Hillis-Steele), then each thread's exclusive start */
    eg_i64 v = mine;
    before[t] = v;
    EG_SYNC_THREADS();
    for (unsigned step = 1; step < blockDim.x; step *= 2) {
        if (t >= step) v += before[t - step];
        EG_SYNC_THREADS();
        before[t] = v;
        EG_SYNC_THREADS();
    }
    if (a.mode == EG_NONZERO_COUNT) {
        if (t == blockDim.x - 1) a.counts[blockIdx.x] = v;
        return;
    }
    eg_i64 row = v - mine;
    for (eg_i64 b = 0; b < blockIdx.x; b++) row += a.counts[b];
    eg_i64 *out = (eg_i64 *)a.out;
    for (eg_i64 e = lo; e < hi; e++) {
        eg_i64 rest = e, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            const eg_i64 q = d ? rest / a.shape[d] : 0;
            off += (rest - q * a.shape[d]) * a.strides[d];
            rest = q;
        }
        if (!Op::truth(x[off])) continue;
        rest = e;
        for (int d = a.ndim - 1; d >= 0; d--) {
            const eg_i64 q = d ? rest / a.shape[d] : 0;
            out[row * a.ndim + d] = rest - q * a.shape[d];
            rest = q;
        }
        row++;
    }
}

#define EG_NONZERO_KERNEL(name, Op) \
    EG_KERNEL(name, eg_nonzero_args) { eg_nonzero<Op>(args); }

#endif /* EG_INDEX_H */

/*
 * eg_norm.h -- layer_norm, group_norm and batch_norm_train forward (eg_norm_args,
 * eg_batchnorm_args; abi.h says how to launch), with
 * ember-cpu's semantics (norm.c): each row of d contiguous values is normalized by its own
 * statistics, mean = sum x / d and the biased variance of the centred values (a second pass, so no
 * cancellation), both summed in double; out = (x - mean) * invstd * weight[c] + bias[c], invstd =
 * 1 / sqrt(var + eps) rounded to the compute type (float32 for float16 / bfloat16, which round
 * once at the store).  A row's value j belongs to channel c = (row % groups) * (d / span) + j / span:
 * layer_norm is groups 1, span 1 (c = j); group_norm's rows are (sample, group) pairs of d =
 * (C / groups) * S values, span S.  The dtype structs are eg_nn.h's.  Deterministic: a thread
 * sums its values in order, a block halves its partials in shared memory (eg_reduce_block).
 */
#ifndef EG_NORM_H
#define EG_NORM_H

/* The mean and the biased variance (centred, a second pass) of the `count` values at[i] of base,
 * this thread taking i = lo, lo + step, ..., combined over the block when `block` (every thread
 * gets them).  at: the offset (elements) of value i. */
template <class D, class At>
static __device__ EG_INLINE void eg_norm_moments(const typename D::T *base, eg_i64 count, At at, eg_i64 lo, eg_i64 step,
                                                 bool block, typename D::C *mean, double *var)
{
    typedef typename D::C C;
    double sum = 0;
    for (eg_i64 i = lo; i < count; i += step) sum += (double)D::load(base[at(i)]);
    if (block) sum = eg_reduce_block<eg_nn_sum>(sum);
    *mean = (C)(sum / (double)count);
    double squares = 0;
    for (eg_i64 i = lo; i < count; i += step) {
        const double v = (double)(D::load(base[at(i)]) - *mean);
        squares += v * v;
    }
    if (block) squares = eg_reduce_block<eg_nn_sum>(squares);
    *var = squares / (double)count;
}

struct eg_norm_contiguous {
    EG_HD EG_INLINE eg_i64 operator()(eg_i64 i) const { return i; }
};

template <class D>
static __device__ EG_INLINE void eg_norm_row(const eg_norm_args &a, eg_i64 r, eg_i64 lo, eg_i64 step, bool block)
{
    typedef typename D::C C;
    typedef typename D::T T;
    const T *row = (const T *)a.x + r * a.d, *w = (const T *)a.weight, *b = (const T *)a.bias;
    T *out = (T *)a.out + r * a.d;
    C mean;
    double var;
    eg_norm_moments<D>(row, a.d, eg_norm_contiguous(), lo, step, block, &mean, &var);
    const C invstd = (C)(1.0 / sqrt(var + a.eps));
    const eg_i64 first = (r % a.groups) * (a.d / a.span);
    for (eg_i64 j = lo; j < a.d; j += step) {
        const eg_i64 c = first + j / a.span;
        C v = (D::load(row[j]) - mean) * invstd;
        if (w) v = v * D::load(w[c]);
        if (b) v = v + D::load(b[c]);
        out[j] = D::store(v);
    }
}

template <class D>
static __device__ EG_INLINE void eg_norm(const eg_norm_args a)
{
    if (a.mode == EG_NORM_THREAD) {
        const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x;
        for (eg_i64 r = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; r < a.rows; r += threads)
            eg_norm_row<D>(a, r, 0, 1, false);
        return;
    }
    for (eg_i64 r = blockIdx.x; r < a.rows; r += gridDim.x) eg_norm_row<D>(a, r, threadIdx.x, blockDim.x, true);
}

/* ---- batch_norm_train: a block per channel ------------------------------------------------------- */

/* value i of a channel: sample i / s, position i % s, the channel's samples c * s apart */
struct eg_norm_channel {
    eg_i64 s, sample;   /* positions per sample, elements per sample (c * s) */
    EG_HD EG_INLINE eg_i64 operator()(eg_i64 i) const { return (i / s) * sample + i % s; }
};

template <class D>
static __device__ EG_INLINE void eg_batch_norm_train(const eg_batchnorm_args a)
{
    typedef typename D::C C;
    typedef typename D::T T;
    const T *w = (const T *)a.weight, *b = (const T *)a.bias;
    const eg_norm_channel at = {a.s, a.c * a.s};
    for (eg_i64 c = blockIdx.x; c < a.c; c += gridDim.x) {
        const T *x = (const T *)a.x + c * a.s;
        T *out = (T *)a.out + c * a.s;
        C mean;
        double var;
        eg_norm_moments<D>(x, a.n * a.s, at, threadIdx.x, blockDim.x, true, &mean, &var);
        const C scale = (C)(1.0 / sqrt(var + a.eps)) * (w ? D::load(w[c]) : (C)1), shift = b ? D::load(b[c]) : (C)0;
        if (threadIdx.x == 0) {
            ((T *)a.stats)[c] = D::store(mean);
            ((T *)a.stats)[a.c + c] = D::store((C)var);
        }
        for (eg_i64 i = threadIdx.x; i < a.n * a.s; i += blockDim.x) {
            const eg_i64 off = at(i);
            out[off] = D::store((D::load(x[off]) - mean) * scale + shift);
        }
    }
}

#define EG_NORM_KERNELS(dtype, D)                                                                      \
    EG_KERNEL(eg_norm_rows_##dtype, eg_norm_args) { eg_norm<D>(args); }                               \
    EG_KERNEL(eg_batchnorm_train_##dtype, eg_batchnorm_args) { eg_batch_norm_train<D>(args); }

#endif /* EG_NORM_H */

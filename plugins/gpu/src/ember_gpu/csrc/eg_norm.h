/*
 * eg_norm.h -- layer_norm and group_norm forward (eg_norm_args; abi.h says how to launch), with
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

/* Row r's mean and invstd from its values [lo, d) every `step`, combined over the block when
 * `block` (every thread gets them). */
template <class D>
static __device__ EG_INLINE void eg_norm_stats(const eg_norm_args &a, const typename D::T *row, eg_i64 lo, eg_i64 step,
                                               bool block, typename D::C *mean, typename D::C *invstd)
{
    typedef typename D::C C;
    double sum = 0;
    for (eg_i64 j = lo; j < a.d; j += step) sum += (double)D::load(row[j]);
    if (block) sum = eg_reduce_block<eg_nn_sum>(sum);
    *mean = (C)(sum / (double)a.d);
    double squares = 0;
    for (eg_i64 j = lo; j < a.d; j += step) {
        const double v = (double)(D::load(row[j]) - *mean);
        squares += v * v;
    }
    if (block) squares = eg_reduce_block<eg_nn_sum>(squares);
    *invstd = (C)(1.0 / sqrt(squares / (double)a.d + a.eps));
}

template <class D>
static __device__ EG_INLINE void eg_norm_row(const eg_norm_args &a, eg_i64 r, eg_i64 lo, eg_i64 step, bool block)
{
    typedef typename D::C C;
    typedef typename D::T T;
    const T *row = (const T *)a.x + r * a.d, *w = (const T *)a.weight, *b = (const T *)a.bias;
    T *out = (T *)a.out + r * a.d;
    C mean, invstd;
    eg_norm_stats<D>(a, row, lo, step, block, &mean, &invstd);
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

#define EG_NORM_KERNELS(dtype, D) \
    EG_KERNEL(eg_norm_rows_##dtype, eg_norm_args) { eg_norm<D>(args); }

#endif /* EG_NORM_H */

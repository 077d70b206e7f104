/*
 * eg_norm.h -- layer_norm, group_norm and batch_norm_train forward (eg_norm_args,
 * eg_batchnorm_args) and the gradients of all three (eg_normgrad_args; abi.h says how to launch), with
 * ember-cpu's semantics (norm.c): each row of d contiguous values is normalized by its own
 * statistics, mean = sum x / d and the biased variance of the centred values (a second pass, so no
 * cancellation), both summed in double; out = (x - mean) * invstd * weight[c] + bias[c], invstd =
 * 1 / sqrt(var + eps) rounded to the compute type (float32 for float16 / bfloat16, which round
 * once at the store).  A row's value j belongs to channel c = (row % groups) * (d / span) + j / span:
 * layer_norm is groups 1, span 1 (c = j); group_norm's rows are (sample, group) pairs of d =
 * (C / groups) * S values, span S.  The dtype structs are eg_nn.h's.  Deterministic: a thread
 * sums its values in order, a block halves its partials in shared memory (eg_reduce_block).
 * Backward recomputes each row's statistics (nothing but x is kept); layer / group norm's weight and
 * bias gradients are per-channel sums of grad * xhat and grad, which read the statistics the
 * x-gradient's pass saved (row_stats) instead of recomputing them per channel: a block per channel
 * where a channel's values come in runs (s large), else a thread per (channel, part of the samples)
 * with neighbouring threads on neighbouring channels (layer norm's columns), then the parts in order.
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

/* ---- the gradients (eg_normgrad_args) ------------------------------------------------------------ */

/* Rows r of the (n, c, s) layout: a thread per row, or a block per row (lo = threadIdx.x, step =
 * blockDim.x, block sums combined by halving). */
template <class Row>
static __device__ EG_INLINE void eg_normgrad_each_row(const eg_normgrad_args &a, eg_i64 rows, Row row)
{
    if (a.mode == EG_NORM_THREAD) {
        const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x;
        for (eg_i64 r = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += threads) row(r, 0, 1, false);
        return;
    }
    for (eg_i64 r = blockIdx.x; r < rows; r += gridDim.x) row(r, threadIdx.x, blockDim.x, true);
}

/* grad * weight of value j of a row whose first channel is `first` (channels span values apart) */
template <class D>
static __device__ EG_INLINE typename D::C eg_weighted(const eg_normgrad_args &a, const typename D::T *g, eg_i64 j,
                                                      eg_i64 first)
{
    const typename D::C v = D::load(g[j]);
    return a.weight ? v * D::load(((const typename D::T *)a.weight)[first + j / a.s]) : v;
}

/* layer_norm / group_norm backward over row r of d values: its statistics (saved when asked), and
 * with gw = grad * weight, out = invstd * (gw - mean(gw) - xhat * mean(gw * xhat)) (norm.c's). */
template <class D>
static __device__ EG_INLINE void eg_normgrad_row(const eg_normgrad_args &a, eg_i64 r, eg_i64 lo, eg_i64 step,
                                                 bool block)
{
    typedef typename D::C C;
    typedef typename D::T T;
    const eg_i64 per_group = a.c / a.groups, d = per_group * a.s, first = (r % a.groups) * per_group;
    const T *x = (const T *)a.x + r * d, *g = (const T *)a.grad + r * d;
    C mean;
    double var;
    eg_norm_moments<D>(x, d, eg_norm_contiguous(), lo, step, block, &mean, &var);
    const C invstd = (C)(1.0 / sqrt(var + a.eps));
    if (a.row_stats && lo == 0) a.row_stats[2 * r] = (double)mean, a.row_stats[2 * r + 1] = (double)invstd;
    if (!a.out) return;
    double sg = 0, sgx = 0;
    for (eg_i64 j = lo; j < d; j += step) {
        const C gw = eg_weighted<D>(a, g, j, first);
        sg += (double)gw;
        sgx += (double)(gw * (D::load(x[j]) - mean));
    }
    if (block) sg = eg_reduce_block<eg_nn_sum>(sg), sgx = eg_reduce_block<eg_nn_sum>(sgx);
    const C mg = (C)(sg / (double)d), mgx = (C)(sgx * (double)invstd / (double)d);
    T *out = (T *)a.out + r * d;
    for (eg_i64 j = lo; j < d; j += step)
        out[j] = D::store(invstd * (eg_weighted<D>(a, g, j, first) - mg - (D::load(x[j]) - mean) * invstd * mgx));
}

template <class D> struct eg_normgrad_row_fn {
    const eg_normgrad_args &a;
    __device__ EG_INLINE void operator()(eg_i64 r, eg_i64 lo, eg_i64 step, bool block) const
    {
        eg_normgrad_row<D>(a, r, lo, step, block);
    }
};

/* Channel c's terms over samples [n0, n1), this thread taking values lo, lo + step, ... of them:
 * s1 += grad * (x - mean) * k, s2 += grad, (mean, k) batch norm's (mean, 1) or the value's row's
 * saved (mean, invstd). */
template <class D>
static __device__ EG_INLINE void eg_channel_terms(const eg_normgrad_args &a, eg_i64 c, eg_i64 n0, eg_i64 n1,
                                                  eg_i64 lo, eg_i64 step, double *s1, double *s2)
{
    typedef typename D::C C;
    typedef typename D::T T;
    const T *g = (const T *)a.grad + c * a.s, *x = (const T *)a.x + c * a.s;
    const eg_norm_channel at = {a.s, a.c * a.s};
    const eg_i64 group = c / (a.c / a.groups);
    C mean = a.stats ? D::load(((const T *)a.stats)[c]) : (C)0, k = (C)1;
    for (eg_i64 i = n0 * a.s + lo; i < n1 * a.s; i += step) {
        if (!a.stats) {
            const eg_i64 row = (i / a.s) * a.groups + group;
            mean = (C)a.row_stats[2 * row], k = (C)a.row_stats[2 * row + 1];
        }
        const eg_i64 off = at(i);
        const C gv = D::load(g[off]);
        *s1 += (double)(gv * ((D::load(x[off]) - mean) * k));
        *s2 += (double)gv;
    }
}

template <class D>
static __device__ EG_INLINE void eg_channel_store(const eg_normgrad_args &a, eg_i64 c, double s1, double s2)
{
    typedef typename D::C C;
    typedef typename D::T T;
    T *out = (T *)a.affine;
    if (a.stats) {   /* batch_norm_backward_reduce: (sum g, sum g * xhat) */
        out[c] = D::store((C)s2);
        out[a.c + c] = D::store((C)(s1 / sqrt((double)D::load(((const T *)a.stats)[a.c + c]) + a.eps)));
    } else {         /* the weight and bias gradients */
        out[c] = D::store((C)s1);
        out[a.c + c] = D::store((C)s2);
    }
}

template <class D>
static __device__ EG_INLINE void eg_normgrad_channels(const eg_normgrad_args a)
{
    const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x, tid = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (a.mode == EG_NORM_BLOCK) {
        for (eg_i64 c = blockIdx.x; c < a.c; c += gridDim.x) {
            double s1 = 0, s2 = 0;
            eg_channel_terms<D>(a, c, 0, a.n, threadIdx.x, blockDim.x, &s1, &s2);
            s1 = eg_reduce_block<eg_nn_sum>(s1), s2 = eg_reduce_block<eg_nn_sum>(s2);
            if (threadIdx.x == 0) eg_channel_store<D>(a, c, s1, s2);
        }
    } else if (a.mode == EG_NORMGRAD_PARTS) {
        const eg_i64 chunk = (a.n + a.parts - 1) / a.parts;
        for (eg_i64 w = tid; w < a.c * a.parts; w += threads) {
            const eg_i64 c = w % a.c, p = w / a.c, n0 = p * chunk, n1 = n0 + chunk < a.n ? n0 + chunk : a.n;
            double s1 = 0, s2 = 0;
            eg_channel_terms<D>(a, c, n0, n1, 0, 1, &s1, &s2);
            if (a.parts == 1) eg_channel_store<D>(a, c, s1, s2);
            else a.partials[2 * p * a.c + c] = s1, a.partials[(2 * p + 1) * a.c + c] = s2;
        }
    } else {   /* EG_NORMGRAD_FINISH */
        for (eg_i64 c = tid; c < a.c; c += threads) {
            double s1 = 0, s2 = 0;
            for (eg_i64 p = 0; p < a.parts; p++) s1 += a.partials[2 * p * a.c + c], s2 += a.partials[(2 * p + 1) * a.c + c];
            eg_channel_store<D>(a, c, s1, s2);
        }
    }
}

/* batch_norm_input_grad over row r = (sample, channel) of s values: out = a * g + b * (x - mean) + k,
 * scale = weight / sqrt(var + eps), a = scale, k = -scale * sums[0] / M, b = -scale * invstd *
 * sums[1] / M, M = n * s (the coefficients in double, rounded to the compute type: norm.c's). */
template <class D>
static __device__ EG_INLINE void eg_bninput_row(const eg_normgrad_args &a, eg_i64 r, eg_i64 lo, eg_i64 step)
{
    typedef typename D::C C;
    typedef typename D::T T;
    const T *stats = (const T *)a.stats, *sums = (const T *)a.sums, *w = (const T *)a.weight;
    const eg_i64 c = r % a.c;
    const double count = (double)a.n * (double)a.s, invstd = 1.0 / sqrt((double)D::load(stats[a.c + c]) + a.eps);
    const double scale = w ? invstd * (double)D::load(w[c]) : invstd;
    const C mean = D::load(stats[c]), k1 = (C)scale, shift = (C)(-scale * (double)D::load(sums[c]) / count);
    const C k2 = (C)(-scale * invstd * (double)D::load(sums[a.c + c]) / count);
    const T *g = (const T *)a.grad + r * a.s, *x = (const T *)a.x + r * a.s;
    T *out = (T *)a.out + r * a.s;
    for (eg_i64 j = lo; j < a.s; j += step) out[j] = D::store(k1 * D::load(g[j]) + k2 * (D::load(x[j]) - mean) + shift);
}

template <class D> struct eg_bninput_row_fn {
    const eg_normgrad_args &a;
    __device__ EG_INLINE void operator()(eg_i64 r, eg_i64 lo, eg_i64 step, bool) const { eg_bninput_row<D>(a, r, lo, step); }
};

#define EG_NORM_KERNELS(dtype, D)                                                                      \
    EG_KERNEL(eg_norm_rows_##dtype, eg_norm_args) { eg_norm<D>(args); }                               \
    EG_KERNEL(eg_batchnorm_train_##dtype, eg_batchnorm_args) { eg_batch_norm_train<D>(args); }        \
    EG_KERNEL(eg_normgrad_rows_##dtype, eg_normgrad_args)                                              \
    {                                                                                                  \
        eg_normgrad_each_row(args, args.n * args.groups, eg_normgrad_row_fn<D>{args});              \
    }                                                                                                  \
    EG_KERNEL(eg_normgrad_channels_##dtype, eg_normgrad_args) { eg_normgrad_channels<D>(args); }      \
    EG_KERNEL(eg_normgrad_bninput_##dtype, eg_normgrad_args)                                           \
    {                                                                                                  \
        eg_normgrad_each_row(args, args.n * args.c, eg_bninput_row_fn<D>{args});                    \
    }

#endif /* EG_NORM_H */

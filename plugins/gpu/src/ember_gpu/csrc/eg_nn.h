/*
 * eg_nn.h -- softmax / log_softmax along one dim, nll_loss and its gradient, dropout
 * (eg_softmax_args, eg_loss_args, eg_dropout_args; abi.h says how to launch).  ember-cpu's
 * semantics (softmax.c, loss.c): with m the maximum of a line and s = sum exp(x - m), softmax = exp(x - m) * (1 / s) and log_softmax =
 * (x - m) - log(s); a NaN anywhere in a line makes the whole line NaN.  Sums accumulate in double;
 * float16 / bfloat16 compute in float32 and round once.  A dtype is a struct (gen_nn.py):
 *     struct D { typedef ... T, C;                          // storage, compute (float or double)
 *                static EG_HD C load(T v); static EG_HD T store(C v);
 *                static EG_HD C exponential(C v); };   // exp of the compute type
 * Deterministic: a thread takes its elements in order, a block combines its threads' partials by
 * halving in shared memory (eg_reduce_block: the same tree on every vendor); no atomics.
 */
#ifndef EG_NN_H
#define EG_NN_H

/* The combines eg_reduce_block needs: a maximum that keeps the first NaN, and a double sum. */
template <class C> struct eg_nn_max {
    typedef C acc_t;
    static EG_HD EG_INLINE C combine(C a, C b) { return a == a && (b > a || b != b) ? b : a; }
};
struct eg_nn_sum {
    typedef double acc_t;
    static EG_HD EG_INLINE double combine(double a, double b) { return a + b; }
};

/* ---- softmax ------------------------------------------------------------------------------------ */

template <class D, bool Log>
static __device__ EG_INLINE typename D::C eg_softmax_value(typename D::C v, typename D::C m, double s)
{
    typedef typename D::C C;
    return Log ? (v - m) - (C)log(s) : D::exponential(v - m) * (C)(1.0 / s);
}

/* Line `line` of the (outer, n, inner) layout, elements [lo, n) every `step`: one thread's share. */
template <class D, bool Log>
static __device__ EG_INLINE void eg_softmax_line(const eg_softmax_args &a, eg_i64 line, eg_i64 lo, eg_i64 step,
                                                 bool block)
{
    typedef typename D::C C;
    const eg_i64 o = line / a.inner, k = line - o * a.inner, base = o * a.n * a.inner + k;
    const typename D::T *x = (const typename D::T *)a.x + base;
    typename D::T *out = (typename D::T *)a.out + base;
    C m = -(C)EG_INF;
    for (eg_i64 j = lo; j < a.n; j += step) m = eg_nn_max<C>::combine(m, D::load(x[j * a.inner]));
    if (block) m = eg_reduce_block<eg_nn_max<C> >(m);   /* every thread gets the block's answer */
    double s = 0;
    for (eg_i64 j = lo; j < a.n; j += step) s += (double)D::exponential(D::load(x[j * a.inner]) - m);
    if (block) s = eg_reduce_block<eg_nn_sum>(s);
    for (eg_i64 j = lo; j < a.n; j += step)
        out[j * a.inner] = D::store(eg_softmax_value<D, Log>(D::load(x[j * a.inner]), m, s));
}

template <class D, bool Log>
static __device__ EG_INLINE void eg_softmax(const eg_softmax_args a)
{
    const eg_i64 lines = a.outer * a.inner;
    if (a.mode == EG_SOFTMAX_THREAD) {
        const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x;
        for (eg_i64 l = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; l < lines; l += threads)
            eg_softmax_line<D, Log>(a, l, 0, 1, false);
        return;
    }
    for (eg_i64 l = blockIdx.x; l < lines; l += gridDim.x) eg_softmax_line<D, Log>(a, l, threadIdx.x, blockDim.x, true);
}

#define EG_SOFTMAX_KERNELS(dtype, D)                                                                   \
    EG_KERNEL(eg_softmax_softmax_##dtype, eg_softmax_args) { eg_softmax<D, false>(args); }            \
    EG_KERNEL(eg_softmax_log_softmax_##dtype, eg_softmax_args) { eg_softmax<D, true>(args); }

/* ---- nll_loss ----------------------------------------------------------------------------------- */

template <class D>
static __device__ EG_INLINE double eg_loss_weight(const eg_loss_args &a, eg_i64 k)
{
    return a.weight ? (double)D::load(((const typename D::T *)a.weight)[k]) : 1.0;
}

static __device__ EG_INLINE bool eg_loss_bad_target(const eg_loss_args &a, eg_i64 t)
{
    return t != a.ignore_index && (t < 0 || t >= a.c);
}

/* Row i's loss: -((1 - s) w[t] lp[i, t] + s / c sum_k w[k] lp[i, k]); 0 for an ignored row. */
template <class D>
static __device__ EG_INLINE double eg_nll_row(const eg_loss_args &a, eg_i64 i)
{
    const eg_i64 t = a.target[i];
    if (t == a.ignore_index) return 0;
    if (eg_loss_bad_target(a, t)) return EG_NAN;
    const typename D::T *row = (const typename D::T *)a.x + i * a.c;
    double loss = -(1 - a.smoothing) * eg_loss_weight<D>(a, t) * (double)D::load(row[t]);
    if (a.smoothing != 0) {
        double spread = 0;
        for (eg_i64 k = 0; k < a.c; k++) spread += eg_loss_weight<D>(a, k) * (double)D::load(row[k]);
        loss -= a.smoothing / (double)a.c * spread;
    }
    return loss;
}

/* The one-block modes: the 'mean' divisor (the sum of w[t] over the rows that count) and, for
 * EG_LOSS_TOTAL, the sum of the row losses; thread 0 writes nll_loss's out (TOTAL) or the
 * gradient's scratch (DIVISOR). */
template <class D>
static __device__ EG_INLINE void eg_loss_block(const eg_loss_args &a)
{
    if (blockIdx.x != 0) return;
    const bool rows = a.mode == EG_LOSS_TOTAL;
    double divisor = 0, sum = 0;
    for (eg_i64 i = threadIdx.x; i < a.n; i += blockDim.x) {
        const eg_i64 t = a.target[i];
        if (t == a.ignore_index) continue;
        divisor += eg_loss_bad_target(a, t) ? (double)EG_NAN : eg_loss_weight<D>(a, t);
        if (rows) sum += eg_nll_row<D>(a, i);
    }
    divisor = eg_reduce_block<eg_nn_sum>(divisor);
    sum = eg_reduce_block<eg_nn_sum>(sum);
    if (threadIdx.x != 0) return;
    if (rows) *(typename D::T *)a.out = D::store((typename D::C)(a.reduction == EG_LOSS_MEAN ? sum / divisor : sum));
    else a.scratch[0] = divisor;
}

template <class D>
static __device__ EG_INLINE void eg_nll_loss(const eg_loss_args a)
{
    if (a.mode != EG_LOSS_ROWS) {
        eg_loss_block<D>(a);
        return;
    }
    const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 i = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += threads)
        ((typename D::T *)a.out)[i] = D::store((typename D::C)eg_nll_row<D>(a, i));
}

/* d loss / d lp[i, k] = -g ((1 - s) w[t] [k == t] + s / c w[k]), g the row's grad_output (divided
 * by the divisor for 'mean'); ignored rows get zeros. */
template <class D>
static __device__ EG_INLINE void eg_nll_loss_grad(const eg_loss_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    if (a.mode != EG_LOSS_ROWS) {
        eg_loss_block<D>(a);
        return;
    }
    const T *grad = (const T *)a.x;
    double scale = a.reduction == EG_LOSS_NONE ? 0.0 : (double)D::load(grad[0]);
    if (a.reduction == EG_LOSS_MEAN) scale /= a.scratch[0];
    const eg_i64 threads = (eg_i64)gridDim.x * blockDim.x, total = a.n * a.c;
    for (eg_i64 e = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += threads) {
        const eg_i64 i = e / a.c, k = e - i * a.c, t = a.target[i];
        double v = 0;
        if (eg_loss_bad_target(a, t)) {
            v = EG_NAN;
        } else if (t != a.ignore_index) {
            const double g = a.reduction == EG_LOSS_NONE ? (double)D::load(grad[i]) : scale;
            v = -g * a.smoothing / (double)a.c * eg_loss_weight<D>(a, k);
            if (k == t) v -= g * (1 - a.smoothing) * eg_loss_weight<D>(a, t);
        }
        ((T *)a.out)[e] = D::store((C)v);
    }
}

#define EG_LOSS_KERNELS(dtype, D)                                                                      \
    EG_KERNEL(eg_loss_nll_loss_##dtype, eg_loss_args) { eg_nll_loss<D>(args); }                        \
    EG_KERNEL(eg_loss_nll_loss_grad_##dtype, eg_loss_args) { eg_nll_loss_grad<D>(args); }

/* ---- dropout ------------------------------------------------------------------------------------ */

/* Element i keeps x[i] * scale when the float32 uniform u_i (eg_uniform_narrow's, over [0, 1): the
 * top 24 bits of its Philox word) is below the threshold; a thread per Philox block of 4 elements. */
template <class D>
static __device__ EG_INLINE void eg_dropout(const eg_dropout_args a)
{
    typedef typename D::C C;
    const typename D::T *x = (const typename D::T *)a.x;
    typename D::T *out = (typename D::T *)a.out;
    const C scale = D::load(D::store((C)a.scale));   /* the scale in x's dtype, as the composite's x * scale */
    const eg_i64 blocks = (a.n + 3) / 4, threads = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 j = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; j < blocks; j += threads) {
        eg_u32 w[4];
        eg_philox_block(a.seed, a.offset, (eg_u64)j, w);
        for (int k = 0; k < 4 && j * 4 + k < a.n; k++) {
            const eg_i64 i = j * 4 + k;
            const float u = (float)(w[k] >> 8) * (1.0f / 16777216.0f);
            out[i] = D::store(u < a.threshold ? D::load(x[i]) * scale : (C)0);
        }
    }
}

#define EG_DROPOUT_KERNELS(dtype, D) \
    EG_KERNEL(eg_dropout_dropout_##dtype, eg_dropout_args) { eg_dropout<D>(args); }

#endif /* EG_NN_H */

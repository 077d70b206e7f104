/*
 * eg_optim.h -- sgd_step and adam_step on one parameter (eg_update_args) or a parameter group
 * (eg_updates_args; abi.h says how to launch), bit for bit the composites of
 * ember_core/ops/optim_composites.py: the same operations in the same order, each result rounded to the dtype (float16 / bfloat16 compute in float32 and
 * round after every operation, as their composites do), the coefficients rounded to the dtype as
 * weak scalars are, no fused multiply-add (the build turns contraction off).  A thread per element;
 * eg_updates_* run a whole parameter group in one launch (the same element code over each item).
 */
#ifndef EG_OPTIM_H
#define EG_OPTIM_H

/* v rounded to the dtype D stores (a no-op for float32 and float64) */
template <class D> static __device__ EG_INLINE typename D::C eg_round(typename D::C v) { return D::load(D::store(v)); }

template <class D> static __device__ EG_INLINE typename D::C eg_coefficient(double v)
{
    return eg_round<D>((typename D::C)v);
}

static __device__ EG_INLINE float eg_sqrt(float v) { return sqrtf(v); }
static __device__ EG_INLINE double eg_sqrt(double v) { return sqrt(v); }

/* c: lr, momentum, 1 - dampening, weight_decay; one parameter's elements [first, n), every step */
template <class D>
static __device__ EG_INLINE void eg_sgd(const eg_update_args &a, eg_i64 first, eg_i64 step)
{
    typedef typename D::C C;
    typedef typename D::T T;
    T *param = (T *)a.param, *buf = (T *)a.buf0;
    const T *grad = (const T *)a.grad;
    const C lr = eg_coefficient<D>(a.c[0]), momentum = eg_coefficient<D>(a.c[1]);
    const C damp = eg_coefficient<D>(a.c[2]), decay = eg_coefficient<D>(a.c[3]);
    for (eg_i64 i = first; i < a.n; i += step) {
        const C p = D::load(param[i]);
        C g = D::load(grad[i]);
        if (a.flags & EG_UPDATE_MAXIMIZE) g = -g;
        if (a.flags & EG_UPDATE_DECAY) g = eg_round<D>(g + eg_round<D>(p * decay));
        const C m = a.flags & EG_UPDATE_FIRST_STEP ? g
                    : eg_round<D>(eg_round<D>(D::load(buf[i]) * momentum) + eg_round<D>(g * damp));
        const C direction = a.flags & EG_UPDATE_NESTEROV ? eg_round<D>(g + eg_round<D>(m * momentum)) : m;
        buf[i] = D::store(m);
        param[i] = D::store(p - eg_round<D>(direction * lr));
    }
}

/* c: beta1, 1 - beta1, beta2, 1 - beta2, 1 / sqrt(1 - beta2^step), eps, lr / (1 - beta1^step),
 * decay (weight_decay, or 1 - lr * weight_decay when decoupled) */
template <class D>
static __device__ EG_INLINE void eg_adam(const eg_update_args &a, eg_i64 first, eg_i64 step)
{
    typedef typename D::C C;
    typedef typename D::T T;
    T *param = (T *)a.param, *avg = (T *)a.buf0, *avg_sq = (T *)a.buf1;
    const T *grad = (const T *)a.grad;
    C k[8];
    for (int j = 0; j < 8; j++) k[j] = eg_coefficient<D>(a.c[j]);
    for (eg_i64 i = first; i < a.n; i += step) {
        C p = D::load(param[i]), g = D::load(grad[i]);
        if (a.flags & EG_UPDATE_MAXIMIZE) g = -g;
        if ((a.flags & EG_UPDATE_DECAY) && (a.flags & EG_UPDATE_DECOUPLED)) p = eg_round<D>(p * k[7]);
        else if (a.flags & EG_UPDATE_DECAY) g = eg_round<D>(g + eg_round<D>(p * k[7]));
        const C m = eg_round<D>(eg_round<D>(D::load(avg[i]) * k[0]) + eg_round<D>(g * k[1]));
        const C v = eg_round<D>(eg_round<D>(D::load(avg_sq[i]) * k[2]) + eg_round<D>(eg_round<D>(g * g) * k[3]));
        const C denom = eg_round<D>(eg_round<D>(eg_round<D>(eg_sqrt(v)) * k[4]) + k[5]);
        avg[i] = D::store(m);
        avg_sq[i] = D::store(v);
        param[i] = D::store(p - eg_round<D>(eg_round<D>(m / denom) * k[6]));
    }
}

/* one parameter's elements [first, n), every step: Adam's update or SGD's */
template <class D, bool Adam>
static __device__ EG_INLINE void eg_update(const eg_update_args &a, eg_i64 first, eg_i64 step)
{
    if (Adam) eg_adam<D>(a, first, step);
    else eg_sgd<D>(a, first, step);
}

template <class D, bool Adam>
static __device__ EG_INLINE void eg_update_group(const eg_updates_args g)
{
    eg_update_args a;
    for (int j = 0; j < 8; j++) a.c[j] = g.c[j];
    a.flags = g.flags;
    for (eg_i64 k = 0; k < g.count; k++) {   /* the whole grid over each parameter in turn */
        const eg_update_item item = g.items[k];
        a.param = item.param, a.grad = item.grad, a.buf0 = item.buf0, a.buf1 = item.buf1, a.n = item.n;
        eg_update<D, Adam>(a, (eg_i64)blockIdx.x * blockDim.x + threadIdx.x, (eg_i64)gridDim.x * blockDim.x);
    }
}

#define EG_OPTIM_KERNELS(dtype, D)                                                                     \
    EG_KERNEL(eg_update_sgd_##dtype, eg_update_args)                                                   \
    {                                                                                                  \
        eg_update<D, false>(args, (eg_i64)blockIdx.x * blockDim.x + threadIdx.x, (eg_i64)gridDim.x * blockDim.x); \
    }                                                                                                  \
    EG_KERNEL(eg_update_adam_##dtype, eg_update_args)                                                  \
    {                                                                                                  \
        eg_update<D, true>(args, (eg_i64)blockIdx.x * blockDim.x + threadIdx.x, (eg_i64)gridDim.x * blockDim.x); \
    }                                                                                                  \
    EG_KERNEL(eg_updates_sgd_##dtype, eg_updates_args) { eg_update_group<D, false>(args); }           \
    EG_KERNEL(eg_updates_adam_##dtype, eg_updates_args) { eg_update_group<D, true>(args); }

#endif /* EG_OPTIM_H */

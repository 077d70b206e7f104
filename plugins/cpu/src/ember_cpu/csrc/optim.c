/* Optimizer updates (ember_core/ops/optim.toml): one pass over a parameter and its state instead
 * of ~5-11 elementwise ops and their temporaries.
 *
 * The result must equal the core's composite bit for bit, so every product and sum is rounded to
 * the dtype on its own, in the composite's order: no fused multiply-add (gcc contracts a * b + c
 * by default), and the coefficients arrive as the doubles the composite computes, rounded to the
 * dtype here as its weak scalars are. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <omp.h>

#include "common.h"

/* What an update reads and writes: the parameter, its gradient, up to two state tensors, and the
 * op's coefficients (an ember_cpu_adam or ember_cpu_sgd). */
typedef struct {
    void *param;
    const void *grad;
    void *state0, *state1;
    const void *hyper;
} update_args;

/* Updates elements [first, last). */
typedef void (*update_fn)(int64_t first, int64_t last, const update_args *a);

#define DEFINE_ADAM(SUFFIX, T, SQRT)                                                               \
    static void adam_##SUFFIX(int64_t first, int64_t last, const update_args *a) {                 \
        T *restrict p = a->param, *restrict m = a->state0, *restrict v = a->state1;                \
        const T *restrict grad = a->grad;                                                          \
        const ember_cpu_adam *c = a->hyper;                                                        \
        const T beta1 = (T)c->beta1, rest1 = (T)c->one_minus_beta1, beta2 = (T)c->beta2;           \
        const T rest2 = (T)c->one_minus_beta2, bias2 = (T)c->bias2_scale, eps = (T)c->eps;         \
        const T step_size = (T)c->step_size, decay = (T)c->decay;                                  \
        const int maximize = c->maximize, mode = c->decay_mode; /* locals: the loop can vectorize */ \
        for (int64_t i = first; i < last; i++) {                                                   \
            T g = maximize ? -grad[i] : grad[i], w = p[i];                                         \
            if (mode == EMBER_CPU_DECAY_DECOUPLED) w = w * decay;                                  \
            else if (mode == EMBER_CPU_DECAY_L2) g = g + w * decay;                                \
            T mi = m[i] * beta1 + g * rest1;                                                       \
            T vi = v[i] * beta2 + (g * g) * rest2;                                                 \
            m[i] = mi;                                                                             \
            v[i] = vi;                                                                             \
            p[i] = w - mi / (SQRT(vi) * bias2 + eps) * step_size;                                  \
        }                                                                                          \
    }

DEFINE_ADAM(f32, float, sqrtf)
DEFINE_ADAM(f64, double, sqrt)

#define DEFINE_SGD(SUFFIX, T)                                                                      \
    static void sgd_##SUFFIX(int64_t first, int64_t last, const update_args *a) {                  \
        T *restrict p = a->param, *restrict buf = a->state0;                                       \
        const T *restrict grad = a->grad;                                                          \
        const ember_cpu_sgd *h = a->hyper;                                                         \
        const T lr = (T)h->lr, momentum = (T)h->momentum, rest = (T)h->one_minus_dampening;        \
        const T decay = (T)h->weight_decay;                                                        \
        const int maximize = h->maximize, decays = h->weight_decay != 0, first_step = h->first_step; \
        const int nesterov = h->nesterov; /* locals: the loop can vectorize */                     \
        for (int64_t i = first; i < last; i++) {                                                   \
            T g = maximize ? -grad[i] : grad[i], w = p[i];                                         \
            if (decays) g = g + w * decay;                                                         \
            T b = first_step ? g : buf[i] * momentum + g * rest;                                   \
            buf[i] = b;                                                                            \
            p[i] = w - (nesterov ? g + b * momentum : b) * lr;                                     \
        }                                                                                          \
    }

DEFINE_SGD(f32, float)
DEFINE_SGD(f64, double)

/* Checks the count tensors in all (param, grad, then the state: contiguous, param's dtype and
 * element count) and runs the dtype's update over the threads, a contiguous range each. */
static int run_update(const ember_tensor *const *all, int count, const void *hyper, update_fn f32, update_fn f64) {
    for (int i = 0; i < count; i++)
        if (ember_check_desc(all[i]) || !ember_is_contiguous(all[i]) || all[i]->dtype != all[0]->dtype ||
            ember_numel(all[i]) != ember_numel(all[0]))
            return EMBER_ERR_INVALID_ARGUMENT;
    update_fn update = all[0]->dtype == EMBER_FLOAT32 ? f32 : all[0]->dtype == EMBER_FLOAT64 ? f64 : NULL;
    if (!update) return EMBER_ERR_UNSUPPORTED;
    update_args a = {ember_base(all[0]), ember_base(all[1]), ember_base(all[2]),
                     count > 3 ? ember_base(all[3]) : NULL, hyper};
    int64_t n = ember_numel(all[0]);
    int threads = ember_threads_for(n, n / 4096);
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), team = omp_get_num_threads();
        update(n * t / team, n * (t + 1) / team, &a);
    }
    return EMBER_OK;
}

int ember_cpu_adam_step(const ember_tensor *param, const ember_tensor *grad, const ember_tensor *exp_avg,
                        const ember_tensor *exp_avg_sq, const ember_cpu_adam *coefficients) {
    if (!coefficients || coefficients->decay_mode < EMBER_CPU_DECAY_NONE ||
        coefficients->decay_mode > EMBER_CPU_DECAY_DECOUPLED)
        return EMBER_ERR_INVALID_ARGUMENT;
    const ember_tensor *all[4] = {param, grad, exp_avg, exp_avg_sq};
    return run_update(all, 4, coefficients, adam_f32, adam_f64);
}

int ember_cpu_sgd_step(const ember_tensor *param, const ember_tensor *grad, const ember_tensor *momentum_buffer,
                       const ember_cpu_sgd *hyper) {
    if (!hyper) return EMBER_ERR_INVALID_ARGUMENT;
    const ember_tensor *all[3] = {param, grad, momentum_buffer};
    return run_update(all, 3, hyper, sgd_f32, sgd_f64);
}

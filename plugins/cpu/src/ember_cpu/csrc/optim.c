/* Optimizer updates (ember_core/ops/optim.toml): one pass over a parameter and its state instead
 * of ~11 elementwise ops and their temporaries.
 *
 * The result must equal the core's composite bit for bit, so every product and sum is rounded to
 * the dtype on its own, in the composite's order: no fused multiply-add (gcc contracts a * b + c
 * by default), and the coefficients arrive as the doubles the composite computes, rounded to the
 * dtype here as its weak scalars are. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <omp.h>

#include "common.h"

#define DEFINE_ADAM(SUFFIX, T, SQRT)                                                               \
    static void adam_##SUFFIX(int64_t first, int64_t last, T *restrict p, const T *restrict grad,   \
                              T *restrict m, T *restrict v, const ember_cpu_adam *c) {              \
        const T beta1 = (T)c->beta1, rest1 = (T)c->one_minus_beta1, beta2 = (T)c->beta2;           \
        const T rest2 = (T)c->one_minus_beta2, bias2 = (T)c->bias2_scale, eps = (T)c->eps;         \
        const T step_size = (T)c->step_size, decay = (T)c->decay;                                  \
        for (int64_t i = first; i < last; i++) {                                                   \
            T g = c->maximize ? -grad[i] : grad[i], w = p[i];                                      \
            if (c->decay_mode == EMBER_CPU_DECAY_DECOUPLED) w = w * decay;                         \
            else if (c->decay_mode == EMBER_CPU_DECAY_L2) g = g + w * decay;                       \
            T mi = m[i] * beta1 + g * rest1;                                                       \
            T vi = v[i] * beta2 + (g * g) * rest2;                                                 \
            m[i] = mi;                                                                             \
            v[i] = vi;                                                                             \
            p[i] = w - mi / (SQRT(vi) * bias2 + eps) * step_size;                                  \
        }                                                                                          \
    }

DEFINE_ADAM(f32, float, sqrtf)
DEFINE_ADAM(f64, double, sqrt)

int ember_cpu_adam_step(const ember_tensor *param, const ember_tensor *grad, const ember_tensor *exp_avg,
                        const ember_tensor *exp_avg_sq, const ember_cpu_adam *coefficients) {
    const ember_tensor *all[4] = {param, grad, exp_avg, exp_avg_sq};
    for (int i = 0; i < 4; i++)
        if (ember_check_desc(all[i]) || !ember_is_contiguous(all[i]) || all[i]->dtype != param->dtype ||
            ember_numel(all[i]) != ember_numel(param))
            return EMBER_ERR_INVALID_ARGUMENT;
    if (!coefficients || coefficients->decay_mode < EMBER_CPU_DECAY_NONE ||
        coefficients->decay_mode > EMBER_CPU_DECAY_DECOUPLED)
        return EMBER_ERR_INVALID_ARGUMENT;
    int64_t n = ember_numel(param);
    int threads = ember_threads_for(n, n / 4096);
#define ADAM(SUFFIX, T)                                                                            \
    _Pragma("omp parallel num_threads(threads)")                                                   \
    {                                                                                              \
        int t = omp_get_thread_num(), team = omp_get_num_threads();                                \
        adam_##SUFFIX(n * t / team, n * (t + 1) / team, (T *)ember_base(param), (const T *)ember_base(grad), \
                      (T *)ember_base(exp_avg), (T *)ember_base(exp_avg_sq), coefficients);        \
    }
    switch (param->dtype) {
    case EMBER_FLOAT32: ADAM(f32, float); break;
    case EMBER_FLOAT64: ADAM(f64, double); break;
    default: return EMBER_ERR_UNSUPPORTED;
    }
#undef ADAM
    return EMBER_OK;
}

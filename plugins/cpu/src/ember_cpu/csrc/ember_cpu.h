/*
 * The C entry points of ember-cpu.  Python (ember_cpu/kernels.py) is the only caller: it builds
 * the ember_tensor descriptors from tensors the core has already validated.  Every entry point
 * still returns an ember_status instead of trusting its input blindly, so a core bug surfaces
 * as a Python exception, not a crash.
 *
 * Layout conventions (all descriptors share them, see ember.h):
 *   - shapes and strides are in elements; strides may be 0 (broadcast) or negative;
 *   - where an entry point names "the last dimension" or "trailing dimensions", the core has
 *     permuted the axes the user asked for to the end, so kernels never take an axis argument.
 */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H

#include "ember.h"
#include "ember_cpu_ops.h"   /* generated from kernels.toml: enum ember_cpu_unary_op, _binary_op */

enum ember_cpu_reduce_op { EMBER_CPU_REDUCE_SUM = 0, EMBER_CPU_REDUCE_PROD = 1, EMBER_CPU_REDUCE_MAX = 2,
                           EMBER_CPU_REDUCE_MIN = 3, EMBER_CPU_REDUCE_ANY = 4, EMBER_CPU_REDUCE_ALL = 5 };
enum ember_cpu_arg_reduce_op { EMBER_CPU_ARGMAX = 0, EMBER_CPU_ARGMIN = 1 };
enum ember_cpu_scan_op { EMBER_CPU_SCAN_SUM = 0, EMBER_CPU_SCAN_PROD = 1 };
enum ember_cpu_random_kind { EMBER_CPU_RANDOM_UNIFORM = 0, EMBER_CPU_RANDOM_NORMAL = 1,
                             EMBER_CPU_RANDOM_INTEGERS = 2 };

/* ---- memory and threads (runtime.c) ---------------------------------------------------- */
void *ember_cpu_alloc(int64_t nbytes);           /* 64-byte aligned; NULL when out of memory   */
void ember_cpu_free(void *ptr);                   /* NULL is a no-op                             */
/* stats[0] bytes in live allocations (as requested), [1] peak of [0], [2] bytes held in the reuse cache,
 * [3] live allocations.  `ember_cpu_empty_cache` returns cached blocks to the system.          */
void ember_cpu_memory_stats(int64_t *stats);
void ember_cpu_empty_cache(void);
void ember_cpu_set_num_threads(int n);
int ember_cpu_get_num_threads(void);

/* ---- elementwise (elementwise.c, generated from kernels.toml) ---------------------------- */
/* dst and src have equal shapes; converts src's dtype to dst's (numpy `astype` semantics, complex
 * to real drops the imaginary part, to bool is `!= 0`). */
int ember_cpu_copy(const ember_tensor *dst, const ember_tensor *src);
/* Writes one value into every element of dst.  The value is given in the widest forms: floating
 * and complex dtypes read (re, im); integer and bool dtypes read ival. */
int ember_cpu_fill(const ember_tensor *dst, double re, double im, int64_t ival);
/* out and x have equal shapes (the core broadcast them).  x carries the op's input dtype, out
 * the op's result dtype (kernels.toml states it per op: bool for isnan, real for abs(complex)). */
int ember_cpu_unary(int op, const ember_tensor *out, const ember_tensor *x);
int ember_cpu_binary(int op, const ember_tensor *out, const ember_tensor *a, const ember_tensor *b);
/* The same ops over n contiguous elements starting at element offsets *_off of each buffer; the
 * core calls these when every operand is contiguous with one shape: the per-op hot path.  An
 * input of the binary form may instead repeat one element (step 0: x * 2.0, x + bias scalar). */
int ember_cpu_unary_contig(int op, int dtype, int64_t n, void *out, int64_t out_off,
                           const void *x, int64_t x_off);
int ember_cpu_binary_flat(int op, int dtype, int64_t n, void *out, int64_t out_off, const void *a,
                          int64_t a_off, int a_step, const void *b, int64_t b_off, int b_step);
/* out = cond ? a : b; cond is bool; a, b and out share a dtype; all have out's shape. */
int ember_cpu_where(const ember_tensor *out, const ember_tensor *cond, const ember_tensor *a,
                    const ember_tensor *b);
/* where over n contiguous elements, each input contiguous (step 1) or one repeated element (step
 * 0: relu's backward, where(x > 0, grad, 0.0)); dtype is a's, b's and out's. */
int ember_cpu_where_flat(int dtype, int64_t n, void *out, int64_t out_off, const void *cond, int64_t cond_off,
                         int cond_step, const void *a, int64_t a_off, int a_step, const void *b, int64_t b_off,
                         int b_step);

/* ---- reductions, scans, sorting, indexing (reduce.c, sort.c, index.c) --------------------- */
/* Reduces the trailing `nreduce` dims of x: x.ndim == out.ndim + nreduce and out.shape equals
 * x's leading dims.  sum/prod: x and out share a dtype (float16/bfloat16 accumulate in float32,
 * float32 sums pairwise or blocked: accuracy comparable to numpy).  max/min propagate NaN.
 * any/all: out is bool, x any dtype.  A reduction over zero elements gives the identity
 * (the core rejects max/min over empty input before the call). */
int ember_cpu_reduce(int op, const ember_tensor *out, const ember_tensor *x, int nreduce);
/* Index (int64) of the first max/min along the last dim of x; NaN counts as the extreme (first
 * NaN wins, as numpy).  out.shape == x.shape[:-1]; x's last dim is non-empty. */
int ember_cpu_arg_reduce(int op, const ember_tensor *out, const ember_tensor *x);
/* Inclusive scan along the last dim; out and x share shape and dtype. */
int ember_cpu_scan(int op, const ember_tensor *out, const ember_tensor *x);
/* Stable sort along the last dim.  ember_cpu_sort writes sorted values (out shares x's dtype);
 * ember_cpu_argsort writes int64 indices.  Ascending: NaNs last, as numpy.  Descending: NaNs
 * first, then decreasing values; equal elements keep their input order, so sort equals
 * x[argsort] and its values equal np.flip(np.sort(x)). */
int ember_cpu_sort(const ember_tensor *out, const ember_tensor *x, int descending);
int ember_cpu_argsort(const ember_tensor *out, const ember_tensor *x, int descending);
/* Gather / scatter along the middle dim of 3-d views (outer, n, inner):
 *   take: out(outer, m, inner) = x(outer, idx[j], inner) for idx of m int64 entries;
 *   put:  dst(outer, idx[j], inner) = values(outer, j, inner) (accumulate != 0: +=, in order).
 * idx is 1-d.
 * Indices in [-n, n) wrap like Python's; anything else returns EMBER_ERR_INDEX before writing. */
int ember_cpu_take(const ember_tensor *out, const ember_tensor *x, const ember_tensor *idx);
int ember_cpu_put(const ember_tensor *dst, const ember_tensor *idx, const ember_tensor *values,
                  int accumulate);
/* Number of non-zero elements of x (any dtype, any strides). */
int ember_cpu_count_nonzero(const ember_tensor *x, int64_t *count);
/* out is int64 (count, x.ndim): the C-order coordinates of x's non-zero elements; out.shape[0]
 * must equal the count (else EMBER_ERR_INVALID_ARGUMENT). */
int ember_cpu_nonzero(const ember_tensor *out, const ember_tensor *x);
/* out(int64, shape of values) = insertion points of values into the sorted 1-d x1 (same dtype). */
int ember_cpu_searchsorted(const ember_tensor *out, const ember_tensor *x1,
                           const ember_tensor *values, int right);

/* ---- linear algebra (matmul.c) ------------------------------------------------------------ */
/* out(..., M, N) = a(..., M, K) @ b(..., K, N); the batch dims of a, b and out are equal (the
 * core broadcast them; stride 0 allowed).  Same dtype throughout.  float32/float64/complex go
 * through OpenBLAS (EMBER_ERR_UNSUPPORTED when M, N or K exceeds 2^31-1: its sizes are 32-bit);
 * other dtypes through a blocked C loop (float16/bfloat16 in float32). */
int ember_cpu_matmul(const ember_tensor *out, const ember_tensor *a, const ember_tensor *b);

/* out(M, N) = x(M, K) @ weight(N, K)^T, plus bias (N,) when not NULL, then relu when relu != 0
 * (NaN stays NaN).  float32/float64; out and bias contiguous. */
int ember_cpu_linear(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                     const ember_tensor *bias, int relu);

/* ---- convolution (conv.c) ------------------------------------------------------------------- */
/* out(N, O, OH, OW) = conv2d(x(N, C, H, W), weight(O, C, 3, 3)) at stride 1, dilation 1, zero padding
 * (pad_h, pad_w), plus bias (O,) when not NULL, then relu when relu != 0: Winograd F(2x2, 3x3),
 * outputs it makes non-finite recomputed directly.  float32/float64, every operand contiguous. */
int ember_cpu_conv2d_3x3(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, int64_t pad_h, int64_t pad_w, int relu);
/* out(N, C, H, W) = conv2d's gradient with respect to x from grad_output (N, O, H + 2 pad_h - 2,
 * W + 2 pad_w - 2) and weight (O, C, 3, 3), the conv's padding 0-2: the same kernel on the
 * transposed, flipped weight (read in place) with padding 2 - pad. */
int ember_cpu_conv2d_3x3_input_grad(const ember_tensor *out, const ember_tensor *grad_output,
                                    const ember_tensor *weight, int64_t pad_h, int64_t pad_w);

/* ---- convolution as im2col + GEMM (conv_gemm.c) ---------------------------------------------- */
/* A pooling or convolution window: kernel (kh, kw), stride, zero-or-more padding and dilation,
 * each (h, w). */
typedef struct {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} ember_cpu_window;
/* out(N, O, OH, OW) = conv2d(x(N, C, H, W), weight(O, C/groups, kh, kw)) over window w, + bias (O,
 * or NULL), then relu when relu != 0; float32/float64, all contiguous. */
int ember_cpu_conv2d_gemm(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                          const ember_tensor *bias, const ember_cpu_window *w, int64_t groups, int relu);
/* out(O, C/groups, kh, kw) = conv2d's gradient with respect to its weight, from x (N, C, H, W) and
 * grad_output (N, O, OH, OW); float32/float64, all contiguous. */
int ember_cpu_conv2d_weight_grad(const ember_tensor *out, const ember_tensor *x, const ember_tensor *grad_output,
                                 const ember_cpu_window *w, int64_t groups);

/* ---- depthwise convolution (conv_depthwise.c) ----------------------------------------------- */
/* groups == C: out(N, C*M, OH, OW) = conv2d(x(N, C, H, W), weight(C*M, 1, kh, kw)) over window w,
 * + bias (C*M, or NULL), then relu when relu != 0; float32/float64, all contiguous. */
int ember_cpu_conv2d_depthwise(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                               const ember_tensor *bias, const ember_cpu_window *w, int relu);
/* Its gradient with respect to x: out (N, C, H, W) from grad_output (N, C*M, OH, OW) and weight. */
int ember_cpu_conv2d_depthwise_input_grad(const ember_tensor *out, const ember_tensor *grad_output,
                                          const ember_tensor *weight, const ember_cpu_window *w);
/* Its gradient with respect to weight: out (C*M, 1, kh, kw) from x and grad_output. */
int ember_cpu_conv2d_depthwise_weight_grad(const ember_tensor *out, const ember_tensor *x,
                                           const ember_tensor *grad_output, const ember_cpu_window *w);

/* ---- optimizer updates (optim.c) ----------------------------------------------------------- */
#define EMBER_CPU_DECAY_NONE 0
#define EMBER_CPU_DECAY_L2 1          /* g += decay * param (Adam's weight_decay)                    */
#define EMBER_CPU_DECAY_DECOUPLED 2   /* param *= decay, decay = 1 - lr * weight_decay (AdamW)        */
/* One Adam step's coefficients, as the core's composite computes them in double precision. */
typedef struct {
    double beta1, one_minus_beta1, beta2, one_minus_beta2;
    double bias2_scale;   /* 1 / sqrt(1 - beta2^step) */
    double eps;
    double step_size;     /* lr / (1 - beta1^step) */
    double decay;         /* see decay_mode */
    int decay_mode, maximize;
} ember_cpu_adam;
/* adam_step in place (ember_core/ops/optim.toml): param, exp_avg, exp_avg_sq written; all four
 * contiguous, one dtype (float32/float64), one element count. */
int ember_cpu_adam_step(const ember_tensor *param, const ember_tensor *grad, const ember_tensor *exp_avg,
                        const ember_tensor *exp_avg_sq, const ember_cpu_adam *coefficients);
/* One step of SGD with momentum: the op's hyperparameters, one_minus_dampening = 1 - dampening
 * computed in double precision as the composite does; weight_decay 0 means none. */
typedef struct {
    double lr, momentum, one_minus_dampening, weight_decay;
    int nesterov, maximize, first_step;
} ember_cpu_sgd;
/* sgd_step in place (ember_core/ops/optim.toml): param and momentum_buffer written; all three
 * contiguous, one dtype (float32/float64), one element count. */
int ember_cpu_sgd_step(const ember_tensor *param, const ember_tensor *grad, const ember_tensor *momentum_buffer,
                       const ember_cpu_sgd *hyper);

/* ---- pooling (pool.c) ---------------------------------------------------------------------- */
/* x (N, C, H, W) -> out (N, C, OH, OW), the composites' semantics (NaN propagates, padding and
 * ceil_mode overhang never contribute); float32/float64, all contiguous. */
int ember_cpu_max_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w);
/* out like x: each window's grad_output goes to its first maximal tap. */
int ember_cpu_max_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                              const ember_cpu_window *w);
/* avg (dilation 1), PyTorch's divisors; count_include_pad != 0 counts padding in them. */
int ember_cpu_avg_pool2d(const ember_tensor *out, const ember_tensor *x, const ember_cpu_window *w,
                         int count_include_pad);
/* out (N, C, H, W): each window's grad_output / divisor added to its taps. */
int ember_cpu_avg_pool2d_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_cpu_window *w,
                              int count_include_pad);

/* ---- softmax (softmax.c) ------------------------------------------------------------------ */
/* softmax (log_out == 0) or log_softmax of x along `axis`; out and x are contiguous, of one shape
 * and one dtype, float32 or float64 (EMBER_ERR_UNSUPPORTED otherwise). */
int ember_cpu_softmax(int log_out, const ember_tensor *out, const ember_tensor *x, int axis);

/* ---- batch normalization (norm.c) ------------------------------------------------------------ */
/* x and out (N, C, S), stats (2, C) written: each channel's mean and biased variance; weight and
 * bias (C,) or NULL; out = (x - mean) / sqrt(var + eps) * weight + bias.  float32/float64, all of
 * one dtype, contiguous; N * S >= 1, eps >= 0. */
int ember_cpu_batch_norm_train(const ember_tensor *out, const ember_tensor *stats, const ember_tensor *x,
                               const ember_tensor *weight, const ember_tensor *bias, double eps);
/* out (2, C): per channel, sum of grad_output and sum of grad_output * (x - mean) / sqrt(var + eps),
 * (mean, var) = stats. */
int ember_cpu_batch_norm_backward_reduce(const ember_tensor *out, const ember_tensor *grad_output,
                                         const ember_tensor *x, const ember_tensor *stats, double eps);
/* out (N, C, S): the x-gradient of batch_norm_train from the sums above (see norm.c). */
int ember_cpu_batch_norm_input_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                                    const ember_tensor *stats, const ember_tensor *sums, const ember_tensor *weight,
                                    double eps);

/* x and out (M, D) rows, weight and bias (D,) or NULL: out = (x - mean) / sqrt(var + eps) * weight
 * + bias per row.  float32/float64, one dtype, contiguous; eps >= 0. */
int ember_cpu_layer_norm(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, double eps);
/* out (M, D): the x-gradient of layer_norm (row statistics recomputed); affine (2, D) or NULL: when
 * given, also ember_cpu_layer_norm_affine_grad's result, from the same pass over grad_output and x. */
int ember_cpu_layer_norm_input_grad(const ember_tensor *out, const ember_tensor *affine,
                                    const ember_tensor *grad_output, const ember_tensor *x, const ember_tensor *weight,
                                    double eps);
/* out (2, D): the column sums of grad_output * xhat (weight's gradient) and of grad_output (bias's). */
int ember_cpu_layer_norm_affine_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                                     double eps);
/* x and out (N, C, S), weight and bias (C,) or NULL, num_groups >= 1 dividing C: each sample's group
 * of C / num_groups channels normalized as one row, then out = xhat * weight[c] + bias[c]. */
int ember_cpu_group_norm(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                         const ember_tensor *bias, int64_t num_groups, double eps);
/* out (N, C, S): the x-gradient of group_norm (statistics recomputed); affine (2, C) or NULL: when
 * given, also ember_cpu_group_norm_affine_grad's result, from the same pass over grad_output and x. */
int ember_cpu_group_norm_input_grad(const ember_tensor *out, const ember_tensor *affine,
                                    const ember_tensor *grad_output, const ember_tensor *x, const ember_tensor *weight,
                                    int64_t num_groups, double eps);
/* out (2, C): per channel, the sums of grad_output * xhat (weight's gradient) and of grad_output (bias's). */
int ember_cpu_group_norm_affine_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *x,
                                     int64_t num_groups, double eps);

/* ---- losses (loss.c) --------------------------------------------------------------------- */
enum ember_cpu_reduction { EMBER_CPU_REDUCTION_NONE = 0, EMBER_CPU_REDUCTION_MEAN = 1, EMBER_CPU_REDUCTION_SUM = 2 };
/* nll_loss of log_probs (N, C) at int64 targets (N,), each in [0, C) or equal to ignore_index
 * (EMBER_ERR_INDEX before any write otherwise); weight (C,) or NULL; out (N,) for
 * EMBER_CPU_REDUCTION_NONE, else 0-d.  float32/float64, all contiguous. */
int ember_cpu_nll_loss(const ember_tensor *out, const ember_tensor *log_probs, const ember_tensor *target,
                       const ember_tensor *weight, int64_t ignore_index, int reduction, double smoothing);
/* Its gradient with respect to log_probs: out (N, C); grad_output has the loss's shape. */
int ember_cpu_nll_loss_grad(const ember_tensor *out, const ember_tensor *grad_output, const ember_tensor *target,
                            const ember_tensor *weight, int64_t ignore_index, int reduction, double smoothing);

/* ---- random numbers (random.c): Philox4x32-10; the stream (a cross-backend contract) is specified
 * at the top of random.c ------------------------------------------------------------------- */
/* kind: EMBER_CPU_RANDOM_UNIFORM (a=low, b=high), _NORMAL (a=mean, b=std), _INTEGERS
 * (ilow, ihigh: [ilow, ihigh)).  Fills out (contiguous) as element i of a draw starting at block
 * `offset` of the stream keyed by `seed`. */
int ember_cpu_random(int kind, const ember_tensor *out, uint64_t seed, uint64_t offset,
                     double a, double b, int64_t ilow, int64_t ihigh);

#endif /* EMBER_CPU_H */

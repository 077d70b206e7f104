/*
 * ember_xnnpack.h -- a thin C layer between ember's NCHW tensors and XNNPACK's NHWC operators
 * (the Debian 2022 create -> setup -> run API).
 *
 * Conventions, all checked by the Python side before any call:
 *   - every tensor argument is a base pointer (the ember-cpu handle) plus an element offset;
 *   - float32 only, every tensor C-contiguous;
 *   - calls are serialised by the caller (one lock): the layout workspace below is shared.
 * Every function returns 0, an xnn_status code (EXN_STATUS_OUT_OF_MEMORY also for the workspace),
 * or EXN_STATUS_SPECIAL_VALUES: an input or weight holds NaN or an infinity (XNNPACK's output
 * clamps turn NaN into -inf/+inf) or a subnormal (XNNPACK flushes them to zero), so the caller
 * must compute this call elsewhere.
 */
#ifndef EMBER_XNNPACK_H
#define EMBER_XNNPACK_H

#include <stddef.h>
#include <stdint.h>

#define EXN_STATUS_OUT_OF_MEMORY 6
#define EXN_STATUS_INVALID_PARAMETER 2
#define EXN_STATUS_UNSUPPORTED_PARAMETER 4
#define EXN_STATUS_SPECIAL_VALUES 100

/* pooling kinds */
#define EXN_MAX_POOL 0
#define EXN_AVG_POOL 1

int exn_initialize(void);
void *exn_pool_create(size_t threads);
void exn_pool_destroy(void *pool);
void exn_delete_operator(void *op);
void exn_release_workspace(void);
size_t exn_workspace_bytes(void);

/* dst[b][j][i] = src[b][i][j] for b < batch, i < rows, j < cols, on the pool (NCHW <-> NHWC).
 * With `check`, returns 0 when src holds a special value (1 otherwise, always 1 without). */
int exn_transpose(void *pool, const float *src, float *dst, size_t batch, size_t rows, size_t cols, int check);

/* weight: (out_channels, group_input_channels, kh, kw) OIHW; bias: (out_channels) or NULL. */
int exn_conv2d_create(const void *weight, int64_t weight_offset, const void *bias, int64_t bias_offset,
                      uint32_t groups, uint32_t group_input_channels, uint32_t group_output_channels,
                      uint32_t kernel_h, uint32_t kernel_w, uint32_t stride_h, uint32_t stride_w,
                      uint32_t dilation_h, uint32_t dilation_w, uint32_t pad_h, uint32_t pad_w,
                      float output_min, float output_max, void **op_out);
/* x: (n, c, h, w) -> out: (n, o, oh, ow), through the NHWC workspace; taps = kh * kw.  Every run
 * function uses the pool only for work large enough to repay waking it. */
int exn_conv2d_run(void *op, void *pool, size_t n, size_t c, size_t h, size_t w, size_t o, size_t oh, size_t ow,
                   size_t taps, size_t groups, const void *x, int64_t x_offset, void *out, int64_t out_offset);

/* The gradient of conv2d with respect to x, as an XNNPACK deconvolution of grad_output
 * (n, o, oh, ow) into out (n, c, h, w); adjust_h/w (< stride) are the rows/columns that the conv's
 * floor division dropped. */
int exn_conv2d_input_grad_create(const void *weight, int64_t weight_offset, uint32_t groups,
                                 uint32_t group_input_channels, uint32_t group_output_channels, uint32_t kernel_h,
                                 uint32_t kernel_w, uint32_t stride_h, uint32_t stride_w, uint32_t dilation_h,
                                 uint32_t dilation_w, uint32_t pad_h, uint32_t pad_w, void **op_out);
int exn_conv2d_input_grad_run(void *op, void *pool, size_t n, size_t o, size_t oh, size_t ow, size_t c, size_t h,
                              size_t w, size_t taps, size_t groups, uint32_t adjust_h, uint32_t adjust_w,
                              const void *grad_output, int64_t grad_output_offset, void *out, int64_t out_offset);

/* The gradient of conv2d (groups 1) with respect to its weight, into out (o, c, kh, kw), from x
 * (n, c, h, w) and grad_output (n, o, oh, ow): one XNNPACK convolution over the batch, on up to
 * `threads` OpenMP threads.  The padding at the bottom/right leaves out the rows/columns the
 * conv's floor division dropped. */
int exn_conv2d_weight_grad(int threads, size_t n, size_t c, size_t h, size_t w, size_t o, size_t oh, size_t ow,
                           uint32_t kh, uint32_t kw, uint32_t stride_h, uint32_t stride_w, uint32_t dilation_h,
                           uint32_t dilation_w, uint32_t pad_top, uint32_t pad_left, uint32_t pad_bottom,
                           uint32_t pad_right, const void *x, int64_t x_offset, const void *grad_output,
                           int64_t grad_output_offset, void *out, int64_t out_offset);

/* weight: (out_features, in_features); bias: (out_features) or NULL. */
int exn_linear_create(size_t in_features, size_t out_features, const void *weight, int64_t weight_offset,
                      const void *bias, int64_t bias_offset, float output_min, float output_max, void **op_out);
/* x: (rows, in_features) -> out: (rows, out_features) */
int exn_linear_run(void *op, void *pool, size_t rows, size_t in_features, size_t out_features, const void *x,
                   int64_t x_offset, void *out, int64_t out_offset);

/* pad_bottom / pad_right may exceed pad_top / pad_left (ceil-mode max pooling). */
int exn_pool2d_create(int kind, uint32_t pad_top, uint32_t pad_left, uint32_t pad_bottom, uint32_t pad_right,
                      uint32_t kernel_h, uint32_t kernel_w, uint32_t stride_h, uint32_t stride_w,
                      uint32_t dilation_h, uint32_t dilation_w, size_t channels, void **op_out);
int exn_pool2d_run(int kind, void *op, void *pool, size_t n, size_t c, size_t h, size_t w, size_t oh, size_t ow,
                   size_t taps, const void *x, int64_t x_offset, void *out, int64_t out_offset);

#endif /* EMBER_XNNPACK_H */

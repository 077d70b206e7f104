/*
 * The XNNPACK operators ember uses, wrapped so that Python makes one call to create an operator
 * (weights are packed then; the Python side caches the result) and one call per run.
 * NCHW tensors go through the NHWC workspace (layout.c); when a tensor has a single pixel or a
 * single channel both layouts are the same bytes and the transpose is skipped.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include <pthreadpool.h>
#include <xnnpack.h>

#include "layout.h"

#define F32(base, offset) ((const float *)(base) + (offset))
#define F32_OUT(base, offset) ((float *)(base) + (offset))

/* Operators yield their workers when done instead of letting them spin: ember-cpu's OpenMP team
 * runs the ops in between, and spinning pthreadpool workers would take its cores. */
#define FLAGS XNN_FLAG_YIELD_WORKERS

/* Below this many multiply-adds (about 20 us on one core) an operator runs on the calling thread:
 * waking the pool costs more than it saves. */
#define PARALLEL_MIN_WORK ((size_t)1 << 20)

static void *pool_for(void *pool, size_t work) { return work < PARALLEL_MIN_WORK ? NULL : pool; }

int exn_initialize(void) { return xnn_initialize(NULL); }

void *exn_pool_create(size_t threads) { return threads > 1 ? pthreadpool_create(threads) : NULL; }

void exn_pool_destroy(void *pool) {
    if (pool) pthreadpool_destroy((pthreadpool_t)pool);
}

/* What Python holds and caches: one XNNPACK operator, or several for a column-blocked linear. */
typedef struct {
    size_t count, block;
    xnn_operator_t ops[];
} exn_op;

static exn_op *op_alloc(size_t count, size_t block) {
    exn_op *op = calloc(1, sizeof(exn_op) + count * sizeof(xnn_operator_t));
    if (op) {
        op->count = count;
        op->block = block;
    }
    return op;
}

/* Wraps the XNNPACK operator a create function made (status 0) into op_out. */
static int wrap(enum xnn_status status, xnn_operator_t xop, void **op_out) {
    if (status != xnn_status_success) return (int)status;
    exn_op *op = op_alloc(1, 0);
    if (!op) {
        xnn_delete_operator(xop);
        return EXN_STATUS_OUT_OF_MEMORY;
    }
    op->ops[0] = xop;
    *op_out = op;
    return 0;
}

void exn_delete_operator(void *handle) {
    exn_op *op = handle;
    for (size_t i = 0; i < op->count; i++)
        if (op->ops[i]) xnn_delete_operator(op->ops[i]);
    free(op);
}

static xnn_operator_t single(void *handle) { return ((exn_op *)handle)->ops[0]; }

static int run(xnn_operator_t op, void *pool, enum xnn_status setup_status) {
    return setup_status != xnn_status_success ? (int)setup_status : (int)xnn_run_operator(op, (pthreadpool_t)pool);
}

static int weights_ordinary(const float *weight, size_t count, const float *bias, size_t bias_count) {
    return exn_all_ordinary(NULL, weight, count) && (!bias || exn_all_ordinary(NULL, bias, bias_count));
}

/* The NHWC form of an NCHW input, checked for special values (NaN, infinities, subnormals): the tensor itself when one dim of the
 * pair is 1, else a transposed copy in the workspace.  NULL with *status set otherwise. */
static const float *to_nhwc(void *pool, const float *x, size_t n, size_t c, size_t hw, int *status) {
    const float *nhwc;
    int ordinary;
    if (c == 1 || hw == 1) {
        nhwc = exn_readable_input(x, n * c * hw, EXN_WS_INPUT);
        ordinary = nhwc && exn_all_ordinary(pool, x, n * c * hw);
    } else {
        float *copy = exn_workspace(EXN_WS_INPUT, n * c * hw);
        ordinary = copy && exn_transpose(pool, x, copy, n, c, hw, 1);
        nhwc = copy;
    }
    *status = !nhwc ? EXN_STATUS_OUT_OF_MEMORY : !ordinary ? EXN_STATUS_SPECIAL_VALUES : 0;
    return *status ? NULL : nhwc;
}

static float *nhwc_output(float *out, size_t n, size_t c, size_t hw) {
    return c == 1 || hw == 1 ? out : exn_workspace(EXN_WS_OUTPUT, n * c * hw);
}

static void to_nchw(void *pool, const float *nhwc, float *out, size_t n, size_t c, size_t hw) {
    if (nhwc != out) exn_transpose(pool, nhwc, out, n, hw, c, 0);
}

/* ---- convolution and its input gradient (a deconvolution) --------------------------------------- */

int exn_conv2d_create(const void *weight, int64_t weight_offset, const void *bias, int64_t bias_offset,
                      uint32_t groups, uint32_t group_input_channels, uint32_t group_output_channels,
                      uint32_t kernel_h, uint32_t kernel_w, uint32_t stride_h, uint32_t stride_w,
                      uint32_t dilation_h, uint32_t dilation_w, uint32_t pad_h, uint32_t pad_w,
                      float output_min, float output_max, void **op_out) {
    size_t out_channels = (size_t)groups * group_output_channels;
    size_t taps = (size_t)kernel_h * kernel_w;
    const float *b = bias ? F32(bias, bias_offset) : NULL;
    if (!weights_ordinary(F32(weight, weight_offset), out_channels * group_input_channels * taps, b, out_channels))
        return EXN_STATUS_SPECIAL_VALUES;
    /* OIHW -> XNNPACK's [groups][group_output_channels][kh][kw][group_input_channels] = OHWI */
    float *ohwi = malloc(out_channels * taps * group_input_channels * sizeof(float) + 1);
    if (!ohwi) return EXN_STATUS_OUT_OF_MEMORY;
    exn_transpose(NULL, F32(weight, weight_offset), ohwi, out_channels, group_input_channels, taps, 0);
    xnn_operator_t xop = NULL;
    enum xnn_status status = xnn_create_convolution2d_nhwc_f32(
        pad_h, pad_w, pad_h, pad_w, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, groups,
        group_input_channels, group_output_channels, (size_t)groups * group_input_channels, out_channels, ohwi, b,
        output_min, output_max, FLAGS, &xop);
    free(ohwi);  /* the operator packed its own copy */
    return wrap(status, xop, op_out);
}

int exn_conv2d_run(void *handle, void *pool, size_t n, size_t c, size_t h, size_t w, size_t o, size_t oh, size_t ow,
                   size_t taps, size_t groups, const void *x, int64_t x_offset, void *out, int64_t out_offset) {
    pool = pool_for(pool, n * oh * ow * o * (c / groups) * taps);
    int status;
    const float *x_nhwc = to_nhwc(pool, F32(x, x_offset), n, c, h * w, &status);
    if (!x_nhwc) return status;
    float *y_nhwc = nhwc_output(F32_OUT(out, out_offset), n, o, oh * ow);
    if (!y_nhwc) return EXN_STATUS_OUT_OF_MEMORY;
    xnn_operator_t op = single(handle);
    status = run(op, pool, xnn_setup_convolution2d_nhwc_f32(op, n, h, w, x_nhwc, y_nhwc, (pthreadpool_t)pool));
    if (status == 0) to_nchw(pool, y_nhwc, F32_OUT(out, out_offset), n, o, oh * ow);
    return status;
}

int exn_conv2d_input_grad_create(const void *weight, int64_t weight_offset, uint32_t groups,
                                 uint32_t group_input_channels, uint32_t group_output_channels, uint32_t kernel_h,
                                 uint32_t kernel_w, uint32_t stride_h, uint32_t stride_w, uint32_t dilation_h,
                                 uint32_t dilation_w, uint32_t pad_h, uint32_t pad_w, void **op_out) {
    size_t per_group = (size_t)group_input_channels * kernel_h * kernel_w;
    size_t count = (size_t)groups * group_output_channels * per_group;
    if (!weights_ordinary(F32(weight, weight_offset), count, NULL, 0)) return EXN_STATUS_SPECIAL_VALUES;
    /* The deconvolution maps the conv's outputs back to its inputs: per group, OIHW
     * (group_output_channels, per_group) -> [group_input_channels][kh][kw][group_output_channels]. */
    float *packed = malloc(count * sizeof(float) + 1);
    if (!packed) return EXN_STATUS_OUT_OF_MEMORY;
    exn_transpose(NULL, F32(weight, weight_offset), packed, groups, group_output_channels, per_group, 0);
    xnn_operator_t xop = NULL;
    enum xnn_status status = xnn_create_deconvolution2d_nhwc_f32(
        pad_h, pad_w, pad_h, pad_w, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, groups,
        group_output_channels, group_input_channels, (size_t)groups * group_output_channels,
        (size_t)groups * group_input_channels, packed, NULL, -INFINITY, INFINITY, FLAGS, &xop);
    free(packed);
    return wrap(status, xop, op_out);
}

int exn_conv2d_input_grad_run(void *handle, void *pool, size_t n, size_t o, size_t oh, size_t ow, size_t c, size_t h,
                              size_t w, size_t taps, size_t groups, uint32_t adjust_h, uint32_t adjust_w,
                              const void *grad_output, int64_t grad_output_offset, void *out, int64_t out_offset) {
    pool = pool_for(pool, n * oh * ow * o * (c / groups) * taps);
    int status;
    const float *dy_nhwc = to_nhwc(pool, F32(grad_output, grad_output_offset), n, o, oh * ow, &status);
    if (!dy_nhwc) return status;
    float *dx_nhwc = nhwc_output(F32_OUT(out, out_offset), n, c, h * w);
    if (!dx_nhwc) return EXN_STATUS_OUT_OF_MEMORY;
    xnn_operator_t op = single(handle);
    status = run(op, pool, xnn_setup_deconvolution2d_nhwc_f32(op, n, oh, ow, adjust_h, adjust_w, dy_nhwc, dx_nhwc,
                                                              (pthreadpool_t)pool));
    if (status == 0) to_nchw(pool, dx_nhwc, F32_OUT(out, out_offset), n, c, h * w);
    return status;
}

/* ---- convolution weight gradient: a convolution over the batch ----------------------------------- */

/* Output channels per thread come in multiples of this: XNNPACK's AVX-512 GEMM tiles are 16 wide. */
#define WEIGHT_GRAD_CHANNEL_UNIT 16

/*
 * dW[o][c][ky][kx] = sum over n, oy, ox of dy[n][o][oy][ox] * xpad[n][c][ky*dh + oy*sh][kx*dw + ox*sw]
 * is itself a convolution: of C images (one per input channel of x) that have N channels (the
 * batch), by O filters of OH x OW taps (grad_output), with the conv's stride and dilation swapped.
 * In XNNPACK's layouts the images are x as (C, H, W, N), the filters dy as (O, OH, OW, N) and the
 * (C, KH, KW, O) result is dW with its first and last axes swapped: three 2-d transposes.
 *
 * The filters change every call, so operators are created, run and deleted here, and on the
 * OpenMP team that ember-cpu's kernels use rather than the pthreadpool: this op runs amid
 * ember-cpu's backward, whose idle OpenMP threads spin for a while after each kernel, and on
 * two cores a pthreadpool worker sharing a core with one ran the op 2-4x slower than one thread.
 * Each team member creates an operator for its own run of output channels (the filters are packed
 * once in all) and writes its columns of the shared result.
 */
int exn_conv2d_weight_grad(int threads, size_t n, size_t c, size_t h, size_t w, size_t o, size_t oh, size_t ow,
                           uint32_t kh, uint32_t kw, uint32_t stride_h, uint32_t stride_w, uint32_t dilation_h,
                           uint32_t dilation_w, uint32_t pad_top, uint32_t pad_left, uint32_t pad_bottom,
                           uint32_t pad_right, const void *x, int64_t x_offset, const void *grad_output,
                           int64_t grad_output_offset, void *out, int64_t out_offset) {
    size_t taps = (size_t)kh * kw, units = (o + WEIGHT_GRAD_CHANNEL_UNIT - 1) / WEIGHT_GRAD_CHANNEL_UNIT;
    /* the convolution's output must be exactly kh x kw, or XNNPACK would write past the result */
    size_t span_h = pad_top + h + pad_bottom, span_w = pad_left + w + pad_right;
    if (!n || !oh || !ow || !dilation_h || !dilation_w || span_h < stride_h * (oh - 1) + 1 ||
        span_w < stride_w * (ow - 1) + 1 || (span_h - stride_h * (oh - 1) - 1) / dilation_h + 1 != kh ||
        (span_w - stride_w * (ow - 1) - 1) / dilation_w + 1 != kw)
        return EXN_STATUS_INVALID_PARAMETER;
    if (c * taps * o * n * oh * ow < PARALLEL_MIN_WORK || threads < 1) threads = 1;
    if ((size_t)threads > units) threads = (int)units;
    int status;
    const float *images = to_nhwc(NULL, F32(x, x_offset), 1, n, c * h * w, &status);
    if (!images) return status;
    float *filters = malloc(n * o * oh * ow * sizeof(float) + 1);
    float *result = nhwc_output(F32_OUT(out, out_offset), 1, o, c * taps);
    if (!filters || !result) {
        free(filters);
        return EXN_STATUS_OUT_OF_MEMORY;
    }
    if (!exn_transpose(NULL, F32(grad_output, grad_output_offset), filters, 1, n, o * oh * ow, 1)) {
        free(filters);
        return EXN_STATUS_SPECIAL_VALUES;
    }
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), team = omp_get_num_threads();
        size_t first = units * t / team * WEIGHT_GRAD_CHANNEL_UNIT;
        size_t last = units * (t + 1) / team * WEIGHT_GRAD_CHANNEL_UNIT;
        if (last > o) last = o;
        if (first < last) {
            xnn_operator_t op = NULL;
            int mine = xnn_create_convolution2d_nhwc_f32(
                pad_top, pad_right, pad_bottom, pad_left, (uint32_t)oh, (uint32_t)ow, dilation_h, dilation_w,
                stride_h, stride_w, 1, n, last - first, n, o, filters + first * oh * ow * n, NULL, -INFINITY,
                INFINITY, FLAGS, &op);
            if (mine == xnn_status_success)
                mine = run(op, NULL, xnn_setup_convolution2d_nhwc_f32(op, c, h, w, images, result + first, NULL));
            if (op) xnn_delete_operator(op);
            if (mine) __atomic_store_n(&status, mine, __ATOMIC_RELAXED);
        }
    }
    free(filters);
    if (status == 0) to_nchw(NULL, result, F32_OUT(out, out_offset), 1, o, c * taps);
    return status;
}

/* ---- fully connected ----------------------------------------------------------------------------- */

/* XNNPACK's fully-connected operator streams all of its packed weights once per block of 7 input
 * rows; past the L2 cache that makes a large layer memory-bound (2048x2048 at 256 rows: ~63
 * GFLOP/s on one core).  Large layers are therefore split into column blocks of ~512 KiB of
 * weights, one operator each, which stay in L2 while every row passes: ~115 GFLOP/s. */
#define LINEAR_BLOCK_BYTES ((size_t)512 << 10)

static size_t linear_block(size_t in_features, size_t out_features) {
    size_t block = LINEAR_BLOCK_BYTES / (in_features * sizeof(float)) / 16 * 16;
    return block < 16 ? 16 : block >= out_features ? out_features : block;
}

int exn_linear_create(size_t in_features, size_t out_features, const void *weight, int64_t weight_offset,
                      const void *bias, int64_t bias_offset, float output_min, float output_max, void **op_out) {
    const float *w = F32(weight, weight_offset);
    const float *b = bias ? F32(bias, bias_offset) : NULL;
    if (!weights_ordinary(w, in_features * out_features, b, out_features)) return EXN_STATUS_SPECIAL_VALUES;
    size_t block = linear_block(in_features, out_features);
    exn_op *op = op_alloc((out_features + block - 1) / block, block);
    if (!op) return EXN_STATUS_OUT_OF_MEMORY;
    for (size_t i = 0; i < op->count; i++) {
        size_t start = i * block, width = out_features - start < block ? out_features - start : block;
        enum xnn_status status = xnn_create_fully_connected_nc_f32(
            in_features, width, in_features, out_features, w + start * in_features, b ? b + start : NULL,
            output_min, output_max, FLAGS, &op->ops[i]);
        if (status != xnn_status_success) {
            exn_delete_operator(op);
            return (int)status;
        }
    }
    *op_out = op;
    return 0;
}

typedef struct {
    const exn_op *op;
    size_t rows;
    const float *x;
    float *y;
    int status;
} linear_job;

/* One column block on the calling thread (the blocks are spread over the pool instead). */
static void linear_block_run(void *context, size_t i) {
    linear_job *job = context;
    xnn_operator_t block_op = job->op->ops[i];
    enum xnn_status status = xnn_setup_fully_connected_nc_f32(block_op, job->rows, job->x,
                                                              job->y + i * job->op->block, NULL);
    if (status == xnn_status_success) status = xnn_run_operator(block_op, NULL);
    if (status != xnn_status_success) __atomic_store_n(&job->status, (int)status, __ATOMIC_RELAXED);
}

int exn_linear_run(void *handle, void *pool, size_t rows, size_t in_features, size_t out_features, const void *x,
                   int64_t x_offset, void *out, int64_t out_offset) {
    exn_op *op = handle;
    pool = pool_for(pool, rows * in_features * out_features);
    if (!exn_all_ordinary(pool, F32(x, x_offset), rows * in_features)) return EXN_STATUS_SPECIAL_VALUES;
    const float *input = exn_readable_input(F32(x, x_offset), rows * in_features, EXN_WS_PAD);
    if (!input) return EXN_STATUS_OUT_OF_MEMORY;
    if (op->count == 1)
        return run(op->ops[0], pool, xnn_setup_fully_connected_nc_f32(op->ops[0], rows, input,
                                                                      F32_OUT(out, out_offset), pool));
    linear_job job = {op, rows, input, F32_OUT(out, out_offset), 0};
    pthreadpool_parallelize_1d((pthreadpool_t)pool, linear_block_run, &job, op->count, PTHREADPOOL_FLAG_YIELD_WORKERS);
    return job.status;
}

/* ---- pooling ------------------------------------------------------------------------------------ */

int exn_pool2d_create(int kind, uint32_t pad_top, uint32_t pad_left, uint32_t pad_bottom, uint32_t pad_right,
                      uint32_t kernel_h, uint32_t kernel_w, uint32_t stride_h, uint32_t stride_w,
                      uint32_t dilation_h, uint32_t dilation_w, size_t channels, void **op_out) {
    xnn_operator_t xop = NULL;
    enum xnn_status status;
    if (kind == EXN_MAX_POOL)
        status = xnn_create_max_pooling2d_nhwc_f32(pad_top, pad_right, pad_bottom, pad_left, kernel_h, kernel_w,
                                                   stride_h, stride_w, dilation_h, dilation_w, channels, channels,
                                                   channels, -INFINITY, INFINITY, FLAGS, &xop);
    else if (dilation_h != 1 || dilation_w != 1)
        return EXN_STATUS_UNSUPPORTED_PARAMETER;
    else
        status = xnn_create_average_pooling2d_nhwc_f32(pad_top, pad_right, pad_bottom, pad_left, kernel_h, kernel_w,
                                                       stride_h, stride_w, channels, channels, channels, -INFINITY,
                                                       INFINITY, FLAGS, &xop);
    return wrap(status, xop, op_out);
}

int exn_pool2d_run(int kind, void *handle, void *pool, size_t n, size_t c, size_t h, size_t w, size_t oh, size_t ow,
                   size_t taps, const void *x, int64_t x_offset, void *out, int64_t out_offset) {
    pool = pool_for(pool, n * c * oh * ow * taps);
    int status;
    const float *x_nhwc = to_nhwc(pool, F32(x, x_offset), n, c, h * w, &status);
    if (!x_nhwc) return status;
    float *y_nhwc = nhwc_output(F32_OUT(out, out_offset), n, c, oh * ow);
    if (!y_nhwc) return EXN_STATUS_OUT_OF_MEMORY;
    pthreadpool_t threads = (pthreadpool_t)pool;
    xnn_operator_t op = single(handle);
    enum xnn_status setup = kind == EXN_MAX_POOL
        ? xnn_setup_max_pooling2d_nhwc_f32(op, n, h, w, x_nhwc, y_nhwc, threads)
        : xnn_setup_average_pooling2d_nhwc_f32(op, n, h, w, x_nhwc, y_nhwc, threads);
    status = run(op, pool, setup);
    if (status == 0) to_nchw(pool, y_nhwc, F32_OUT(out, out_offset), n, c, oh * ow);
    return status;
}

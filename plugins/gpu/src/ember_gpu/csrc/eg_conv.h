/*
 * eg_conv.h -- conv2d and its two gradients (eg_conv_args; abi.h says how to launch).  Every tensor is contiguous: x (batch, channels, height, width), weight
 * (out_channels, channels / groups, kernel_h, kernel_w), grad_output and conv2d's out (batch,
 * out_channels, out_h, out_w).
 *
 * The GEMM path (ember_gpu.ops_conv) is im2col and the runtime's GEMM per group with the bias and
 * relu as the GEMM's epilogue (ember_gpu.blas); its gradients are im2col + GEMM (weight)
 * and GEMM + col2im (input).  The columns of (image n, channel c, tap (k, j)) hold out_h * out_w
 * values: row (c * kernel_h + k) * kernel_w + j of image n starts at n * col_image + row * col_row,
 * so one kernel writes both the per-image layout the forward GEMM reads (col_image = rows *
 * positions, col_row = positions) and the layout with the batch concatenated along the rows that the
 * weight gradient's GEMM reduces over in one call (col_row = batch * positions, col_image = positions).
 *
 * The direct kernels serve depthwise convolutions (groups == channels), where a GEMM per group would
 * multiply 1 x kernel_h*kernel_w matrices: a thread per output (forward, input gradient) or a block
 * per weight element (weight gradient), each summing in a fixed order in the compute type (float32
 * for float16 / bfloat16, as the GEMM accumulates), one rounding at the store.
 *
 * Semantics are the composites' (ember_core/ops/nn_composites.py): padding reads zeros (so an
 * infinite weight over padding gives NaN, as the zero-padded columns do), the conv2d result is
 * rounded to the dtype before the bias is added in the compute type and rounded again (the direct
 * kernels; the GEMM's epilogue adds the bias before its one rounding), and
 * relu is maximum(v, 0) (NaN and -0 kept).  Deterministic: no atomics; col2im gathers each input
 * element's taps in (k, j) order.  The dtype structs are eg_nn.h's.
 */
#ifndef EG_CONV_H
#define EG_CONV_H

template <class C> struct eg_conv_sum {
    typedef C acc_t;
    static EG_HD EG_INLINE C combine(C a, C b) { return a + b; }
};

/* a grid-stride loop over [0, total) */
#define EG_CONV_FOR(i, total)                                                                          \
    for (eg_i64 i = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += (eg_i64)gridDim.x * blockDim.x)

/* output channel o's already rounded value v, plus the bias, through relu, rounded again */
template <class D>
static __device__ EG_INLINE typename D::T eg_conv_finish(const eg_conv_args &a, typename D::T v, eg_i64 o)
{
    typedef typename D::C C;
    if (!a.bias && !a.relu) return v;
    C r = D::load(v);
    if (a.bias) r = r + D::load(((const typename D::T *)a.bias)[o]);
    if (a.relu && r < 0) r = 0;   /* NaN and -0 stay */
    return D::store(r);
}

/* x[n, c, h, w], or zero in the padding */
template <class D>
static __device__ EG_INLINE typename D::C eg_conv_input(const eg_conv_args &a, eg_i64 n, eg_i64 c, eg_i64 h, eg_i64 w)
{
    if (h < 0 || h >= a.height || w < 0 || w >= a.width) return (typename D::C)0;
    return D::load(((const typename D::T *)a.x)[((n * a.channels + c) * a.height + h) * a.width + w]);
}

template <class D>
static __device__ EG_INLINE void eg_conv_im2col(const eg_conv_args a)
{
    typedef typename D::T T;
    const eg_i64 positions = a.out_h * a.out_w;
    const eg_i64 total = a.batch * a.channels * a.kernel_h * a.kernel_w * positions;
    EG_CONV_FOR(i, total) {
        const eg_i64 pos = i % positions, row = i / positions;   /* row: (n, c, k, j) */
        const eg_i64 j = row % a.kernel_w, k = row / a.kernel_w % a.kernel_h;
        const eg_i64 c = row / (a.kernel_w * a.kernel_h) % a.channels, n = row / (a.kernel_w * a.kernel_h * a.channels);
        const eg_i64 oh = pos / a.out_w, ow = pos % a.out_w;
        const eg_i64 h = oh * a.stride_h - a.pad_h + k * a.dilation_h, w = ow * a.stride_w - a.pad_w + j * a.dilation_w;
        const eg_i64 at = n * a.col_image + ((c * a.kernel_h + k) * a.kernel_w + j) * a.col_row + pos;
        ((T *)a.cols)[at] = D::store(eg_conv_input<D>(a, n, c, h, w));
    }
}

/* position (h or w) of the input a tap reads: the output index it belongs to, or -1 for none */
static EG_HD EG_INLINE eg_i64 eg_conv_source(eg_i64 at, eg_i64 pad, eg_i64 tap, eg_i64 dilation, eg_i64 stride,
                                             eg_i64 size)
{
    const eg_i64 shifted = at + pad - tap * dilation;
    if (shifted < 0 || shifted % stride) return -1;
    return shifted / stride < size ? shifted / stride : -1;
}

/* input gradient from the columns: out[n, c, h, w] = the sum of its taps' column values, (k, j) in order */
template <class D>
static __device__ EG_INLINE void eg_conv_col2im(const eg_conv_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    const T *cols = (const T *)a.cols;
    const eg_i64 total = a.batch * a.channels * a.height * a.width;
    EG_CONV_FOR(i, total) {
        const eg_i64 w = i % a.width, h = i / a.width % a.height, nc = i / (a.width * a.height);
        const eg_i64 n = nc / a.channels, c = nc % a.channels;
        C acc = 0;
        for (eg_i64 k = 0; k < a.kernel_h; k++) {
            const eg_i64 oh = eg_conv_source(h, a.pad_h, k, a.dilation_h, a.stride_h, a.out_h);
            if (oh < 0) continue;
            for (eg_i64 j = 0; j < a.kernel_w; j++) {
                const eg_i64 ow = eg_conv_source(w, a.pad_w, j, a.dilation_w, a.stride_w, a.out_w);
                if (ow >= 0)
                    acc += D::load(cols[n * a.col_image + ((c * a.kernel_h + k) * a.kernel_w + j) * a.col_row +
                                        oh * a.out_w + ow]);
            }
        }
        ((T *)a.out)[i] = D::store(acc);
    }
}

/* conv2d, a thread per output: its group's channels, then the taps in row-major order */
template <class D>
static __device__ EG_INLINE void eg_conv_direct(const eg_conv_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    const eg_i64 per_group = a.channels / a.groups, outs_per_group = a.out_channels / a.groups;
    const eg_i64 total = a.batch * a.out_channels * a.out_h * a.out_w;
    EG_CONV_FOR(i, total) {
        const eg_i64 ow = i % a.out_w, oh = i / a.out_w % a.out_h, no = i / (a.out_w * a.out_h);
        const eg_i64 n = no / a.out_channels, o = no % a.out_channels, first = o / outs_per_group * per_group;
        const T *w = (const T *)a.weight + o * per_group * a.kernel_h * a.kernel_w;
        C acc = 0;
        for (eg_i64 c = 0; c < per_group; c++)
            for (eg_i64 k = 0; k < a.kernel_h; k++)
                for (eg_i64 j = 0; j < a.kernel_w; j++)
                    acc += eg_conv_input<D>(a, n, first + c, oh * a.stride_h - a.pad_h + k * a.dilation_h,
                                            ow * a.stride_w - a.pad_w + j * a.dilation_w) *
                           D::load(w[(c * a.kernel_h + k) * a.kernel_w + j]);
        ((T *)a.out)[i] = eg_conv_finish<D>(a, D::store(acc), o);
    }
}

/* conv2d_input_grad, a thread per input element: the group's filters, then the taps reaching it */
template <class D>
static __device__ EG_INLINE void eg_conv_direct_input_grad(const eg_conv_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    const eg_i64 per_group = a.channels / a.groups, outs_per_group = a.out_channels / a.groups;
    const eg_i64 taps = a.kernel_h * a.kernel_w, positions = a.out_h * a.out_w;
    const eg_i64 total = a.batch * a.channels * a.height * a.width;
    EG_CONV_FOR(i, total) {
        const eg_i64 w = i % a.width, h = i / a.width % a.height, nc = i / (a.width * a.height);
        const eg_i64 n = nc / a.channels, c = nc % a.channels, group = c / per_group;
        C acc = 0;
        for (eg_i64 m = 0; m < outs_per_group; m++) {
            const eg_i64 o = group * outs_per_group + m;
            const T *g = (const T *)a.grad_output + (n * a.out_channels + o) * positions;
            const T *f = (const T *)a.weight + (o * per_group + c - group * per_group) * taps;
            for (eg_i64 k = 0; k < a.kernel_h; k++) {
                const eg_i64 oh = eg_conv_source(h, a.pad_h, k, a.dilation_h, a.stride_h, a.out_h);
                if (oh < 0) continue;
                for (eg_i64 j = 0; j < a.kernel_w; j++) {
                    const eg_i64 ow = eg_conv_source(w, a.pad_w, j, a.dilation_w, a.stride_w, a.out_w);
                    if (ow >= 0) acc += D::load(g[oh * a.out_w + ow]) * D::load(f[k * a.kernel_w + j]);
                }
            }
        }
        ((T *)a.out)[i] = D::store(acc);
    }
}

/* conv2d_weight_grad, a block of exactly EG_BLOCK threads per weight element: thread t takes the
 * (image, position) pairs t, t + EG_BLOCK, ... in order, then the block halves its sums */
template <class D>
static __device__ EG_INLINE void eg_conv_direct_weight_grad(const eg_conv_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    const eg_i64 per_group = a.channels / a.groups, outs_per_group = a.out_channels / a.groups;
    const eg_i64 positions = a.out_h * a.out_w, count = a.batch * positions;
    const eg_i64 total = a.out_channels * per_group * a.kernel_h * a.kernel_w;
    for (eg_i64 e = blockIdx.x; e < total; e += gridDim.x) {
        const eg_i64 j = e % a.kernel_w, k = e / a.kernel_w % a.kernel_h, oc = e / (a.kernel_w * a.kernel_h);
        const eg_i64 o = oc / per_group, c = o / outs_per_group * per_group + oc % per_group;
        C acc = 0;
        for (eg_i64 t = threadIdx.x; t < count; t += blockDim.x) {
            const eg_i64 n = t / positions, pos = t % positions, oh = pos / a.out_w, ow = pos % a.out_w;
            const C g = D::load(((const T *)a.grad_output)[(n * a.out_channels + o) * positions + pos]);
            acc += g * eg_conv_input<D>(a, n, c, oh * a.stride_h - a.pad_h + k * a.dilation_h,
                                        ow * a.stride_w - a.pad_w + j * a.dilation_w);
        }
        acc = eg_reduce_block<eg_conv_sum<C> >(acc);
        if (threadIdx.x == 0) ((T *)a.out)[e] = D::store(acc);
    }
}

#define EG_CONV_KERNELS(dtype, D)                                                                      \
    EG_KERNEL(eg_conv_im2col_##dtype, eg_conv_args) { eg_conv_im2col<D>(args); }                        \
    EG_KERNEL(eg_conv_col2im_##dtype, eg_conv_args) { eg_conv_col2im<D>(args); }                        \
    EG_KERNEL(eg_conv_direct_##dtype, eg_conv_args) { eg_conv_direct<D>(args); }                        \
    EG_KERNEL(eg_conv_direct_input_grad_##dtype, eg_conv_args) { eg_conv_direct_input_grad<D>(args); }  \
    EG_KERNEL(eg_conv_direct_weight_grad_##dtype, eg_conv_args) { eg_conv_direct_weight_grad<D>(args); }

#endif /* EG_CONV_H */

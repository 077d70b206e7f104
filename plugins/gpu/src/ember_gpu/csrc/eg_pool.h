/*
 * eg_pool.h -- 2-d pooling over NCHW planes and its gradients (eg_pool_args; abi.h says how to
 * launch): max_pool2d, max_pool2d_grad, max_pool2d_select, avg_pool2d, avg_pool2d_grad,
 * adaptive_avg_pool2d.  ember-cpu's semantics (pool.c), value for value:
 *   - a window's taps are read in window order (row-major); taps outside the input are padding,
 *     -inf for max and 0 for avg (ceil_mode windows that reach past the padding likewise);
 *   - max: a tap replaces the running maximum when greater or NaN (NaN propagates);
 *   - a window's argmax (its maximum's gradient, select's pick): tap 0 whatever it holds, then the
 *     first tap strictly greater than every tap before it (a NaN never is); none when that is a
 *     padding tap (a window whose tap 0 is padding starts at -inf);
 *   - avg: the taps summed in window order from -0, plus 0 when the window holds padding (as the
 *     composite adds padding's zeros), divided by PyTorch's divisor (the window clipped to the
 *     padded input with count_include_pad, else to the input);
 *   - adaptive: the mean over PyTorch's window [floor(i H / OH), ceil((i + 1) H / OH)), summed in
 *     double (in order by a thread, or by a block halving its threads' sums: abi.h's modes).
 * Deterministic, no atomics: the gradients are gathers, a thread per input element summing the
 * shares of the windows that hold it (max: that picked it) in ember-cpu's order, rows of windows
 * in turn and, within one, avg_pool2d_grad's columns right to left (pool.c walks the taps),
 * max_pool2d_grad's left to right.  Where windows do not overlap, the one share is copied (-0
 * stays), as ember-cpu does.  The argmax is recomputed per window a gradient element reads (no
 * scratch, one launch): kernel-size times the forward's reads, which small pooling windows afford.
 * float16 / bfloat16 compute in float32 and round once at the store; the dtype structs are
 * eg_nn.h's (gen_nn.py).
 */
#ifndef EG_POOL_H
#define EG_POOL_H

/* Whether windows share input elements along some axis (then gradient shares add, else copy). */
static EG_HD EG_INLINE bool eg_pool_overlapping(const eg_pool_args &a)
{
    return a.sh < a.dh * (a.kh - 1) + 1 || a.sw < a.dw * (a.kw - 1) + 1;
}

/* PyTorch's avg_pool2d divisor along one axis for window o of an axis of n inputs. */
static EG_HD EG_INLINE eg_i64 eg_pool_span(eg_i64 o, eg_i64 n, eg_i64 k, eg_i64 s, eg_i64 p, bool include_pad)
{
    const eg_i64 start = o * s - p, end = start + k < n + p ? start + k : n + p;
    if (include_pad) return end - start;
    return (end < n ? end : n) - (start > 0 ? start : 0);
}

/* avg_pool2d's divisor of window (oy, ox). */
static EG_HD EG_INLINE eg_i64 eg_pool_divisor(const eg_pool_args &a, eg_i64 oy, eg_i64 ox)
{
    return eg_pool_span(oy, a.h, a.kh, a.sh, a.ph, a.count_include_pad) *
           eg_pool_span(ox, a.w, a.kw, a.sw, a.pw, a.count_include_pad);
}

/* The windows [*lo, *hi) along one axis (n_out of them) that may hold input index i: those with a
 * tap t in [0, k) at o * s - p + t * d == i (the caller checks that d divides the distance). */
static EG_HD EG_INLINE void eg_pool_windows(eg_i64 i, eg_i64 n_out, eg_i64 k, eg_i64 s, eg_i64 p, eg_i64 d,
                                            eg_i64 *lo, eg_i64 *hi)
{
    const eg_i64 top = i + p, reach = top - (k - 1) * d;   /* o * s lies in [reach, top] */
    *lo = reach <= 0 ? 0 : (reach + s - 1) / s;
    *hi = top / s + 1 < n_out ? top / s + 1 : n_out;
}

/* Every element (plane, y, x) of `planes` planes of height x width, a thread's share of them in a
 * grid-stride loop: body(e, plane, y, x), e the element's index. */
template <class Body>
static __device__ EG_INLINE void eg_pool_for_each(eg_i64 planes, eg_i64 height, eg_i64 width, Body body)
{
    const eg_i64 per_plane = height * width, count = planes * per_plane, step = (eg_i64)gridDim.x * blockDim.x;
    for (eg_i64 e = (eg_i64)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += step)
        body(e, e / per_plane, e % per_plane / width, e % width);
}

/* Window (oy, ox)'s taps in window order: visit(offset in the plane, tap index ky * kw + kx) for
 * each tap inside the input; whether any tap is padding. */
template <class Visit>
static __device__ EG_INLINE bool eg_pool_taps(const eg_pool_args &a, eg_i64 oy, eg_i64 ox, Visit visit)
{
    bool padded = false;
    for (eg_i64 ky = 0; ky < a.kh; ky++) {
        const eg_i64 iy = oy * a.sh - a.ph + ky * a.dh;
        if (iy < 0 || iy >= a.h) {
            padded = true;
            continue;
        }
        for (eg_i64 kx = 0; kx < a.kw; kx++) {
            const eg_i64 ix = ox * a.sw - a.pw + kx * a.dw;
            if (ix < 0 || ix >= a.w) padded = true;
            else visit(iy * a.w + ix, ky * a.kw + kx);
        }
    }
    return padded;
}

/* Window (oy, ox)'s argmax tap (ky * kw + kx) in one x plane, or -1 for none (see above); a 32-bit
 * tap keeps the gradient's loops within their registers (the op layer checks that taps fit). */
template <class D>
static __device__ EG_INLINE int eg_pool_argmax(const eg_pool_args &a, const typename D::T *plane, eg_i64 oy,
                                               eg_i64 ox)
{
    typename D::C best = -(typename D::C)EG_INF;
    int at = -1;
    eg_pool_taps(a, oy, ox, [&](eg_i64 offset, eg_i64 tap) {
        const typename D::C v = D::load(plane[offset]);
        if (tap == 0 || v > best) {
            best = v;
            at = (int)tap;
        }
    });
    return at;
}

/* ---- forward: a thread per output element ----------------------------------------------------- */

template <class D>
static __device__ EG_INLINE void eg_max_pool2d(const eg_pool_args a)
{
    eg_pool_for_each(a.planes, a.oh, a.ow, [&](eg_i64 e, eg_i64 plane, eg_i64 oy, eg_i64 ox) {
        const typename D::T *x = (const typename D::T *)a.x + plane * a.h * a.w;
        typename D::C best = -(typename D::C)EG_INF;
        eg_pool_taps(a, oy, ox, [&](eg_i64 offset, eg_i64) {
            const typename D::C v = D::load(x[offset]);
            if (v > best || v != v) best = v;   /* once NaN, nothing is greater: NaN stays */
        });
        ((typename D::T *)a.out)[e] = D::store(best);
    });
}

/* values (x-sized) read at each window's argmax of x (ref); 0 where the window has none. */
template <class D>
static __device__ EG_INLINE void eg_max_pool2d_select(const eg_pool_args a)
{
    typedef typename D::T T;
    eg_pool_for_each(a.planes, a.oh, a.ow, [&](eg_i64 e, eg_i64 plane, eg_i64 oy, eg_i64 ox) {
        const int at = eg_pool_argmax<D>(a, (const T *)a.ref + plane * a.h * a.w, oy, ox);
        typename D::C v = 0;
        if (at >= 0) {
            const eg_i64 iy = oy * a.sh - a.ph + at / a.kw * a.dh, ix = ox * a.sw - a.pw + at % a.kw * a.dw;
            v = D::load(((const T *)a.x)[plane * a.h * a.w + iy * a.w + ix]);
        }
        ((T *)a.out)[e] = D::store(v);
    });
}

template <class D>
static __device__ EG_INLINE void eg_avg_pool2d(const eg_pool_args a)
{
    typedef typename D::C C;
    eg_pool_for_each(a.planes, a.oh, a.ow, [&](eg_i64 e, eg_i64 plane, eg_i64 oy, eg_i64 ox) {
        const typename D::T *x = (const typename D::T *)a.x + plane * a.h * a.w;
        C sum = (C)-0.0;   /* the sum's identity */
        if (eg_pool_taps(a, oy, ox, [&](eg_i64 offset, eg_i64) { sum += D::load(x[offset]); }))
            sum = sum + (C)0;   /* padding's zeros: they only turn a -0 sum into +0 */
        ((typename D::T *)a.out)[e] = D::store(sum / (C)eg_pool_divisor(a, oy, ox));
    });
}

/* Adaptive window (oy, ox) of one x plane: this thread's share of its values (flattened row-major,
 * elements lo, lo + step, ...) summed in double in order, and the window's size. */
template <class D>
static __device__ EG_INLINE double eg_adaptive_sum(const eg_pool_args &a, const typename D::T *x, eg_i64 oy, eg_i64 ox,
                                                   eg_i64 lo, eg_i64 step, eg_i64 *size)
{
    const eg_i64 y0 = oy * a.h / a.oh, y1 = ((oy + 1) * a.h + a.oh - 1) / a.oh;
    const eg_i64 x0 = ox * a.w / a.ow, x1 = ((ox + 1) * a.w + a.ow - 1) / a.ow, width = x1 - x0;
    *size = (y1 - y0) * width;
    double sum = 0;
    for (eg_i64 j = lo; j < *size; j += step) sum += (double)D::load(x[(y0 + j / width) * a.w + x0 + j % width]);
    return sum;
}

/* A thread per output (EG_POOL_THREAD), or a block per output whose threads' sums are halved
 * (EG_POOL_BLOCK: windows of many values). */
template <class D>
static __device__ EG_INLINE void eg_adaptive_avg_pool2d(const eg_pool_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    eg_i64 size;
    if (a.mode == EG_POOL_THREAD) {
        eg_pool_for_each(a.planes, a.oh, a.ow, [&](eg_i64 e, eg_i64 plane, eg_i64 oy, eg_i64 ox) {
            const double sum = eg_adaptive_sum<D>(a, (const T *)a.x + plane * a.h * a.w, oy, ox, 0, 1, &size);
            ((T *)a.out)[e] = D::store((C)(sum / (double)size));
        });
        return;
    }
    const eg_i64 per_plane = a.oh * a.ow;
    for (eg_i64 e = blockIdx.x; e < a.planes * per_plane; e += gridDim.x) {
        const eg_i64 plane = e / per_plane, oy = e % per_plane / a.ow, ox = e % a.ow;
        const double part = eg_adaptive_sum<D>(a, (const T *)a.x + plane * a.h * a.w, oy, ox, threadIdx.x, blockDim.x,
                                               &size);
        const double sum = eg_reduce_block<eg_nn_sum>(part);
        if (threadIdx.x == 0) ((T *)a.out)[e] = D::store((C)(sum / (double)size));
    }
}

/* ---- gradients: a thread per input element, gathering its windows' shares --------------------- */

/* Element (iy, ix)'s windows in ember-cpu's order, rows of windows ascending and their columns
 * descending when `right_to_left`: visit(oy, ox, tap) for every window holding it, at that tap. */
template <class Visit>
static __device__ EG_INLINE void eg_pool_each_window(const eg_pool_args &a, eg_i64 iy, eg_i64 ix, bool right_to_left,
                                                     Visit visit)
{
    eg_i64 y_lo, y_hi, x_lo, x_hi;
    eg_pool_windows(iy, a.oh, a.kh, a.sh, a.ph, a.dh, &y_lo, &y_hi);
    eg_pool_windows(ix, a.ow, a.kw, a.sw, a.pw, a.dw, &x_lo, &x_hi);
    for (eg_i64 oy = y_lo; oy < y_hi; oy++) {
        const eg_i64 dy = iy + a.ph - oy * a.sh;
        if (dy % a.dh) continue;   /* between two dilated taps */
        for (eg_i64 j = x_lo; j < x_hi; j++) {
            const eg_i64 ox = right_to_left ? x_hi - 1 - (j - x_lo) : j, dx = ix + a.pw - ox * a.sw;
            if (dx % a.dw == 0) visit(oy, ox, (int)(dy / a.dh * a.kw + dx / a.dw));
        }
    }
}

/* max_pool2d_grad (Max: a.ref is x) or avg_pool2d_grad: out x-sized, a.x the grad_output.  Each
 * share is added to the element's sum or, where windows do not overlap (one share at most), taken
 * as it is. */
template <class D, bool Max>
static __device__ EG_INLINE void eg_pool2d_grad(const eg_pool_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    const bool overlapping = eg_pool_overlapping(a);
    eg_pool_for_each(a.planes, a.h, a.w, [&](eg_i64 e, eg_i64 plane, eg_i64 iy, eg_i64 ix) {
        const T *g = (const T *)a.x + plane * a.oh * a.ow;
        const T *x = Max ? (const T *)a.ref + plane * a.h * a.w : (const T *)0;
        C acc = 0;
        eg_pool_each_window(a, iy, ix, !Max, [&](eg_i64 oy, eg_i64 ox, int tap) {
            if (Max && eg_pool_argmax<D>(a, x, oy, ox) != tap) return;   /* not this window's pick */
            C share = D::load(g[oy * a.ow + ox]);
            if (!Max) share = share / (C)eg_pool_divisor(a, oy, ox);
            acc = overlapping ? acc + share : share;
        });
        ((T *)a.out)[e] = D::store(acc);
    });
}

#define EG_POOL_KERNELS(dtype, D)                                                                      \
    EG_KERNEL(eg_pool_max_pool2d_##dtype, eg_pool_args) { eg_max_pool2d<D>(args); }                    \
    EG_KERNEL(eg_pool_max_pool2d_grad_##dtype, eg_pool_args) { eg_pool2d_grad<D, true>(args); }        \
    EG_KERNEL(eg_pool_max_pool2d_select_##dtype, eg_pool_args) { eg_max_pool2d_select<D>(args); }      \
    EG_KERNEL(eg_pool_avg_pool2d_##dtype, eg_pool_args) { eg_avg_pool2d<D>(args); }                    \
    EG_KERNEL(eg_pool_avg_pool2d_grad_##dtype, eg_pool_args) { eg_pool2d_grad<D, false>(args); }       \
    EG_KERNEL(eg_pool_adaptive_avg_pool2d_##dtype, eg_pool_args) { eg_adaptive_avg_pool2d<D>(args); }

#endif /* EG_POOL_H */

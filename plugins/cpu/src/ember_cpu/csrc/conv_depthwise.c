/*
 * Depthwise conv2d -- groups == input channels, every input channel convolved with its own M
 * filters (O = C * M, weight (O, 1, kh, kw)) -- for any kernel size, stride, padding and
 * dilation, with its two gradients.
 *
 * Why: as GEMMs, each group is a (M, kh * kw) @ (kh * kw, OH * OW) product only kh * kw deep, so
 * the im2col copy is the whole cost: the core's composite took 8-12x PyTorch's time.  Here an
 * output row is a sum of kh * kw shifted input rows, each times one scalar, in vector registers.
 *
 * Per (image, channel) plane, a thread copies the zero-padded input plane into scratch split
 * into `sw` column phases: phase q holds padded columns q, q + sw, q + 2 sw, ...  The columns a
 * tap reads for consecutive outputs, ox * sw + kx * dw, are then consecutive within one phase at
 * any stride, so every tap is a unit-stride vector load, row (oy * sh + ky * dh) of phase
 * (kx * dw) % sw from column (kx * dw) / sw on.
 *   forward:     out row = bias + sum over taps of w[tap] * the tap's row;
 *   input grad:  its adjoint: the tap's row += w[tap] * grad_output row into zeroed scratch, then
 *                the padded plane's interior is read back out of the phases;
 *   weight grad: w[tap] = sum over images and rows of grad_output row . the tap's row, one thread
 *                per input channel (no two threads write one filter).
 * Rows are whole vectors: the lanes past OW read scratch that exists, and carry products that the
 * forward never stores and the gradients mask to +0 (a 0 * inf there must not become a NaN).
 *
 * The typed code is the second half of this file, included once per dtype (float, double), with
 * GCC vector types of 64 bytes as in conv.c.
 */
#ifndef DW_T

#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "common.h"
#include "ember_cpu.h"

#define VEC_BYTES 64

typedef struct {
    int64_t N, C, M, H, W, OH, OW, taps;
    ember_cpu_window w;
    int64_t vecs;   /* vectors per output row                                              */
    int64_t rows;   /* rows of the padded plane that some window reads                      */
    int64_t cols;   /* columns per phase row, whole vectors: every tap's loads stay inside  */
    int64_t lead;   /* the largest column shift of a tap within its phase                   */
} dw_geom;

/* The geometry of a depthwise conv with input (or input gradient) x, output (or output
 * gradient) y and weight (or weight gradient) `weight`, checked against each other and the
 * window; 0 when they do not fit. */
static int dw_geometry(dw_geom *g, const ember_tensor *x, const ember_tensor *y, const ember_tensor *weight,
                       const ember_cpu_window *w) {
    const ember_tensor *all[3] = {x, y, weight};
    for (int i = 0; i < 3; i++)
        if (ember_check_desc(all[i]) || all[i]->ndim != 4 || all[i]->dtype != x->dtype ||
            !ember_is_contiguous(all[i]))
            return 0;
    if (!ember_valid_window(w)) return 0;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], O = weight->shape[0];
    if (C == 0 || O % C != 0 || weight->shape[1] != 1 || weight->shape[2] != w->kh || weight->shape[3] != w->kw)
        return 0;
    int64_t span_h = w->dh * (w->kh - 1) + 1, span_w = w->dw * (w->kw - 1) + 1;
    int64_t OH = y->shape[2], OW = y->shape[3];
    if (y->shape[0] != N || y->shape[1] != O || OH < 0 || OW < 0 ||
        OH != (H + 2 * w->ph >= span_h ? (H + 2 * w->ph - span_h) / w->sh + 1 : 0) ||
        OW != (W + 2 * w->pw >= span_w ? (W + 2 * w->pw - span_w) / w->sw + 1 : 0))
        return 0;
    *g = (dw_geom){.N = N, .C = C, .M = O / C, .H = H, .W = W, .OH = OH, .OW = OW, .taps = w->kh * w->kw, .w = *w};
    int64_t lanes = VEC_BYTES / ember_itemsize[x->dtype];
    g->vecs = (OW + lanes - 1) / lanes;
    g->rows = OH > 0 ? (OH - 1) * w->sh + span_h : 0;
    g->lead = (span_w - 1) / w->sw;
    g->cols = (g->vecs * lanes + g->lead + lanes - 1) / lanes * lanes;
    return 1;
}

typedef enum { DW_FORWARD, DW_INPUT_GRAD, DW_WEIGHT_GRAD } dw_pass;

/* Where the taps read in the phased scratch: kernel column kx reads phase phase[kx] from column
 * shift[kx] on, and tap t = ky * kw + kx of output row 0 starts off[t] elements into the scratch. */
static void tap_offsets(const dw_geom *g, int64_t *off, int64_t *phase, int64_t *shift) {
    for (int64_t kx = 0; kx < g->w.kw; kx++) {
        phase[kx] = kx * g->w.dw % g->w.sw;
        shift[kx] = kx * g->w.dw / g->w.sw;
    }
    for (int64_t ky = 0; ky < g->w.kh; ky++)
        for (int64_t kx = 0; kx < g->w.kw; kx++)
            off[ky * g->w.kw + kx] = (phase[kx] * g->rows + ky * g->w.dh) * g->cols + shift[kx];
}

/* Vectors that n bytes take up. */
static int64_t vectors_for(int64_t nbytes) { return (nbytes + VEC_BYTES - 1) / VEC_BYTES; }

/* The int64 words of tap_offsets' three arrays, computed once per call and shared by the threads. */
static int64_t tap_words(const dw_geom *g) { return g->taps + 2 * g->w.kw; }

/* The int64 words of one thread's term indexes (see the scratch). */
static int64_t index_words(const dw_geom *g) { return g->taps + g->w.kh * g->w.sw + 1; }

/* Bytes of one thread's scratch, in this order: the phased plane and a row buffer of lead + cols
 * elements (of at most 8 bytes), the term indexes, a filter's taps as vectors, and `sums` vectors
 * (the weight gradient's accumulators). */
static int64_t dw_scratch_bytes(const dw_geom *g, int64_t sums) {
    return (vectors_for(g->w.sw * g->rows * g->cols * 8) + vectors_for((g->lead + g->cols) * 8) +
            vectors_for(index_words(g) * 8) + g->taps + sums) * VEC_BYTES;
}

#define DW_T float
#define DW_NAME(name) name##_f32
#define DW_INT int32_t
#include "conv_depthwise.c"
#undef DW_T
#undef DW_NAME
#undef DW_INT

#define DW_T double
#define DW_NAME(name) name##_f64
#define DW_INT int64_t
#include "conv_depthwise.c"
#undef DW_T
#undef DW_NAME
#undef DW_INT

/* Checks x (the input side), y (the output side), weight, the window and bias (forward only: one
 * per output channel, or NULL), then runs the pass's tasks over the threads, each with its
 * scratch block after the shared tap offsets: forward and input grad take one (image, input
 * channel) plane per task, the weight grad one input channel over all images.  dst, src and other
 * are as dw_task takes them. */
static int depthwise(dw_pass pass, const ember_tensor *x, const ember_tensor *y, const ember_tensor *weight,
                     const ember_cpu_window *w, const ember_tensor *dst, const ember_tensor *src,
                     const ember_tensor *other, const ember_tensor *bias, int relu) {
    dw_geom g;
    if (!dw_geometry(&g, x, y, weight, w) ||
        (bias && (ember_check_desc(bias) || bias->ndim != 1 || bias->shape[0] != g.C * g.M ||
                  bias->dtype != x->dtype || !ember_is_contiguous(bias))))
        return EMBER_ERR_INVALID_ARGUMENT;
    if (x->dtype != EMBER_FLOAT32 && x->dtype != EMBER_FLOAT64) return EMBER_ERR_UNSUPPORTED;
    if (ember_numel(dst) == 0) return EMBER_OK;
    int64_t tasks = pass == DW_WEIGHT_GRAD ? g.C : g.N * g.C;
    int64_t per_thread = dw_scratch_bytes(&g, pass == DW_WEIGHT_GRAD ? g.M * g.taps : 0);
    int nthreads = ember_threads_for(g.N * g.C * g.M * g.OH * g.OW * g.taps, tasks);
    int64_t shared = vectors_for(tap_words(&g) * 8) * VEC_BYTES;
    char *scratch = ember_cpu_alloc(shared + nthreads * per_thread);
    if (!scratch) return EMBER_ERR_OUT_OF_MEMORY;
    int64_t *off = (int64_t *)scratch;
    tap_offsets(&g, off, off + g.taps, off + g.taps + g.w.kw);
    const void *b = bias ? ember_base(bias) : NULL;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t task = 0; task < tasks; task++) {
        char *mine = scratch + shared + omp_get_thread_num() * per_thread;
        if (x->dtype == EMBER_FLOAT32)
            dw_task_f32(pass, &g, task, off, mine, ember_base(dst), ember_base(src), ember_base(other), b, relu);
        else
            dw_task_f64(pass, &g, task, off, mine, ember_base(dst), ember_base(src), ember_base(other), b, relu);
    }
    ember_cpu_free(scratch);
    return EMBER_OK;
}

int ember_cpu_conv2d_depthwise(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                               const ember_tensor *bias, const ember_cpu_window *w, int relu) {
    return depthwise(DW_FORWARD, x, out, weight, w, out, x, weight, bias, relu != 0);
}

int ember_cpu_conv2d_depthwise_input_grad(const ember_tensor *out, const ember_tensor *grad_output,
                                          const ember_tensor *weight, const ember_cpu_window *w) {
    return depthwise(DW_INPUT_GRAD, out, grad_output, weight, w, out, grad_output, weight, NULL, 0);
}

int ember_cpu_conv2d_depthwise_weight_grad(const ember_tensor *out, const ember_tensor *x,
                                           const ember_tensor *grad_output, const ember_cpu_window *w) {
    return depthwise(DW_WEIGHT_GRAD, x, grad_output, out, w, out, x, grad_output, NULL, 0);
}

#else /* ---- the typed part: DW_T is float or double, DW_NAME(f) names f for it ------------------ */

#define T DW_T
#define VEC DW_NAME(vec)
#define IVEC DW_NAME(ivec)
#define LANES ((int64_t)(VEC_BYTES / sizeof(T)))

typedef T VEC __attribute__((vector_size(VEC_BYTES)));
typedef DW_INT IVEC __attribute__((vector_size(VEC_BYTES)));

static inline VEC DW_NAME(load)(const T *p) {
    VEC v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void DW_NAME(store)(T *p, VEC v) { memcpy(p, &v, sizeof v); }

/* x with the lanes past the row's end (lane >= valid) set to +0, whatever they held. */
static inline VEC DW_NAME(keep)(VEC x, int64_t valid) {
    IVEC lane;
    for (int64_t i = 0; i < LANES; i++) lane[i] = (DW_INT)i;
    return (VEC)((IVEC)x & (lane < (DW_INT)valid));
}

/* The scratch of one thread, carved out of its block (dw_scratch_bytes). */
typedef struct {
    const int64_t *off, *phase, *shift;   /* taps, kw, kw: tap_offsets, shared by the threads     */
    T *plane;                             /* sw phases x rows x cols                              */
    T *row;                               /* lead + cols: an output or gradient row               */
    int64_t *rel;                         /* taps: where each term's row starts, from a base      */
    int64_t *first;                       /* kh * sw + 1: the scatter's terms of (ky, phase)      */
    VEC *terms;                           /* taps: a filter's weights, broadcast, in that order   */
    VEC *sums;                            /* the weight gradient's M x taps accumulators          */
} DW_NAME(scratch);

static DW_NAME(scratch) DW_NAME(carve)(const dw_geom *g, const int64_t *off, char *block) {
    DW_NAME(scratch) s;
    s.off = off;
    s.phase = off + g->taps;
    s.shift = s.phase + g->w.kw;
    s.plane = (T *)block;
    s.row = (T *)(block + vectors_for(g->w.sw * g->rows * g->cols * 8) * VEC_BYTES);
    s.rel = (int64_t *)((char *)s.row + vectors_for((g->lead + g->cols) * 8) * VEC_BYTES);
    s.first = s.rel + g->taps;
    s.terms = (VEC *)((char *)s.rel + vectors_for(index_words(g) * 8) * VEC_BYTES);
    s.sums = s.terms + g->taps;
    return s;
}

/* Input plane x (H, W), zero-padded, into the sw column phases of `plane`. */
static void DW_NAME(fill_phases)(const dw_geom *g, T *restrict plane, const T *restrict x) {
    memset(plane, 0, (size_t)(g->w.sw * g->rows * g->cols) * sizeof(T));
    int64_t r0 = g->w.ph, r1 = ember_min64(g->rows, g->w.ph + g->H);   /* rows holding input */
    for (int64_t q = 0; q < g->w.sw; q++) {
        ember_run run = ember_inside_run(g->cols, g->W, q - g->w.pw, g->w.sw);
        for (int64_t r = r0; r < r1; r++) {
            T *dst = plane + (q * g->rows + r) * g->cols;
            const T *src = x + (r - g->w.ph) * g->W + q - g->w.pw;
            if (g->w.sw == 1)
                memcpy(dst + run.first, src + run.first, (size_t)(run.last - run.first) * sizeof(T));
            else
                for (int64_t j = run.first; j < run.last; j++) dst[j] = src[j * g->w.sw];
        }
    }
}

/* The inverse of fill_phases for the padded plane's interior: dx (H, W) from `plane`; columns
 * and rows no window reaches are 0.  Phases outermost: each one's run of columns is computed
 * once, not once per row (its divisions cost more than a short row's copy). */
static void DW_NAME(read_phases)(const dw_geom *g, T *restrict dx, const T *restrict plane) {
    int64_t rows = ember_max64(0, ember_min64(g->H, g->rows - g->w.ph));   /* rows some window reaches */
    int64_t reached = ember_max64(0, ember_min64(g->W, g->cols * g->w.sw - g->w.pw));   /* columns */
    for (int64_t q = 0; q < g->w.sw; q++) {
        ember_run run = ember_inside_run(g->cols, g->W, q - g->w.pw, g->w.sw);
        for (int64_t iy = 0; iy < rows; iy++) {
            T *dst = dx + iy * g->W;
            const T *src = plane + (q * g->rows + iy + g->w.ph) * g->cols;
            if (g->w.sw == 1)
                memcpy(dst + run.first - g->w.pw, src + run.first, (size_t)(run.last - run.first) * sizeof(T));
            else
                for (int64_t j = run.first; j < run.last; j++) dst[q + j * g->w.sw - g->w.pw] = src[j];
        }
    }
    if (reached < g->W)
        for (int64_t iy = 0; iy < rows; iy++) memset(dx + iy * g->W + reached, 0, (size_t)(g->W - reached) * sizeof(T));
    memset(dx + rows * g->W, 0, (size_t)((g->H - rows) * g->W) * sizeof(T));
}

/* Vector v of the sum over k < count of terms[k] * (the row at base + rel[k]): the inner loop of
 * the forward pass and of the input gradient. */
static inline VEC DW_NAME(sum_terms)(const T *base, int64_t v, int64_t count, const VEC *restrict terms,
                                     const int64_t *restrict rel) {
    VEC even = (VEC){0}, odd = (VEC){0};   /* two chains of dependent adds, not one */
    int64_t k = 0;
    for (; k + 1 < count; k += 2) {
        even += terms[k] * DW_NAME(load)(base + rel[k] + v * LANES);
        odd += terms[k + 1] * DW_NAME(load)(base + rel[k + 1] + v * LANES);
    }
    if (k < count) even += terms[k] * DW_NAME(load)(base + rel[k] + v * LANES);
    return even + odd;
}

/* x where x > 0 or x is NaN, else +0 (relu as the core computes it), lane by lane. */
static inline VEC DW_NAME(relu)(VEC x) { return (VEC)((IVEC)x & ((IVEC)(x > 0) | (IVEC)(x != x))); }

/* out planes (M, OH, OW) of one (image, channel) from its phased input plane.  Rows are stored
 * a whole vector at a time straight into out, the lanes past OW landing on the next row (stored
 * after them); the rows whose last vector would leave the plane go through the row buffer. */
static void DW_NAME(forward)(const dw_geom *g, const DW_NAME(scratch) *s, T *out, const T *filters, const T *bias,
                             int relu) {
    int64_t direct_rows = g->OH - ((g->vecs * LANES - g->OW) + g->OW - 1) / g->OW;   /* oy*OW + vecs*LANES <= OH*OW */
    for (int64_t i = 0; i < g->M; i++) {
        for (int64_t t = 0; t < g->taps; t++) s->terms[t] = (VEC){0} + filters[i * g->taps + t];
        VEC start = (VEC){0} + (bias ? bias[i] : 0);
        for (int64_t oy = 0; oy < g->OH; oy++) {
            const T *base = s->plane + oy * g->w.sh * g->cols;
            T *dst = out + (i * g->OH + oy) * g->OW, *row = oy < direct_rows ? dst : s->row;
            for (int64_t v = 0; v < g->vecs; v++) {
                VEC y = start + DW_NAME(sum_terms)(base, v, g->taps, s->terms, s->off);
                DW_NAME(store)(row + v * LANES, relu ? DW_NAME(relu)(y) : y);
            }
            if (row != dst) memcpy(dst, row, (size_t)g->OW * sizeof(T));
        }
    }
}

/* grad_output planes (M, OH, OW) of one (image, channel) scattered into the zeroed phased plane:
 * each tap's row gets w[tap] * the grad_output row.  The taps of one kernel row that land in one
 * phase are summed in registers and the phase row is updated once, a whole vector at a time:
 * updating it tap by tap re-read vectors that the previous tap had just stored one element off,
 * which store forwarding cannot serve.  Those sums read the grad_output row shifted, zeros past
 * its ends (the row buffer, zeroed once), whose products are exact zeros for finite weights; a
 * filter holding an inf or a NaN takes the plain loop instead, whose taps touch only the outputs
 * they reach. */
static void DW_NAME(scatter)(const dw_geom *g, const DW_NAME(scratch) *s, const T *grad, const T *filters) {
    memset(s->row, 0, (size_t)(g->lead + g->cols) * sizeof(T));
    for (int64_t i = 0; i < g->M; i++) {
        const T *filter = filters + i * g->taps;
        int finite = 1;
        for (int64_t t = 0; t < g->taps; t++) finite &= filter[t] - filter[t] == 0;
        int64_t count = 0;   /* the terms, grouped by (ky, phase) */
        for (int64_t ky = 0; ky < g->w.kh; ky++)
            for (int64_t q = 0; q < g->w.sw; q++) {
                s->first[ky * g->w.sw + q] = count;
                for (int64_t kx = 0; kx < g->w.kw; kx++)
                    if (s->phase[kx] == q) {
                        s->terms[count] = (VEC){0} + filter[ky * g->w.kw + kx];
                        s->rel[count++] = g->lead - s->shift[kx];
                    }
            }
        s->first[g->w.kh * g->w.sw] = count;
        int64_t reach = (g->OW + g->lead + LANES - 1) / LANES;   /* vectors of a phase row that terms reach */
        for (int64_t oy = 0; oy < g->OH; oy++) {
            const T *src = grad + (i * g->OH + oy) * g->OW;
            T *base = s->plane + oy * g->w.sh * g->cols;
            if (!finite) {
                for (int64_t t = 0; t < g->taps; t++)
                    for (int64_t ox = 0; ox < g->OW; ox++) base[s->off[t] + ox] += filter[t] * src[ox];
                continue;
            }
            memcpy(s->row + g->lead, src, (size_t)g->OW * sizeof(T));
            for (int64_t ky = 0; ky < g->w.kh; ky++)
                for (int64_t q = 0; q < g->w.sw; q++) {
                    T *dst = base + (q * g->rows + ky * g->w.dh) * g->cols;
                    int64_t k0 = s->first[ky * g->w.sw + q], n = s->first[ky * g->w.sw + q + 1] - k0;
                    for (int64_t v = 0; v < reach; v++)
                        DW_NAME(store)(dst + v * LANES, DW_NAME(load)(dst + v * LANES) +
                                       DW_NAME(sum_terms)(s->row, v, n, s->terms + k0, s->rel + k0));
                }
        }
    }
}

/* sums[i * taps + t] += grad_output row . the tap's row, over one image's M planes of one channel. */
static void DW_NAME(correlate)(const dw_geom *g, const DW_NAME(scratch) *s, const T *grad) {
    if (g->vecs == 0) return;
    int64_t tail = g->OW - (g->vecs - 1) * LANES;
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t oy = 0; oy < g->OH; oy++) {
            memcpy(s->row, grad + (i * g->OH + oy) * g->OW, (size_t)g->OW * sizeof(T));
            const T *base = s->plane + oy * g->w.sh * g->cols;
            for (int64_t t = 0; t < g->taps; t++) {
                const T *src = base + s->off[t];
                VEC acc = s->sums[i * g->taps + t];
                for (int64_t v = 0; v < g->vecs - 1; v++)
                    acc += DW_NAME(load)(s->row + v * LANES) * DW_NAME(load)(src + v * LANES);
                int64_t v = g->vecs - 1;
                acc += DW_NAME(keep)(DW_NAME(load)(s->row + v * LANES) * DW_NAME(load)(src + v * LANES), tail);
                s->sums[i * g->taps + t] = acc;
            }
        }
}

/* Task `task` of a pass: a plane (image n, channel c) for forward and input grad, a channel over
 * all images for the weight grad.  off: tap_offsets' arrays; block: the thread's scratch.  dst,
 * src, other: out, x, weight (forward); dx, grad_output, weight (input grad); dweight, x,
 * grad_output (weight grad). */
static void DW_NAME(dw_task)(dw_pass pass, const dw_geom *g, int64_t task, const int64_t *off, char *block,
                             void *dst, const void *src, const void *other, const void *bias, int relu) {
    DW_NAME(scratch) s = DW_NAME(carve)(g, off, block);
    int64_t in_plane = g->H * g->W, out_planes = g->M * g->OH * g->OW, filters = g->M * g->taps;
    if (pass == DW_FORWARD) {
        int64_t c = task % g->C;
        DW_NAME(fill_phases)(g, s.plane, (const T *)src + task * in_plane);
        DW_NAME(forward)(g, &s, (T *)dst + task * out_planes, (const T *)other + c * filters,
                         bias ? (const T *)bias + c * g->M : NULL, relu);
    } else if (pass == DW_INPUT_GRAD) {
        memset(s.plane, 0, (size_t)(g->w.sw * g->rows * g->cols) * sizeof(T));
        DW_NAME(scatter)(g, &s, (const T *)src + task * out_planes, (const T *)other + task % g->C * filters);
        DW_NAME(read_phases)(g, (T *)dst + task * in_plane, s.plane);
    } else {
        int64_t c = task;
        for (int64_t k = 0; k < filters; k++) s.sums[k] = (VEC){0};
        for (int64_t n = 0; n < g->N; n++) {
            DW_NAME(fill_phases)(g, s.plane, (const T *)src + (n * g->C + c) * in_plane);
            DW_NAME(correlate)(g, &s, (const T *)other + (n * g->C + c) * out_planes);
        }
        T *dw = (T *)dst + c * filters;
        for (int64_t k = 0; k < filters; k++) {
            double total = 0;
            for (int64_t lane = 0; lane < LANES; lane++) total += s.sums[k][lane];
            dw[k] = (T)total;
        }
    }
}

#undef T
#undef VEC
#undef IVEC
#undef LANES

#endif

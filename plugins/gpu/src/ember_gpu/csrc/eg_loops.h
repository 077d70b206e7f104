/*
 * eg_loops.h -- the elementwise loops every generated kernel instantiates.  An op is a struct
 * (generated from the op table):
 *     struct Op { typedef ... out_t, in0_t, in1_t, in2_t;   // storage types (unused inputs: eg_u8)
 *                 enum { arity = 1, 2 or 3 };
 *                 static EG_HD out_t apply(in0_t, ...); };  // storage in, storage out
 * so the loops move stored elements and never see compute types.  I is the unsigned index type
 * (eg_u32 or eg_u64), S the signed offset type of the strided loop (eg_i32 or eg_i64); abi.h
 * states when the 32-bit forms may be launched.
 */
#ifndef EG_LOOPS_H
#define EG_LOOPS_H

/* A kernel: extern "C", one by-value args parameter, launch bound EG_BLOCK.  In host mode it is a
 * plain function, and <name>_host(const Args *, grid, block) runs it over an emulated grid. */
#if defined(EG_HOST)
#define EG_KERNEL(name, Args)                                                                        \
    extern "C" void name(const Args args);                                                           \
    extern "C" void name##_host(const Args *args, eg_u32 grid, eg_u32 block)                         \
    {                                                                                                \
        eg_host_launch(grid, block, [args]() { name(*args); });                                      \
    }                                                                                                \
    extern "C" void name(const Args args)
#else
#define EG_KERNEL(name, Args) extern "C" __global__ void EG_LAUNCH_BOUNDS(EG_BLOCK) name(const Args args)
#endif

/* V elements moved as one aligned load or store */
template <class T, int V> struct alignas(sizeof(T) * V) eg_vec { T v[V]; };

template <class T, int V> static EG_HD EG_INLINE bool eg_aligned(const void *p)
{
    return ((eg_size)p & (sizeof(T) * V - 1)) == 0;
}

template <class T> static EG_HD EG_INLINE constexpr int eg_max_size(int a) { return (int)sizeof(T) > a ? (int)sizeof(T) : a; }

/* Elements per vector: 16 bytes of the widest operand. */
template <class Op> static EG_HD EG_INLINE constexpr int eg_vec_len()
{
    int widest = eg_max_size<typename Op::in0_t>((int)sizeof(typename Op::out_t));
    if (Op::arity > 1) widest = eg_max_size<typename Op::in1_t>(widest);
    if (Op::arity > 2) widest = eg_max_size<typename Op::in2_t>(widest);
    return widest >= 16 ? 1 : 16 / widest;
}

template <class Op>
static EG_HD EG_INLINE typename Op::out_t eg_call(typename Op::in0_t a, typename Op::in1_t b, typename Op::in2_t c)
{
    if constexpr (Op::arity == 1) return Op::apply(a);
    else if constexpr (Op::arity == 2) return Op::apply(a, b);
    else return Op::apply(a, b, c);
}

/* Input k's vector v: its V elements, or its one element V times. */
template <int V, class T>
static __device__ EG_INLINE eg_vec<T, V> eg_fetch(const T *p, bool scalar, eg_u64 v)
{
    if (!scalar) return ((const eg_vec<T, V> *)p)[v];
    eg_vec<T, V> r;
EG_UNROLL
    for (int k = 0; k < V; k++) r.v[k] = p[0];
    return r;
}

template <class Op, class I>
static __device__ EG_INLINE void eg_flat(const eg_flat_args a)
{
    typedef typename Op::out_t O;
    typedef typename Op::in0_t A;
    typedef typename Op::in1_t B;
    typedef typename Op::in2_t C;
    constexpr int N = Op::arity, V = eg_vec_len<Op>();
    O *EG_RESTRICT out = (O *)a.out;
    const A *pa = (const A *)a.in[0];
    const B *pb = (const B *)a.in[1];
    const C *pc = (const C *)a.in[2];
    const bool sa = (a.scalar_inputs & 1u) != 0, sb = (a.scalar_inputs & 2u) != 0, sc = (a.scalar_inputs & 4u) != 0;
    const I n = (I)a.n, first = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x, step = (I)gridDim.x * (I)blockDim.x;
    I tail = 0;
    if (V > 1 && eg_aligned<O, V>(out) && (sa || eg_aligned<A, V>(pa)) && (N < 2 || sb || eg_aligned<B, V>(pb)) &&
        (N < 3 || sc || eg_aligned<C, V>(pc))) {
        const I nv = n / V;
        for (I v = first; v < nv; v += step) {
            eg_vec<A, V> va = eg_fetch<V>(pa, sa, v);
            eg_vec<B, V> vb = {};
            eg_vec<C, V> vc = {};
            if constexpr (N > 1) vb = eg_fetch<V>(pb, sb, v);
            if constexpr (N > 2) vc = eg_fetch<V>(pc, sc, v);
            eg_vec<O, V> vo;
EG_UNROLL
            for (int k = 0; k < V; k++) vo.v[k] = eg_call<Op>(va.v[k], vb.v[k], vc.v[k]);
            ((eg_vec<O, V> *)out)[v] = vo;
        }
        tail = nv * V;
    }
    for (I i = tail + first; i < n; i += step) {
        B b = {};
        C c = {};
        if constexpr (N > 1) b = pb[sb ? 0 : i];
        if constexpr (N > 2) c = pc[sc ? 0 : i];
        out[i] = eg_call<Op>(pa[sa ? 0 : i], b, c);
    }
}

template <class Op, class I, class S>
static __device__ EG_INLINE void eg_strided(const eg_strided_args a)
{
    typedef typename Op::out_t O;
    typedef typename Op::in0_t A;
    typedef typename Op::in1_t B;
    typedef typename Op::in2_t C;
    constexpr int N = Op::arity;
    O *out = (O *)a.out;
    const A *pa = (const A *)a.in[0];
    const B *pb = (const B *)a.in[1];
    const C *pc = (const C *)a.in[2];
    const int nd = a.layout.ndim;
    const I n = (I)a.n, first = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x, step = (I)gridDim.x * (I)blockDim.x;
    for (I i = first; i < n; i += step) {
        I rest = i;
        S off[N + 1] = {};
EG_UNROLL
        for (int d = EG_MAX_DIMS - 1; d > 0; d--) {
            if (d < nd) {   /* the innermost dims first; dim 0 takes what is left, undivided */
                const I size = (I)a.layout.shape[d], q = rest / size, idx = rest - q * size;
                rest = q;
EG_UNROLL
                for (int k = 0; k <= N; k++) off[k] += (S)idx * (S)a.layout.strides[k][d];
            }
        }
EG_UNROLL
        for (int k = 0; k <= N; k++) off[k] += (S)rest * (S)a.layout.strides[k][0];
        B b = {};
        C c = {};
        if constexpr (N > 1) b = pb[off[2]];
        if constexpr (N > 2) c = pc[off[3]];
        out[off[0]] = eg_call<Op>(pa[off[1]], b, c);
    }
}

/* The four elementwise kernels of one op: <name>_flat32, _flat64, _strided32, _strided64. */
#define EG_ELEMENTWISE_KERNELS(name, Op)                                                             \
    EG_KERNEL(name##_flat32, eg_flat_args) { eg_flat<Op, eg_u32>(args); }                            \
    EG_KERNEL(name##_flat64, eg_flat_args) { eg_flat<Op, eg_u64>(args); }                            \
    EG_KERNEL(name##_strided32, eg_strided_args) { eg_strided<Op, eg_u32, eg_i32>(args); }           \
    EG_KERNEL(name##_strided64, eg_strided_args) { eg_strided<Op, eg_u64, eg_i64>(args); }

/* ---- fill ----------------------------------------------------------------------------------------- */

template <class T, class I>
static __device__ EG_INLINE void eg_fill(const eg_fill_args a)
{
    constexpr int V = sizeof(T) >= 16 ? 1 : 16 / (int)sizeof(T);
    union {
        eg_u64 words[2];
        T value;
    } u;
    u.words[0] = a.value[0];
    u.words[1] = a.value[1];
    T *EG_RESTRICT out = (T *)a.out;
    const I n = (I)a.n, first = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x, step = (I)gridDim.x * (I)blockDim.x;
    I tail = 0;
    if (V > 1 && eg_aligned<T, V>(out)) {
        eg_vec<T, V> vo;
EG_UNROLL
        for (int k = 0; k < V; k++) vo.v[k] = u.value;
        const I nv = n / V;
        for (I v = first; v < nv; v += step) ((eg_vec<T, V> *)out)[v] = vo;
        tail = nv * V;
    }
    for (I i = tail + first; i < n; i += step) out[i] = u.value;
}

#define EG_FILL_KERNELS(name, T)                                                                     \
    EG_KERNEL(name##_flat32, eg_fill_args) { eg_fill<T, eg_u32>(args); }                             \
    EG_KERNEL(name##_flat64, eg_fill_args) { eg_fill<T, eg_u64>(args); }

#endif /* EG_LOOPS_H */

/*
 * abi.h -- the ABI between ember_gpu's op layer (Python, which packs kernel arguments) and the
 * generated kernels (csrc/gen/*.cu, built by ember_gpu.build).  Vendor-neutral: CUDA and HIP
 * kernels take exactly these structs.
 *
 * The block between EG_CDEF_BEGIN and EG_CDEF_END is also valid cffi cdef text (builtin C types
 * only, integer #defines only): ember_gpu reads it from this file, so Python packs exactly what the
 * kernels read (tests/test_kernels_abi.py checks sizes and offsets against g++'s).
 *
 * ---- Kernel names -------------------------------------------------------------------------------
 *   eg_unary_<op>_<dtype>_<variant>         every unary op of ember_core/ops/elementwise.toml, and
 *                                            relu, gelu, silu (nn.toml); out has the registry's
 *                                            result dtype (same, bool or real)
 *   eg_binary_<op>_<dtype>_<variant>        every binary op; both inputs have <dtype>
 *   eg_copy_<src>_to_<dst>_<variant>        copy / astype: every pair except complex -> int, uint,
 *                                            float (the core refuses those: check_cast)
 *   eg_where_<dtype>_<variant>              out = cond ? x1 : x2; cond is bool, x1 and x2 <dtype>
 *   eg_fill_<dtype>_<flat variant>          full
 *   eg_random_<kind>_<dtype>_<flat variant> kind: uniform (real floating), normal (real floating),
 *                                            integers (bool, ints, uint8)
 * <dtype> is the Array API name (bool, int8, ..., complex128: never an underscore), <op> the
 * registry's name.  Which op x dtype pairs exist is the registry's `dtypes` for the op; the
 * build's kernels.json lists every kernel and the image (one per source) that holds it.
 *
 * ---- Variants -----------------------------------------------------------------------------------
 *   flat32, flat64        every operand contiguous with out's shape, pointers already offset to
 *                         the first element; an input may instead be ONE element read for every
 *                         output (eg_flat_args.scalar_inputs).  Grid-stride loop; 16-byte vector
 *                         loads and stores where every vector operand is 16-byte aligned.
 *                         Parameter: eg_flat_args (fill: eg_fill_args, random: eg_random_args).
 *   strided32, strided64  any strides (element units, 0 for broadcast, negative for flipped views)
 *                         over a layout of at most EG_MAX_DIMS dims.  Parameter: eg_strided_args.
 * The 32-bit forms index with unsigned 32-bit integers; launch them only when
 *   n <= EG_INDEX32_MAX, and (strided) every operand's extent sum_d (shape[d] - 1) * |stride[d]|
 *   <= EG_INDEX32_MAX, and gridDim.x * blockDim.x <= 2**31.
 * The 64-bit forms take any n < 2**62.
 *
 * ---- Launch ---------------------------------------------------------------------------------------
 *   Every kernel has exactly one parameter, its args struct, passed by value: the argument buffer
 *   of a launch is the struct's bytes (cuLaunchKernel's `extra` with that buffer and its size).
 *   Block: 1-d, EG_BLOCK threads (the kernels are compiled with that launch bound; fewer is
 *   allowed, more is not).  Grid: 1-d, any size >= 1 (grid-stride loops).  n == 0: do not launch.
 *   The op layer merges dims first (ember_core.views.coalesce); a layout with more than
 *   EG_MAX_DIMS non-mergeable dims is split along its first dim into several launches, each with
 *   its pointers advanced (as ember-cpu splits at EMBER_MAX_NDIM).
 *
 * ---- Element types --------------------------------------------------------------------------------
 *   dtype codes are ember.h's (EG_BOOL = EMBER_BOOL, ...).  Storage: bool one byte 0/1 (kernels
 *   read any non-zero byte as true), integers two's complement, float16 IEEE binary16, bfloat16
 *   the top half of a binary32, complex64/128 (real, imag) pairs of float/double.
 */
#ifndef EG_ABI_H
#define EG_ABI_H

/* EG_CDEF_BEGIN */
#define EG_ABI_VERSION 1
#define EG_MAX_DIMS 8
#define EG_MAX_INPUTS 3
#define EG_MAX_OPERANDS 4
#define EG_BLOCK 256
#define EG_INDEX32_MAX 2147483647

#define EG_BOOL 0
#define EG_INT8 1
#define EG_INT16 2
#define EG_INT32 3
#define EG_INT64 4
#define EG_UINT8 5
#define EG_FLOAT16 6
#define EG_BFLOAT16 7
#define EG_FLOAT32 8
#define EG_FLOAT64 9
#define EG_COMPLEX64 10
#define EG_COMPLEX128 11

/* A broadcast layout shared by every operand: element (i_0 .. i_{ndim-1}) of operand k (0 = out,
 * 1 + j = input j) lives at ptr_k + sum_d i_d * strides[k][d] elements.  Dims in C order
 * (dim 0 outermost); entries past ndim are ignored. */
typedef struct {
    long long shape[8];                /* EG_MAX_DIMS */
    long long strides[4][8];           /* [EG_MAX_OPERANDS][EG_MAX_DIMS], in elements */
    int ndim;                          /* 1 .. EG_MAX_DIMS (a 0-d op is a 1-d op of one element) */
    int reserved;
} eg_layout;

/* unary, binary, copy, where (flat).  in[j] unused past the family's arity (unary and copy 1,
 * binary 2, where 3: cond, x1, x2). */
typedef struct {
    void *out;
    const void *in[3];                 /* EG_MAX_INPUTS */
    long long n;                       /* elements of out */
    unsigned int scalar_inputs;        /* bit j set: input j is one element, read for every i */
    unsigned int reserved;
} eg_flat_args;

/* unary, binary, copy, where (strided) */
typedef struct {
    void *out;
    const void *in[3];
    long long n;                       /* the product of layout.shape */
    eg_layout layout;
} eg_strided_args;

/* fill (full): value holds one element in the out dtype's storage form (its bytes, little
 * endian, zero padded), e.g. numpy.array(v, dtype).tobytes(). */
typedef struct {
    void *out;
    long long n;
    unsigned long long value[2];
} eg_fill_args;

/* random_uniform (a = low, b = high), random_normal (a = mean, b = std), random_integers
 * ([ilow, ihigh), ihigh > ilow; bool draws [0, 2)).  out is contiguous; element i is a pure
 * function of (seed, offset, i) as plugins/cpu/src/ember_cpu/csrc/random.c specifies, so any
 * grid gives the same bits.  The op layer advances the generator by
 * ember_core.random.blocks_for(kind, itemsize, n). */
typedef struct {
    void *out;
    long long n;
    unsigned long long seed;
    unsigned long long offset;
    double a;
    double b;
    long long ilow;
    long long ihigh;
} eg_random_args;
/* EG_CDEF_END */

/* The cdef block spells array lengths as literals (cffi does not expand macros there). */
typedef char eg_check_dims[sizeof(((eg_layout *)0)->shape) == EG_MAX_DIMS * 8 ? 1 : -1];
typedef char eg_check_operands[sizeof(((eg_layout *)0)->strides) == EG_MAX_OPERANDS * EG_MAX_DIMS * 8 ? 1 : -1];
typedef char eg_check_inputs[sizeof(((eg_flat_args *)0)->in) == EG_MAX_INPUTS * sizeof(void *) ? 1 : -1];

#endif /* EG_ABI_H */

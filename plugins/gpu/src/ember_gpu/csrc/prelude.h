/*
 * prelude.h -- what every ember_gpu kernel source is compiled with (-include prelude.h): the
 * kernel sources themselves include nothing.  Three modes, one set of sources:
 *
 *   CUDA (nvcc)   __CUDACC__: the CUDA headers nvcc includes implicitly supply the math functions;
 *   HIP (hipcc)   __HIPCC__: the build adds -include hip/hip_runtime.h before this file;
 *   host (g++)    EG_HOST defined: __global__ / __device__ / __host__ are defined away, blockIdx,
 *                 threadIdx, blockDim, gridDim are thread-locals that eg_host.h's launcher sets
 *                 while it runs a kernel over an emulated grid (CI's only way to run kernel code).
 *
 * Vendor differences live here and nowhere else: warp size and shuffles (EG_WARP_SIZE,
 * EG_SHFL_DOWN, EG_SHFL_XOR), launch bounds, inlining, and the half-precision conversion
 * instructions (eg_half.h).  Beside this file, and included from it only: eg_half.h (float16 /
 * bfloat16 storage types), eg_complex.h (complex64 / complex128 and their functions),
 * eg_loops.h (the elementwise loops), eg_random.h (Philox), eg_reduce.h (reductions), eg_scan.h
 * (scans), eg_sort.h (sort, searchsorted), eg_index.h
 * (take, index_put, the integer matmul), eg_nn.h (softmax, nll_loss), eg_norm.h (layer_norm,
 * group_norm), eg_optim.h (sgd_step, adam_step), eg_gemm.h (the tiled GEMM), eg_conv.h (conv2d's
 * columns, depthwise kernels, linear's store), eg_host.h (the host launcher).
 */
#ifndef EG_PRELUDE_H
#define EG_PRELUDE_H

#if defined(EG_HOST)
#include <math.h>
#include <string.h>
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define EG_WARP_SIZE 32
#define EG_INLINE inline
#define EG_NOINLINE __attribute__((noinline))
#define EG_LAUNCH_BOUNDS(n)
#define EG_UNROLL
#define EG_RESTRICT __restrict__
#elif defined(__HIPCC__)
#define EG_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE   /* 64 on CDNA (MI100..MI300), 32 on RDNA */
#define EG_SHFL_DOWN(v, delta) __shfl_down((v), (delta))
#define EG_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define EG_SYNC_THREADS() __syncthreads()
#define EG_INLINE __forceinline__
#define EG_NOINLINE __noinline__
#define EG_LAUNCH_BOUNDS(n) __launch_bounds__(n)
#define EG_UNROLL _Pragma("unroll")
#define EG_RESTRICT __restrict__
#elif defined(__CUDACC__)
#define EG_WARP_SIZE 32
#define EG_SHFL_DOWN(v, delta) __shfl_down_sync(0xffffffffu, (v), (delta))
#define EG_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define EG_SYNC_THREADS() __syncthreads()
#define EG_INLINE __forceinline__
#define EG_NOINLINE __noinline__
#define EG_LAUNCH_BOUNDS(n) __launch_bounds__(n)
#define EG_UNROLL _Pragma("unroll")
#define EG_RESTRICT __restrict__
#else
#error "ember_gpu kernels compile with nvcc, hipcc, or a host C++ compiler with EG_HOST defined"
#endif

/* a function the kernels and the host both compile */
#define EG_ALIGN(n) alignas(n)
#define EG_HD __host__ __device__

/* Fixed-width integers without <stdint.h> (NVRTC / hipRTC have no system headers). */
typedef signed char eg_i8;
typedef short eg_i16;
typedef int eg_i32;
typedef long long eg_i64;
typedef unsigned char eg_u8;
typedef unsigned short eg_u16;
typedef unsigned int eg_u32;
typedef unsigned long long eg_u64;
typedef __SIZE_TYPE__ eg_size;

#define EG_INT8_MIN (-128)
#define EG_INT8_MAX 127
#define EG_INT16_MIN (-32768)
#define EG_INT16_MAX 32767
#define EG_INT32_MIN (-2147483647 - 1)
#define EG_INT32_MAX 2147483647
#define EG_INT64_MIN (-9223372036854775807LL - 1)
#define EG_INT64_MAX 9223372036854775807LL
#define EG_UINT8_MAX 255

#define EG_INF __builtin_huge_val()
#define EG_INFF __builtin_huge_valf()
#define EG_NAN __builtin_nan("")
#define EG_NANF __builtin_nanf("")

#include "abi.h"

#if defined(EG_HOST)
#include "eg_host.h"
#endif

template <class A, class B> struct eg_same { static constexpr bool value = false; };
template <class A> struct eg_same<A, A> { static constexpr bool value = true; };

/* The bits of a float / double and back. */
#if defined(__CUDA_ARCH__)
static __device__ EG_INLINE eg_u32 eg_f32_bits(float f) { return __float_as_uint(f); }
static __device__ EG_INLINE float eg_f32_from_bits(eg_u32 u) { return __uint_as_float(u); }
static __device__ EG_INLINE eg_u64 eg_f64_bits(double d) { return (eg_u64)__double_as_longlong(d); }
static __device__ EG_INLINE double eg_f64_from_bits(eg_u64 u) { return __longlong_as_double((long long)u); }
#else
static EG_HD EG_INLINE eg_u32 eg_f32_bits(float f) { return __builtin_bit_cast(eg_u32, f); }
static EG_HD EG_INLINE float eg_f32_from_bits(eg_u32 u) { return __builtin_bit_cast(float, u); }
static EG_HD EG_INLINE eg_u64 eg_f64_bits(double d) { return __builtin_bit_cast(eg_u64, d); }
static EG_HD EG_INLINE double eg_f64_from_bits(eg_u64 u) { return __builtin_bit_cast(double, u); }
#endif

/* Classification without the C library's macros (which differ between the three modes). */
static EG_HD EG_INLINE bool eg_isnan(float x) { return x != x; }
static EG_HD EG_INLINE bool eg_isnan(double x) { return x != x; }
static EG_HD EG_INLINE bool eg_isinf(float x) { return fabsf(x) == EG_INFF; }
static EG_HD EG_INLINE bool eg_isinf(double x) { return fabs(x) == EG_INF; }
static EG_HD EG_INLINE bool eg_isfinite(float x) { return fabsf(x) < EG_INFF; }
static EG_HD EG_INLINE bool eg_isfinite(double x) { return fabs(x) < EG_INF; }
static EG_HD EG_INLINE bool eg_signbit(float x) { return (eg_f32_bits(x) >> 31) != 0; }
static EG_HD EG_INLINE bool eg_signbit(double x) { return (eg_f64_bits(x) >> 63) != 0; }

#include "eg_half.h"
#include "eg_complex.h"
#include "eg_loops.h"
#include "eg_random.h"
#include "eg_reduce.h"
#include "eg_scan.h"
#include "eg_sort.h"
#include "eg_index.h"
#include "eg_nn.h"
#include "eg_norm.h"
#include "eg_optim.h"
#include "eg_conv.h"
#include "eg_gemm.h"
#include "eg_pool.h"

#endif /* EG_PRELUDE_H */

/*
 * ember.h -- the native half of the contract between ember_core and a backend plugin.
 *
 * The core validates every shape, stride, dtype and index in Python before it calls native
 * code; kernels receive only descriptors the core built.  A plugin reports the ABI it was
 * compiled against (EMBER_ABI_MAJOR / EMBER_ABI_MINOR below, read from its compiled module)
 * before any of its native functions is called; the core refuses a plugin built for another
 * major version or for a newer minor version than its own.
 *
 * Rules for evolving this header:
 *   - adding a field at the end of a struct, a dtype code or a status code: bump MINOR;
 *   - anything else (reordering, removing, changing a type): bump MAJOR.
 * Structs start with `struct_size` so that code built against an older minor can tell which
 * fields exist.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stdint.h>

#define EMBER_ABI_MAJOR 1
#define EMBER_ABI_MINOR 0

/* Most dimensions a descriptor carries.  The core merges adjacent dimensions that are
 * contiguous in every operand before it builds descriptors, so this bounds the number of
 * dimensions that remain non-mergeable, not the rank a user may create. */
#define EMBER_MAX_NDIM 16

/* dtype codes: stable numbers, never reordered (they cross the ABI).  A copy kernel converting
 * between them defines what C leaves undefined: real floating -> integer truncates toward zero,
 * NaN gives 0, +-inf and values beyond the range give the integer type's min / max (compare
 * before converting: (double)INT64_MAX rounds up to 2**63); integer -> narrower integer wraps. */
typedef enum {
    EMBER_BOOL = 0,
    EMBER_INT8 = 1,
    EMBER_INT16 = 2,
    EMBER_INT32 = 3,
    EMBER_INT64 = 4,
    EMBER_UINT8 = 5,
    EMBER_FLOAT16 = 6,
    EMBER_BFLOAT16 = 7,
    EMBER_FLOAT32 = 8,
    EMBER_FLOAT64 = 9,
    EMBER_COMPLEX64 = 10,
    EMBER_COMPLEX128 = 11,
    EMBER_NUM_DTYPES = 12
} ember_dtype;

/* status codes returned by every native entry point. */
typedef enum {
    EMBER_OK = 0,
    EMBER_ERR_INVALID_ARGUMENT = 1, /* a descriptor the kernel cannot accept (a core bug)   */
    EMBER_ERR_OUT_OF_MEMORY = 2,
    EMBER_ERR_UNSUPPORTED = 3,      /* op x dtype not compiled into this kernel library     */
    EMBER_ERR_INDEX = 4,            /* an index outside its dimension (defence in depth)    */
    EMBER_ERR_DEVICE = 5,           /* the device or driver failed                          */
    EMBER_ERR_INTERNAL = 6
} ember_status;

/*
 * A strided view of a buffer.  Element (i_0, ..., i_{ndim-1}) lives at
 *     (char *)data + (offset + sum_k i_k * strides[k]) * itemsize(dtype)
 * Strides and offset are in elements, may be zero (broadcast) or negative (flipped views).
 * `data` is the start of the allocation the backend's allocator returned.
 */
typedef struct {
    uint32_t struct_size;   /* sizeof(ember_tensor) as the core compiled it */
    int32_t dtype;          /* an ember_dtype                               */
    int32_t ndim;           /* 0 .. EMBER_MAX_NDIM                          */
    int32_t reserved;
    void *data;
    int64_t offset;
    int64_t shape[EMBER_MAX_NDIM];
    int64_t strides[EMBER_MAX_NDIM];
} ember_tensor;

/*
 * Direct entries (optional): flat elementwise functions a provider may export for the core's
 * compiled hot path (ember_core/hotpath.py), which calls them without Python for contiguous
 * operands of one dtype.  `op` is the provider's own code for the op, `dtype` an ember_dtype of
 * the inputs, `n` the element count; data pointers are allocation starts and offsets are in
 * elements.  A binary operand's step is 1 (contiguous) or 0 (one element repeated).  The
 * output is contiguous and freshly allocated.  They return 0 or a nonzero status (the core then
 * runs the provider's Python kernel, which reports the error).
 */
typedef int (*ember_unary_flat_fn)(int op, int dtype, int64_t n, void *out, int64_t out_offset, const void *x,
                                   int64_t x_offset);
typedef int (*ember_binary_flat_fn)(int op, int dtype, int64_t n, void *out, int64_t out_offset, const void *a,
                                    int64_t a_offset, int a_step, const void *b, int64_t b_offset, int b_step);

#endif /* EMBER_H */

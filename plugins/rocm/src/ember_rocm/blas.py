"""ROCm's BLAS libraries as ember_gpu BLAS tables, tried in this order when the first float matmul runs:
hipBLAS, then rocBLAS; with neither, float matmul runs on ember's own tiled GEMM kernel
(``ember_gpu.blas``).

hipBLAS: ``hipblasGemmStridedBatchedEx`` with the ``hipblasDatatype_t`` enums, which libhipblas.so.0
(ROCm 5 before 5.7), .so.1 (5.7) and .so.2 (6.0-6.2 at least) all export under that name (hipBLAS 2's
``HIPBLAS_V2`` API, hipDataType and hipblasComputeType_t, is the separate ``..._v2`` symbol).  rocBLAS:
``rocblas_gemm_strided_batched_ex`` of librocblas.so.0 (ROCm 5 before 5.7), .so.3 (5.7) and .so.4
(6.x), whose result d is ember's c.  Signatures and values read from hipblas.h, rocblas-types.h and
rocblas-functions.h of ROCm 5.2 and 6.2 (the same in both; the sonames from 5.2 to 6.2).  Both take
int sizes (ember_gpu.blas gives larger GEMMs to its own kernel); neither is given a workspace, so each
manages its own device memory.
"""

from __future__ import annotations

from ember_gpu.vendor import BlasVendor, ErrorInfo

_BUG = "a bug in ember-rocm's matmul: please report it with the shapes, strides and dtypes"
_OWN = "or do nothing: float matmul then runs on ember's own GEMM kernel"
# hipblasDatatype_t and rocblas_datatype share their values: R_16F 150, R_32F 151, R_64F 152, C_32F 154,
# C_64F 155, R_16B 168.  Complex products compute in the complex type of their precision.
_DATA_TYPES = {"float16": 150, "bfloat16": 168, "float32": 151, "float64": 152, "complex64": 154, "complex128": 155}
_COMPUTE_TYPES = {"float32": 151, "float64": 152, "complex64": 154, "complex128": 155}
_OPERATIONS = {"n": 111, "t": 112}  # HIPBLAS_OP_N / _T, rocblas_operation_none / _transpose


def _table(product: str, libraries: tuple[str, ...], symbols: dict[str, str], default_algo: int,
           errors: dict[int, ErrorInfo], out_of_memory: int) -> BlasVendor:
    """A ROCm BLAS: what hipBLAS and rocBLAS share (the enums, no wheel, no workspace, no math mode set:
    rocblas_set_math_mode and hipblasSetMathMode arrived with ROCm 6), its calling convention its name's."""
    return BlasVendor(
        product=product, libraries=libraries, wheel_dirs=(), companions=(),
        install_hint=f"install {product} from AMD's ROCm packages (https://rocm.docs.amd.com: apt-get install "
                     f"{product.lower()}), {_OWN}",
        symbols=symbols, data_types=_DATA_TYPES, compute_types=_COMPUTE_TYPES, operations=_OPERATIONS,
        default_math=0, default_algo=default_algo, workspace_bytes=0, errors=errors, out_of_memory=out_of_memory,
        api=product.lower())


HIPBLAS = _table(
    "hipBLAS",
    ("libhipblas.so.2", "libhipblas.so.1", "libhipblas.so.0"),  # never libhipblas.so: a dev symlink
    {"create": "hipblasCreate", "destroy": "hipblasDestroy", "set_stream": "hipblasSetStream",
     "gemm_strided_batched": "hipblasGemmStridedBatchedEx", "status_string": "hipblasStatusToString"},
    160,  # HIPBLAS_GEMM_DEFAULT
    {
        1: ErrorInfo("HIPBLAS_STATUS_NOT_INITIALIZED", "hipBLAS could not initialise: check that rocminfo lists "
                                                       "the GPU"),
        2: ErrorInfo("HIPBLAS_STATUS_ALLOC_FAILED", "hipBLAS could not allocate memory"),
        3: ErrorInfo("HIPBLAS_STATUS_INVALID_VALUE", f"an argument was out of range ({_BUG})"),
        4: ErrorInfo("HIPBLAS_STATUS_MAPPING_ERROR", "hipBLAS could not access GPU memory"),
        5: ErrorInfo("HIPBLAS_STATUS_EXECUTION_FAILED", "a hipBLAS kernel failed to run; rerun with "
                                                        "EMBER_LAUNCH_BLOCKING=1 and check dmesg"),
        6: ErrorInfo("HIPBLAS_STATUS_INTERNAL_ERROR", "hipBLAS failed internally (often a failed HIP call on a lost "
                                                      "device): restart the process"),
        7: ErrorInfo("HIPBLAS_STATUS_NOT_SUPPORTED", f"hipBLAS does not support this combination ({_BUG})"),
        8: ErrorInfo("HIPBLAS_STATUS_ARCH_MISMATCH", "this GPU lacks a feature the call needs"),
        10: ErrorInfo("HIPBLAS_STATUS_INVALID_ENUM", f"hipBLAS rejected an enum value ({_BUG})"),
    },
    2,
)

ROCBLAS = _table(
    "rocBLAS",
    ("librocblas.so.4", "librocblas.so.3", "librocblas.so.0"),  # never librocblas.so: a dev symlink
    {"create": "rocblas_create_handle", "destroy": "rocblas_destroy_handle", "set_stream": "rocblas_set_stream",
     "gemm_strided_batched": "rocblas_gemm_strided_batched_ex", "status_string": "rocblas_status_to_string"},
    0,  # rocblas_gemm_algo_standard
    {
        1: ErrorInfo("rocblas_status_invalid_handle", f"a stale rocBLAS handle ({_BUG})"),
        2: ErrorInfo("rocblas_status_not_implemented", f"rocBLAS does not support this combination ({_BUG})"),
        3: ErrorInfo("rocblas_status_invalid_pointer", f"a null pointer reached rocBLAS ({_BUG})"),
        4: ErrorInfo("rocblas_status_invalid_size", f"a size or leading dimension was out of range ({_BUG})"),
        5: ErrorInfo("rocblas_status_memory_error", "rocBLAS could not allocate memory"),
        6: ErrorInfo("rocblas_status_internal_error", "rocBLAS failed internally (often a failed HIP call on a lost "
                                                      "device, or no kernels for this GPU in the installed rocBLAS): "
                                                      "restart the process"),
        11: ErrorInfo("rocblas_status_invalid_value", f"an argument was out of range ({_BUG})"),
    },
    5,
)

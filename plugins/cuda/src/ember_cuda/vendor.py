"""CUDA, as ember_gpu's vendor table: the driver library, the symbols (the versioned ``_v2`` ones
where cuda.h maps a name to one), the launch markers, enums, error meanings and requirements."""

from __future__ import annotations

from ember_gpu.vendor import BlasVendor, ErrorInfo, LaunchMarkers, RtcVendor, Vendor

DRIVER = "the NVIDIA driver R580 or newer (CUDA 13)"
DRIVER_HINT = ("install or update it from https://www.nvidia.com/drivers or your distribution's packages "
               "(e.g. apt-get install nvidia-driver), then check that nvidia-smi lists the GPU")

SYMBOLS = {
    "init": "cuInit",
    "driver_get_version": "cuDriverGetVersion",
    "device_get_count": "cuDeviceGetCount",
    "device_get": "cuDeviceGet",
    "device_get_name": "cuDeviceGetName",
    "device_get_attribute": "cuDeviceGetAttribute",
    "device_total_mem": "cuDeviceTotalMem_v2",
    "primary_ctx_retain": "cuDevicePrimaryCtxRetain",
    "primary_ctx_release": "cuDevicePrimaryCtxRelease_v2",
    "ctx_set_current": "cuCtxSetCurrent",
    "mem_get_info": "cuMemGetInfo_v2",
    "stream_create": "cuStreamCreate",
    "stream_destroy": "cuStreamDestroy_v2",
    "stream_synchronize": "cuStreamSynchronize",
    "stream_wait_event": "cuStreamWaitEvent",
    "event_create": "cuEventCreate",
    "event_record": "cuEventRecord",
    "event_synchronize": "cuEventSynchronize",
    "event_elapsed_time": "cuEventElapsedTime_v2",
    "event_destroy": "cuEventDestroy_v2",
    "device_get_default_mem_pool": "cuDeviceGetDefaultMemPool",
    "mem_pool_set_attribute": "cuMemPoolSetAttribute",
    "mem_pool_get_attribute": "cuMemPoolGetAttribute",
    "mem_pool_trim_to": "cuMemPoolTrimTo",
    "mem_alloc_async": "cuMemAllocAsync",
    "mem_free_async": "cuMemFreeAsync",
    "mem_host_alloc": "cuMemHostAlloc",
    "mem_free_host": "cuMemFreeHost",
    "memcpy_htod_async": "cuMemcpyHtoDAsync_v2",
    "memcpy_dtoh_async": "cuMemcpyDtoHAsync_v2",
    "memcpy_dtod_async": "cuMemcpyDtoDAsync_v2",
    "memcpy_peer_async": "cuMemcpyPeerAsync",
    "memset_d8_async": "cuMemsetD8Async",
    "module_load_data": "cuModuleLoadData",
    "module_unload": "cuModuleUnload",
    "module_get_function": "cuModuleGetFunction",
    "launch_kernel": "cuLaunchKernel",
    "get_error_name": "cuGetErrorName",
    "get_error_string": "cuGetErrorString",
}

# CUdevice_attribute and CUmemPool_attribute values (cuda.h)
ATTRIBUTES = {
    "max_threads_per_block": 1, "max_block_dim_x": 2, "max_block_dim_y": 3, "max_block_dim_z": 4,
    "max_grid_dim_x": 5, "max_grid_dim_y": 6, "max_grid_dim_z": 7, "max_shared_memory_per_block": 8,
    "warp_size": 10, "multiprocessor_count": 16, "compute_capability_major": 75, "compute_capability_minor": 76,
    "memory_pools_supported": 115,
}
POOL_ATTRIBUTES = {"release_threshold": 4, "reserved_mem_current": 5, "used_mem_current": 7}

_LOST = "the GPU's context is poisoned and every later call on it fails; restart the process, and rerun with " \
        "EMBER_LAUNCH_BLOCKING=1 to find the op that caused it"
ERRORS = {
    1: ErrorInfo("CUDA_ERROR_INVALID_VALUE", "an argument was out of range (a bug in ember-cuda: please report it)"),
    2: ErrorInfo("CUDA_ERROR_OUT_OF_MEMORY", "out of device memory"),
    3: ErrorInfo("CUDA_ERROR_NOT_INITIALIZED", "the driver was not initialised"),
    4: ErrorInfo("CUDA_ERROR_DEINITIALIZED", "the driver is shutting down"),
    34: ErrorInfo("CUDA_ERROR_STUB_LIBRARY", "the libcuda.so.1 found is the CUDA toolkit's stub, not the driver: "
                                            f"remove the toolkit's stubs directory from LD_LIBRARY_PATH, or install "
                                            f"{DRIVER}"),
    36: ErrorInfo("CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", f"the driver is too old: install {DRIVER}"),
    46: ErrorInfo("CUDA_ERROR_DEVICE_UNAVAILABLE", "the GPU is busy or unavailable (exclusive-process mode, or in "
                                                  "use by another process): check nvidia-smi"),
    100: ErrorInfo("CUDA_ERROR_NO_DEVICE", "no CUDA-capable GPU is visible: check that nvidia-smi lists one, and "
                                          "that CUDA_VISIBLE_DEVICES (if set) names it"),
    101: ErrorInfo("CUDA_ERROR_INVALID_DEVICE", "no such device ordinal"),
    200: ErrorInfo("CUDA_ERROR_INVALID_IMAGE", "a kernel image is corrupt: reinstall ember-cuda"),
    201: ErrorInfo("CUDA_ERROR_INVALID_CONTEXT", "no valid context is current (a bug in ember-cuda: please report it)"),
    209: ErrorInfo("CUDA_ERROR_NO_BINARY_FOR_GPU", "ember-cuda's kernels have no code for this GPU (they hold "
                                                  "sm_80 and sm_90 code and compute_90 PTX): a GPU older than "
                                                  "compute capability 8.0 cannot run them"),
    218: ErrorInfo("CUDA_ERROR_INVALID_PTX", "the driver could not compile the kernels' PTX: update the driver "
                                            f"({DRIVER})"),
    222: ErrorInfo("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the kernels were compiled by a CUDA newer than this "
                                                        f"driver supports: install {DRIVER}"),
    400: ErrorInfo("CUDA_ERROR_INVALID_HANDLE", "a stale handle (a bug in ember-cuda: please report it)"),
    500: ErrorInfo("CUDA_ERROR_NOT_FOUND", "a kernel is missing from its image: reinstall ember-cuda"),
    700: ErrorInfo("CUDA_ERROR_ILLEGAL_ADDRESS", f"a kernel accessed memory it does not own; {_LOST}"),
    701: ErrorInfo("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "a launch asked for more registers or threads than the GPU "
                                                        "has (a bug in ember-cuda: please report it)"),
    714: ErrorInfo("CUDA_ERROR_HARDWARE_STACK_ERROR", f"a kernel overflowed its stack; {_LOST}"),
    715: ErrorInfo("CUDA_ERROR_ILLEGAL_INSTRUCTION", f"a kernel executed an illegal instruction; {_LOST}"),
    716: ErrorInfo("CUDA_ERROR_MISALIGNED_ADDRESS", f"a kernel accessed misaligned memory; {_LOST}"),
    717: ErrorInfo("CUDA_ERROR_INVALID_ADDRESS_SPACE", f"a kernel used an invalid address space; {_LOST}"),
    718: ErrorInfo("CUDA_ERROR_INVALID_PC", f"a kernel jumped to an invalid address; {_LOST}"),
    719: ErrorInfo("CUDA_ERROR_LAUNCH_FAILED", f"a kernel failed while running; {_LOST}"),
    803: ErrorInfo("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "the driver's user-space library (libcuda.so.1) and its kernel "
                                                      "module have different versions: reboot after a driver update, "
                                                      f"or reinstall {DRIVER}"),
    804: ErrorInfo("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "a CUDA forward-compatibility library is in use, "
                                                              "which this GPU does not support: remove the cuda-compat "
                                                              f"directory from LD_LIBRARY_PATH, or install {DRIVER}"),
    999: ErrorInfo("CUDA_ERROR_UNKNOWN", "the driver failed for an unknown reason: check nvidia-smi and dmesg"),
}

# cuBLAS 13, from the CUDA 13.0 toolkit's cublas_api.h (functions, cublasStatus_t, cublasOperation_t,
# cublasMath_t, cublasComputeType_t, cublasGemmAlgo_t) and library_types.h (cudaDataType_t); the
# 64-bit GEMM takes int64 sizes, so no matrix dimension needs checking against 2**31.
_BLAS_BUG = "a bug in ember-cuda's matmul: please report it with the shapes, strides and dtypes"
CUBLAS = BlasVendor(
    product="cuBLAS",
    libraries=("libcublas.so.13",),  # never libcublas.so: it may be another CUDA's
    wheel_dirs=("nvidia/cu13/lib",),  # the nvidia-cublas wheel (13.x)
    companions=("libcublasLt.so.13",),
    install_hint='pip install "ember-cuda[cu13]" (it adds the nvidia-cublas wheel), or install the CUDA 13 '
                 "toolkit and put its lib64 directory on LD_LIBRARY_PATH",
    symbols={
        "create": "cublasCreate_v2",
        "destroy": "cublasDestroy_v2",
        "set_stream": "cublasSetStream_v2",
        "set_math_mode": "cublasSetMathMode",
        "set_workspace": "cublasSetWorkspace_v2",
        "gemm_strided_batched": "cublasGemmStridedBatchedEx_64",
        "status_string": "cublasGetStatusString",
    },
    data_types={"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1, "complex64": 4, "complex128": 5},
    compute_types={"float32": 68, "float32_tf32": 77, "float64": 70},  # CUBLAS_COMPUTE_32F, _32F_FAST_TF32, _64F
    operations={"n": 0, "t": 1},  # CUBLAS_OP_N, CUBLAS_OP_T
    default_math=0,  # CUBLAS_DEFAULT_MATH
    default_algo=-1,  # CUBLAS_GEMM_DEFAULT
    workspace_bytes=32 << 20,  # what cuBLAS's documentation asks for on Hopper and newer (4 MiB before)
    errors={
        1: ErrorInfo("CUBLAS_STATUS_NOT_INITIALIZED", "cuBLAS could not initialise: check that the CUDA driver "
                                                      f"works (nvidia-smi) and is {DRIVER}"),
        3: ErrorInfo("CUBLAS_STATUS_ALLOC_FAILED", "cuBLAS could not allocate memory"),
        7: ErrorInfo("CUBLAS_STATUS_INVALID_VALUE", f"an argument was out of range ({_BLAS_BUG})"),
        8: ErrorInfo("CUBLAS_STATUS_ARCH_MISMATCH", "this GPU lacks a feature the call needs (compute capability "
                                                    "8.0 or newer is required)"),
        11: ErrorInfo("CUBLAS_STATUS_MAPPING_ERROR", "cuBLAS could not access GPU memory"),
        13: ErrorInfo("CUBLAS_STATUS_EXECUTION_FAILED", "a cuBLAS kernel failed to run; rerun with "
                                                        "EMBER_LAUNCH_BLOCKING=1 and check nvidia-smi"),
        14: ErrorInfo("CUBLAS_STATUS_INTERNAL_ERROR", "cuBLAS failed internally (often a failed driver call on a lost "
                                                      "device): restart the process"),
        15: ErrorInfo("CUBLAS_STATUS_NOT_SUPPORTED", f"cuBLAS does not support this combination ({_BLAS_BUG})"),
        16: ErrorInfo("CUBLAS_STATUS_LICENSE_ERROR", "cuBLAS reported a license error"),
    },
    out_of_memory=3,
)

# NVRTC, where the driver rejects the shipped PTX (a driver older than the build's toolkit) or no
# shipped code fits the GPU: SASS (a cubin) for the GPU itself.  The allow-list: architecture -> the
# oldest NVRTC that targets it (the probe finds NVRTC 12 or 13 only).
NVRTC = RtcVendor(
    product="NVRTC",
    stack="CUDA",
    libraries=("libnvrtc.so.13", "libnvrtc.so.12"),  # never libnvrtc.so: it may be another CUDA's
    wheel_dirs=("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"),  # the nvidia-cuda-nvrtc wheels, 13.x and 12.x
    symbols={
        "create": "nvrtcCreateProgram",
        "compile": "nvrtcCompileProgram",
        "log_size": "nvrtcGetProgramLogSize",
        "log": "nvrtcGetProgramLog",
        "code_size": "nvrtcGetCUBINSize",
        "code": "nvrtcGetCUBIN",
        "destroy": "nvrtcDestroyProgram",
        "error_string": "nvrtcGetErrorString",
        "version": "nvrtcVersion",
    },
    # nvcc's flags of the shipped fatbins, and what NVRTC lacks of the GCC builtins prelude.h uses
    options=("--std=c++17", "--fmad=false", "-D__SIZE_TYPE__=unsigned long",
             "-D__builtin_huge_val()=__longlong_as_double(0x7ff0000000000000LL)",
             "-D__builtin_huge_valf()=__int_as_float(0x7f800000)",
             "-D__builtin_nan(tag)=__longlong_as_double(0x7ff8000000000000LL)",
             "-D__builtin_nanf(tag)=__int_as_float(0x7fc00000)"),
    arch_option="-arch={arch}",
    archs={**dict.fromkeys(("sm_80", "sm_86", "sm_87", "sm_89", "sm_90"), (12, 0)),
           **dict.fromkeys(("sm_100", "sm_120"), (12, 8)), **dict.fromkeys(("sm_103", "sm_121"), (12, 9)),
           "sm_110": (13, 0)},
    install_hint='pip install "ember-cuda[nvrtc]" (it adds the nvidia-cuda-nvrtc wheel), or install the CUDA 13 '
                 "toolkit and put its lib64 directory on LD_LIBRARY_PATH",
    image_format="fatbin",
    # CUDA_ERROR_NO_BINARY_FOR_GPU, _INVALID_PTX, _UNSUPPORTED_PTX_VERSION
    fallback_statuses=frozenset({209, 218, 222}),
)

CUDA = Vendor(
    name="cuda",
    package="ember-cuda",
    product="CUDA",
    driver_libraries=("libcuda.so.1",),  # never libcuda.so: it may be the toolkit's stub
    symbols=SYMBOLS,
    launch_markers=LaunchMarkers(pointer=1, size=2, end=0),
    warp_size=32,
    attributes=ATTRIBUTES,
    pool_attributes=POOL_ATTRIBUTES,
    stream_non_blocking=1,  # CU_STREAM_NON_BLOCKING
    event_disable_timing=2,  # CU_EVENT_DISABLE_TIMING
    host_alloc_portable=1,  # CU_MEMHOSTALLOC_PORTABLE
    errors=ERRORS,
    lost_device_errors=frozenset({700, 714, 715, 716, 717, 718, 719}),
    out_of_memory=2,
    no_device=100,
    min_driver_version=13000,
    min_driver=DRIVER,
    driver_hint=DRIVER_HINT,
    min_compute_capability=(8, 0),
    visible_devices_env="CUDA_VISIBLE_DEVICES",
    image_suffix=".fatbin",
    dlpack_device_type=2,  # kDLCUDA
    dlpack_default_stream=1,  # DLPack's stream=None means the legacy default stream (CU_STREAM_LEGACY)
    dlpack_invalid_streams=frozenset({0}),  # ambiguous for CUDA, so DLPack forbids it
    blas=CUBLAS,
    rtc=NVRTC,
)

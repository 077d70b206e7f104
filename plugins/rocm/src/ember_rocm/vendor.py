"""HIP (ROCm), as ember_gpu's vendor table: libamdhip64's module API, its launch markers (END is 3),
enums and error meanings, from ROCm 5.2's hip_runtime_api.h (the values are stable since)."""

from __future__ import annotations

from ember_gpu.build import HIPCC_ARCHS
from ember_gpu.vendor import ErrorInfo, LaunchMarkers, PropertiesLayout, RtcVendor, Vendor

from ember_rocm.blas import HIPBLAS, ROCBLAS

DRIVER = "ROCm 5.2 or newer (libamdhip64.so.5 or .so.6) with the amdgpu kernel driver"
DRIVER_HINT = ("install ROCm's HIP runtime (Debian 12: apt-get install libamdhip64-5; or AMD's ROCm packages, "
               "https://rocm.docs.amd.com), add your user to the render and video groups, and check that rocminfo "
               "lists the GPU")
SHIPPED = ", ".join(HIPCC_ARCHS)

SYMBOLS = {
    "init": "hipInit",
    "driver_get_version": "hipDriverGetVersion",
    "device_get_count": "hipGetDeviceCount",
    "device_get": "hipDeviceGet",
    "device_get_name": "hipDeviceGetName",
    "device_get_attribute": "hipDeviceGetAttribute",
    "device_total_mem": "hipDeviceTotalMem",
    "primary_ctx_retain": "hipDevicePrimaryCtxRetain",
    "primary_ctx_release": "hipDevicePrimaryCtxRelease",
    "ctx_set_current": "hipCtxSetCurrent",
    "mem_get_info": "hipMemGetInfo",
    "stream_create": "hipStreamCreateWithFlags",
    "stream_destroy": "hipStreamDestroy",
    "stream_synchronize": "hipStreamSynchronize",
    "stream_wait_event": "hipStreamWaitEvent",
    "event_create": "hipEventCreateWithFlags",
    "event_record": "hipEventRecord",
    "event_synchronize": "hipEventSynchronize",
    "event_elapsed_time": "hipEventElapsedTime",
    "event_destroy": "hipEventDestroy",
    "device_get_default_mem_pool": "hipDeviceGetDefaultMemPool",
    "mem_pool_set_attribute": "hipMemPoolSetAttribute",
    "mem_pool_get_attribute": "hipMemPoolGetAttribute",
    "mem_pool_trim_to": "hipMemPoolTrimTo",
    "mem_alloc_async": "hipMallocAsync",
    "mem_free_async": "hipFreeAsync",
    "mem_host_alloc": "hipHostMalloc",
    "mem_free_host": "hipHostFree",
    "memcpy_htod_async": "hipMemcpyHtoDAsync",
    "memcpy_dtoh_async": "hipMemcpyDtoHAsync",
    "memcpy_dtod_async": "hipMemcpyDtoDAsync",
    "memcpy_peer_async": "hipMemcpyPeerAsync",
    "memset_d8_async": "hipMemsetD8Async",
    "module_load_data": "hipModuleLoadData",
    "module_unload": "hipModuleUnload",
    "module_get_function": "hipModuleGetFunction",
    "launch_kernel": "hipModuleLaunchKernel",
    "get_error_name": "hipGetErrorName",
    "get_error_string": "hipGetErrorString",
}

# hipDeviceAttribute_t and hipMemPoolAttr values (ROCm 5.2)
ATTRIBUTES = {
    "max_threads_per_block": 56, "max_block_dim_x": 26, "max_block_dim_y": 27, "max_block_dim_z": 28,
    "max_grid_dim_x": 29, "max_grid_dim_y": 30, "max_grid_dim_z": 31, "max_shared_memory_per_block": 74,
    "warp_size": 87, "multiprocessor_count": 63, "compute_capability_major": 23, "compute_capability_minor": 61,
    "memory_pools_supported": 88,
}
POOL_ATTRIBUTES = {"release_threshold": 4, "reserved_mem_current": 5, "used_mem_current": 7}

_LOST = "the GPU's context is poisoned and every later call on it fails; restart the process, and rerun with " \
        "EMBER_LAUNCH_BLOCKING=1 to find the op that caused it"
_NO_GPU = ("no AMD GPU is visible: check that /dev/kfd exists and that you can read it (the render and video "
           "groups), that rocminfo lists a GPU, and that HIP_VISIBLE_DEVICES does not hide it")
ERRORS = {
    1: ErrorInfo("hipErrorInvalidValue", "an argument was out of range (a bug in ember-rocm: please report it)"),
    2: ErrorInfo("hipErrorOutOfMemory", "out of device memory"),
    3: ErrorInfo("hipErrorNotInitialized", "the HIP runtime was not initialised"),
    4: ErrorInfo("hipErrorDeinitialized", "the HIP runtime is shutting down"),
    35: ErrorInfo("hipErrorInsufficientDriver", f"the amdgpu kernel driver is older than this HIP runtime: {DRIVER}"),
    100: ErrorInfo("hipErrorNoDevice", _NO_GPU),
    # what hipInit itself returns when no GPU is there (ROCm 5.2, no /dev/kfd); later, a bad ordinal
    101: ErrorInfo("hipErrorInvalidDevice", f"{_NO_GPU} (from any call after start-up: a bug in ember-rocm, "
                                            "please report it)"),
    200: ErrorInfo("hipErrorInvalidImage", "a kernel code object is damaged: reinstall ember-rocm"),
    201: ErrorInfo("hipErrorInvalidContext", "no valid context is current (a bug in ember-rocm: please report it)"),
    209: ErrorInfo("hipErrorNoBinaryForGpu", f"ember-rocm's kernels hold code objects for {SHIPPED} only, not for "
                                             "this GPU's architecture (gfx942 / MI300 and RDNA3 need ROCm 6 or "
                                             "newer to be built for)"),
    218: ErrorInfo("hipErrorInvalidKernelFile", "the runtime could not read a kernel code object: "
                                                "reinstall ember-rocm"),
    303: ErrorInfo("hipErrorSharedObjectInitFailed", "a kernel code object failed to initialise: reinstall ember-rocm"),
    400: ErrorInfo("hipErrorInvalidHandle", "a stale handle (a bug in ember-rocm: please report it)"),
    500: ErrorInfo("hipErrorNotFound", "a kernel is missing from its code object: reinstall ember-rocm"),
    700: ErrorInfo("hipErrorIllegalAddress", f"a kernel accessed memory it does not own; {_LOST}"),
    701: ErrorInfo("hipErrorLaunchOutOfResources", "a launch asked for more registers or threads than the GPU has "
                                                   "(a bug in ember-rocm: please report it)"),
    710: ErrorInfo("hipErrorAssert", f"a kernel failed an assertion; {_LOST}"),
    719: ErrorInfo("hipErrorLaunchFailure", f"a kernel failed while running; {_LOST}"),
    999: ErrorInfo("hipErrorUnknown", "the HIP runtime failed for an unknown reason: check rocminfo and dmesg"),
}

# hipRTC, for a GPU no shipped code object covers.  The allow-list: architecture -> the oldest ROCm whose
# hipRTC is known to build ember's kernels for it.  (5, 2): checked against Debian's hipRTC 5.2, which
# aborts the process for gfx940, gfx941 and gfx1100-gfx1103; the rest from the ROCm release that first
# supported the target (gfx942 / MI300: 6.0; RDNA3 is listed from 6.0, RDNA4 from 6.4, gfx950 from 7.0).
HIPRTC_ARCHS = {
    **dict.fromkeys(("gfx900", "gfx906", "gfx908", "gfx90a", "gfx1010", "gfx1030", "gfx1031", "gfx1032", "gfx1034",
                     "gfx1035", "gfx1036"), (5, 2)),
    **dict.fromkeys(("gfx940", "gfx941", "gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1103"), (6, 0)),
    **dict.fromkeys(("gfx1200", "gfx1201"), (6, 4)),
    "gfx950": (7, 0),
}
HIPRTC = RtcVendor(
    product="hipRTC",
    stack="ROCm",
    # ROCm 6 and newer ship hipRTC as libhiprtc; ROCm 5's libamdhip64 holds it (Debian 12's does)
    libraries=("libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libamdhip64.so.6", "libamdhip64.so.5"),
    wheel_dirs=(),
    symbols={
        "create": "hiprtcCreateProgram",
        "compile": "hiprtcCompileProgram",
        "log_size": "hiprtcGetProgramLogSize",
        "log": "hiprtcGetProgramLog",
        "code_size": "hiprtcGetCodeSize",
        "code": "hiprtcGetCode",
        "destroy": "hiprtcDestroyProgram",
        "error_string": "hiprtcGetErrorString",
    },
    options=("-std=c++17", "-O3", "-ffp-contract=off"),  # hipcc's flags of the shipped code objects
    arch_option="--offload-arch={arch}",
    archs=HIPRTC_ARCHS,
    install_hint="install AMD's ROCm (https://rocm.docs.amd.com), whose libhiprtc is hipRTC",
    image_format="offload-bundle",
    fallback_statuses=frozenset({209}),  # hipErrorNoBinaryForGpu
    driver_version_symbol="hipRuntimeGetVersion",  # (hiprtcVersion answers 9.0 in every ROCm)
    # hipDeviceProp_t's gcnArchName: the R0600 struct of ROCm 6 and newer, then ROCm 5's
    properties=(PropertiesLayout("hipGetDevicePropertiesR0600", size=1472, name_offset=1160),
                PropertiesLayout("hipGetDeviceProperties", size=792, name_offset=396)),
)


def hip_vendor(warp_size: int = 64) -> Vendor:
    """The table; ``warp_size`` is the default the fake driver reports (a real GPU reports its own:
    64 on CDNA, gfx908 / gfx90a / gfx940, 32 on RDNA, gfx1030)."""
    return Vendor(
        name="rocm",
        package="ember-rocm",
        product="HIP",
        driver_libraries=("libamdhip64.so.6", "libamdhip64.so.5"),  # never libamdhip64.so: a dev symlink
        symbols=SYMBOLS,
        launch_markers=LaunchMarkers(pointer=1, size=2, end=3),  # HIP_LAUNCH_PARAM_*
        warp_size=warp_size,
        attributes=ATTRIBUTES,
        pool_attributes=POOL_ATTRIBUTES,
        stream_non_blocking=1,  # hipStreamNonBlocking
        event_disable_timing=2,  # hipEventDisableTiming
        host_alloc_portable=1,  # hipHostMallocPortable
        errors=ERRORS,
        lost_device_errors=frozenset({700, 710, 719}),
        out_of_memory=2,
        no_device=100,
        min_driver_version=50200000,  # HIP_VERSION of 5.2: major * 10**7 + minor * 10**5 + patch
        version_scale=(10_000_000, 100_000),
        min_driver=DRIVER,
        driver_hint=DRIVER_HINT,
        min_compute_capability=(9, 0),  # HIP reports gfx9xx as 9.0, gfx1030 as 10.3
        visible_devices_env="HIP_VISIBLE_DEVICES",
        image_suffix=".co",
        dlpack_device_type=10,  # kDLROCM
        dlpack_default_stream=0,  # DLPack for ROCm: stream=None means the default stream, 0
        dlpack_invalid_streams=frozenset({1, 2}),  # DLPack reserves them for CUDA
        peer_copy_by_ordinal=True,
        error_text_returned=True,
        blas=HIPBLAS,  # float matmul: hipBLAS, else rocBLAS, else ember's own GEMM kernel
        blas_alternatives=(ROCBLAS,),
        rtc=HIPRTC,
    )


HIP = hip_vendor()

"""A made-up vendor table for ember-gpu's runtime tests: none of CUDA's symbols, enums or launch
markers (HIP's END marker 3, a warp of 64), nor cuBLAS's, so a vendor fact hard-coded in the
runtime or in ember_gpu.blas fails them."""

from ember_gpu import blas
from ember_gpu.driver import SIGNATURES
from ember_gpu.vendor import BlasVendor, ErrorInfo, LaunchMarkers, Vendor

TEST_BLAS = BlasVendor(
    product="tgBLAS",
    libraries=("libember-tgblas.so.7",),
    wheel_dirs=("ember_testgpu_wheel/lib",),
    companions=("libember-tgblaslt.so.7",),
    install_hint='pip install "ember-testgpu[blas]"',
    symbols={name: "tgblas_" + name for name in blas.SIGNATURES},
    data_types={"float16": 31, "bfloat16": 32, "float32": 33, "float64": 34, "complex64": 35, "complex128": 36},
    compute_types={"float32": 51, "float32_tf32": 52, "float64": 53},
    operations={"n": 111, "t": 112},
    default_math=9,
    default_algo=-7,
    workspace_bytes=4096,
    errors={
        21: ErrorInfo("TGBLAS_STATUS_ALLOC_FAILED", "tgBLAS could not allocate memory"),
        22: ErrorInfo("TGBLAS_STATUS_INVALID_VALUE", "an argument was out of range"),
        23: ErrorInfo("TGBLAS_STATUS_EXECUTION_FAILED", "a tgBLAS kernel failed"),
        24: ErrorInfo("TGBLAS_STATUS_NOT_SUPPORTED", "an unsupported combination"),
    },
    out_of_memory=21,
)

TEST_VENDOR = Vendor(
    name="testgpu",
    package="ember-testgpu",
    product="TestGPU",
    driver_libraries=("libember-testgpu-driver.so.1",),
    symbols={name: "tg_" + name for name in SIGNATURES},
    launch_markers=LaunchMarkers(pointer=1, size=2, end=3),
    warp_size=64,
    attributes={name: 1000 + i for i, name in enumerate((
        "max_threads_per_block", "max_block_dim_x", "max_block_dim_y", "max_block_dim_z", "max_grid_dim_x",
        "max_grid_dim_y", "max_grid_dim_z", "max_shared_memory_per_block", "warp_size", "multiprocessor_count",
        "compute_capability_major", "compute_capability_minor", "memory_pools_supported"))},
    pool_attributes={"release_threshold": 41, "reserved_mem_current": 42, "used_mem_current": 43},
    stream_non_blocking=8,
    event_disable_timing=16,
    host_alloc_portable=32,
    errors={
        1: ErrorInfo("TG_INVALID_VALUE", "a bad argument"),
        2: ErrorInfo("TG_OUT_OF_MEMORY", "out of device memory"),
        34: ErrorInfo("TG_STUB_LIBRARY", "the stub library, not the driver: install the real driver"),
        100: ErrorInfo("TG_NO_DEVICE", "no TestGPU is visible: check tg-smi"),
        209: ErrorInfo("TG_NO_BINARY_FOR_GPU", "no kernel code for this GPU"),
        222: ErrorInfo("TG_UNSUPPORTED_PTX_VERSION", "kernels newer than the driver: update the driver"),
        700: ErrorInfo("TG_ILLEGAL_ADDRESS", "a kernel accessed memory it does not own"),
        719: ErrorInfo("TG_LAUNCH_FAILED", "a kernel failed"),
        803: ErrorInfo("TG_SYSTEM_DRIVER_MISMATCH", "library and kernel module differ: reboot"),
        804: ErrorInfo("TG_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility unsupported: remove tg-compat"),
    },
    lost_device_errors=frozenset({700, 719}),
    out_of_memory=2,
    no_device=100,
    min_driver_version=7020,
    min_driver="the TestGPU driver TG470 or newer (TestGPU 7.2)",
    driver_hint="install it from the vendor",
    min_compute_capability=(3, 0),
    visible_devices_env="TESTGPU_VISIBLE_DEVICES",
    image_suffix=".tgbin",
    dlpack_device_type=12,
    dlpack_default_stream=0,
    blas=TEST_BLAS,
)

"""What differs between GPU vendors, as data: a vendor plugin (ember-cuda, ember-rocm) is one
``Vendor`` value plus a few lines of hooks; everything else in ember_gpu reads this table.

Names on the left of each mapping are ember_gpu's own (``driver.SIGNATURES`` lists the functions);
values are the vendor's symbols and enum values, which are the only place vendor names appear.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchMarkers:
    """The tags of a launch's ``extra`` array: POINTER, then the argument buffer; SIZE, then a
    pointer to its size; END.  CUDA's END is 0, HIP's is 3."""

    pointer: int
    size: int
    end: int


@dataclass(frozen=True)
class ErrorInfo:
    """A driver status: the vendor's name for it and what a user should do."""

    name: str
    meaning: str


@dataclass(frozen=True)
class BlasVendor:
    """A vendor's BLAS library (cuBLAS, hipBLAS, rocBLAS) as data: where it is found, its symbols and enums.

    ``ember_gpu.blas`` reads nothing else, so hipBLAS and rocBLAS are this table with other values and
    their own calling convention (``api``)."""

    product: str  # what users call it: "cuBLAS"
    libraries: tuple[str, ...]  # versioned sonames, tried on the loader path, then in wheel_dirs
    wheel_dirs: tuple[str, ...]  # site-packages subdirectories of the vendor's BLAS wheel: "nvidia/cu13/lib"
    companions: tuple[str, ...]  # libraries of the same wheel directory loaded first (cuBLAS needs cuBLASLt)
    install_hint: str  # how to get the library, in words users act on
    symbols: Mapping[str, str]  # ember_gpu name -> vendor symbol (blas.SIGNATURES; blas.OPTIONAL may be absent)
    data_types: Mapping[str, int]  # ember dtype name -> the vendor's data-type enum
    compute_types: Mapping[str, int]  # "float32", "float32_tf32", "float64" -> the vendor's compute-type enum,
    #                                   and a dtype's name where its own differs (hipBLAS's complex ones)
    operations: Mapping[str, int]  # "n": the operand as stored, "t": transposed
    default_math: int  # the handle's math mode: no reduced-precision shortcut unless the compute type asks
    default_algo: int  # the GEMM algorithm: the library's heuristic
    workspace_bytes: int  # per handle, allocated by ember (a library allocation would break graph capture)
    errors: Mapping[int, ErrorInfo]  # status -> name and what to do
    out_of_memory: int  # the status of a failed allocation
    api: str = "cublas_64"  # the GEMM's calling convention, a key of blas.GEMM_SIGNATURES


@dataclass(frozen=True)
class PropertiesLayout:
    """Where one version of the vendor's device-properties struct holds the architecture's name
    (HIP's ``gcnArchName``): the function filling it, the struct's size and the field's offset."""

    symbol: str  # "hipGetDevicePropertiesR0600": (void *properties, int device) -> status
    size: int  # bytes of the struct
    name_offset: int  # of the NUL-terminated architecture name: "gfx90a:sramecc+:xnack-"


@dataclass(frozen=True)
class RtcVendor:
    """The vendor's run-time compiler (NVRTC, hipRTC) as data: ``ember_gpu.rtc`` reads nothing else.

    Used for a GPU whose architecture no shipped image serves, or whose driver rejects the shipped code."""

    product: str  # what users call it: "NVRTC"
    stack: str  # what its versions are versions of, in messages: "CUDA", "ROCm"
    libraries: tuple[str, ...]  # sonames probed in order (a library lacking the ``create`` symbol is skipped)
    wheel_dirs: tuple[str, ...]  # site-packages subdirectories of a wheel holding the library
    symbols: Mapping[str, str]  # ember_gpu name -> vendor symbol (every name of rtc.SIGNATURES but "version")
    options: tuple[str, ...]  # the build's flags, in the compiler's spelling ("--fmad=false")
    arch_option: str  # the target, "{arch}" replaced: "-arch={arch}", "--offload-arch={arch}"
    archs: Mapping[str, tuple[int, int]]  # the allow-list: architecture -> oldest compiler version known to build it
    install_hint: str  # how to get the compiler, in words users act on
    image_format: str  # what the shipped images are: "fatbin" (nvcc) or "offload-bundle" (hipcc)
    fallback_statuses: frozenset[int]  # module-load statuses meaning "no code this GPU and driver can run"
    driver_version_symbol: str = ""  # set: the compiler's version is the driver library's (int *), not "version"'s
    properties: tuple[PropertiesLayout, ...] = ()  # how to read the architecture's name, newest first;
    #                                                empty: "sm_" + the compute capability's digits (CUDA)


@dataclass(frozen=True)
class Vendor:
    name: str  # the plugin name and the device type: "cuda"
    package: str  # the distribution, for messages: "ember-cuda"
    product: str  # what users call the stack: "CUDA"
    driver_libraries: tuple[str, ...]  # sonames tried in order (never an unversioned stub)
    symbols: Mapping[str, str]  # ember_gpu function name -> vendor symbol (every name of driver.SIGNATURES)
    launch_markers: LaunchMarkers
    warp_size: int
    attributes: Mapping[str, int]  # ember_gpu attribute name -> the vendor's device-attribute enum
    pool_attributes: Mapping[str, int]  # release_threshold, reserved_mem_current, used_mem_current
    stream_non_blocking: int  # stream flag: no implicit synchronization with the default stream
    event_disable_timing: int  # event flag for events that only order work
    host_alloc_portable: int  # pinned host memory usable from every context
    errors: Mapping[int, ErrorInfo]
    lost_device_errors: frozenset[int]  # statuses that poison the context (illegal address, launch failure)
    out_of_memory: int
    no_device: int
    min_driver_version: int  # the driver API version the shipped kernels need (13000: CUDA 13.0)
    min_driver: str  # the same in words users can act on: "the NVIDIA driver R580 or newer (CUDA 13)"
    driver_hint: str  # how to install or update the driver
    min_compute_capability: tuple[int, int]  # oldest architecture the kernel images run on
    visible_devices_env: str  # the variable that hides devices from the driver: CUDA_VISIBLE_DEVICES
    image_suffix: str  # kernel images in the vendor package's ``kernels/``: ".fatbin", ".hsaco"
    dlpack_device_type: int  # kDLCUDA = 2, kDLROCM = 10
    dlpack_default_stream: int  # the stream DLPack's ``stream=None`` means (CUDA: 1, the legacy stream)
    dlpack_invalid_streams: frozenset[int] = frozenset()  # stream values DLPack forbids for this vendor
    blas: BlasVendor | None = None  # the BLAS library for float matmul (None: the vendor has none)
    blas_alternatives: tuple[BlasVendor, ...] = ()  # BLAS libraries tried in order when ``blas`` is missing
    version_scale: tuple[int, int] = (1000, 10)  # a version's major, minor: v // a, v % a // b (HIP: 10**7, 10**5)
    peer_copy_by_ordinal: bool = False  # the peer copy names its devices by ordinal (HIP), not by context (CUDA)
    error_text_returned: bool = False  # the error name / string functions return the text (HIP), not fill a pointer
    rtc: RtcVendor | None = None  # the run-time compiler for GPUs no shipped image serves (None: none)

    def error(self, status: int) -> ErrorInfo | None:
        return self.errors.get(status)

    def version_words(self, version: int) -> str:
        """A driver API version as its vendor prints it (13000 -> "13.0", HIP's 50221153 -> "5.2")."""
        major, minor = self.version_scale
        return f"{version // major}.{version % major // minor}"

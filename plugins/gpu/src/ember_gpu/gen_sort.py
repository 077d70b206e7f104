"""The sort kernels (csrc/eg_sort.h): ``eg_sort_sort_<dtype>``, ``eg_sort_argsort_<dtype>`` and
``eg_search_searchsorted_<dtype>`` for the registry's sortable dtypes (real and bool), one image.
Each dtype's key is ember-cpu's (sort.c): an unsigned integer of the dtype's width whose order is
numpy's order of the values."""

from __future__ import annotations

from ember_gpu.codegen import DTYPES, HEADER, DType, Source

HALF_INFINITY = {"float16": "0x7c00u", "bfloat16": "0x7f80u"}  # the bits of +inf


def _key(d: DType) -> tuple[int, str]:
    """(bits, the key of a stored element v)."""
    if d.name == "bool":
        return 8, "(eg_u64)(v != 0)"
    if d.cls == "uint":
        return d.bits, "(eg_u64)v"
    if d.cls == "int":
        unsigned = {8: "eg_u8", 16: "eg_u16", 32: "eg_u32", 64: "eg_u64"}[d.bits]
        return d.bits, f"eg_sint_key<{unsigned}>(({unsigned})v)"
    if d.name in HALF_INFINITY:
        return 16, f"eg_float_key<eg_u16>(v.bits, {HALF_INFINITY[d.name]})"
    if d.name == "float32":
        return 32, "eg_float_key<eg_u32>(eg_f32_bits(v), 0x7f800000u)"
    return 64, "eg_float_key<eg_u64>(eg_f64_bits(v), 0x7ff0000000000000ull)"


def registry_dtypes() -> list[DType]:
    from ember_core.ops.registry import REGISTRY

    names = set.intersection(*({d.name for d in REGISTRY[op].dtypes} for op in ("sort", "argsort", "searchsorted")))
    return [d for d in DTYPES if d.name in names]


def sources() -> dict[str, Source]:
    parts, kernels = [HEADER], []
    for d in registry_dtypes():
        bits, key = _key(d)
        name = f"eg_sort_{d.name}_key"
        parts.append(f"struct {name} {{\n    typedef {d.storage} in_t;\n    enum {{ bits = {bits} }};\n"
                     f"    static EG_HD EG_INLINE eg_u64 key(in_t v) {{ return {key}; }}\n}};\n"
                     f"EG_SORT_KERNELS({d.name}, {name})\n\n")
        kernels += [f"eg_sort_sort_{d.name}", f"eg_sort_argsort_{d.name}", f"eg_search_searchsorted_{d.name}"]
    return {"sort": Source("".join(parts), kernels)}

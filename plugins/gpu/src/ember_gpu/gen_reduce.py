"""The reduction kernels (csrc/eg_reduce.h): sum, prod, max, min, any, all and argmax, argmin, one
kernel ``eg_reduce_<op>_<dtype>`` per registry dtype that can reach it, one image per op.

What each kernel sees is what the core hands a backend: sum and prod get x already in the result
dtype (the core accumulates bool and integers in int64 unless asked otherwise, so bool never
reaches them), max and min keep x's dtype, any and all write bool, argmax and argmin int64.
Accumulators are ember-cpu's: integers wrap in an unsigned type at least 32 bits wide, float16 and
bfloat16 add, multiply and compare in float32; max and min propagate NaN, argmax and argmin take
the first NaN, else the first extreme.
"""

from __future__ import annotations

from ember_gpu.codegen import BY_NAME, DTYPES, HEADER, DType, Source

OPS = ("sum", "prod", "max", "min", "any", "all", "argmax", "argmin")


def registry_dtypes(op: str) -> list[DType]:
    """The registry's dtypes of op that reach a kernel: sum, prod and the scans never see bool (the
    core accumulates it in int64)."""
    from ember_core.ops.registry import REGISTRY

    names = {d.name for d in REGISTRY[op].dtypes}
    if REGISTRY[op].result == "accumulate":
        names.discard("bool")
    return [d for d in DTYPES if d.name in names]


def _number_accumulator(d: DType) -> str:
    """sum / prod: wrapping unsigned for integers (no narrow promotion to a signed int), float32
    for the half types, the compute type otherwise."""
    if d.cls in ("int", "uint"):
        return "eg_u64" if d.bits == 64 else "eg_u32"
    return d.compute


def _extremes(d: DType) -> tuple[str, str]:
    """(lowest, highest) of the compute type: the identities of max and min."""
    if d.cls == "bool":
        return "false", "true"
    if d.cls == "float":
        inf = "EG_INFF" if d.compute == "float" else "EG_INF"
        return f"-{inf}", inf
    return d.limits


def truth(d: DType) -> str:
    """The element is true: nonzero (NaN too); half types test every bit but the sign."""
    if d.name in ("float16", "bfloat16"):
        return "(v.bits & 0x7fff) != 0"
    if d.cls == "complex":
        return "v.re != 0 || v.im != 0"
    return "v != 0"


def _load(d: DType) -> str:
    return d.load.replace("$v", "v")


def _store(d: DType) -> str:
    return d.store.replace("$v", "a")


def _op(name: str, in_t: str, acc_t: str, out_t: str, identity: str, load: str, combine: str,
        store: str) -> str:
    hd = "static EG_HD EG_INLINE"
    return (f"struct {name} {{\n    typedef {in_t} in_t;\n    typedef {acc_t} acc_t;\n    typedef {out_t} out_t;\n"
            f"    {hd} acc_t identity() {{ return {identity}; }}\n"
            f"    {hd} acc_t load(in_t v, eg_i64 i) {{ (void)i; return {load}; }}\n"
            f"    {hd} acc_t combine(acc_t a, acc_t b) {{ return {combine}; }}\n"
            f"    {hd} out_t store(acc_t a) {{ return {store}; }}\n}};\n")


def reduction_op(op: str, d: DType, name: str) -> str:
    """The op struct (eg_reduce.h) of reduction op over dtype d; sum and prod serve the scans too."""
    if op in ("sum", "prod"):
        acc = _number_accumulator(d)
        store = f"({d.storage})a" if d.cls in ("int", "uint") else _store(d)
        load = f"({acc}){_load(d)}"
        identity, combine = ("0", "a + b") if op == "sum" else ("1", "a * b")
        if d.cls == "complex":  # C's complex product, as ember-cpu's reductions and scans multiply
            identity = f"eg_cmplx(({d.real}){identity}, ({d.real})0)"
            combine = combine if op == "sum" else "eg_cmul_c(a, b)"
        return _op(name, d.storage, acc, d.storage, identity, load, combine, store)
    if op in ("max", "min"):
        lowest, highest = _extremes(d)
        sign = ">" if op == "max" else "<"
        return _op(name, d.storage, d.compute, d.storage, lowest if op == "max" else highest, _load(d),
                   f"(b {sign} a || b != b) ? b : a", _store(d))
    if op in ("any", "all"):
        return _op(name, d.storage, "eg_u8", "eg_u8", "0" if op == "any" else "1", f"(eg_u8)({truth(d)})",
                   "a | b" if op == "any" else "a & b", "a")
    arg = f"eg_arg<{d.compute}>"
    return _op(name, d.storage, arg, "eg_i64", f"{arg}{{{d.compute}(), -1}}", f"{arg}{{{_load(d)}, i}}",
               f"eg_arg_combine<{d.compute}, {'true' if op == 'argmax' else 'false'}>(a, b)", "a.index")


def accumulator_size(op: str, dtype: str) -> int:
    """Bytes of one partial in the scratch of a two-pass reduction (abi.h)."""
    d = BY_NAME[dtype]
    if op in ("any", "all"):
        return 1
    if op in ("argmax", "argmin"):
        return 16
    if op in ("sum", "prod"):
        return {"eg_u32": 4, "eg_u64": 8, "float": 4, "double": 8, "eg_c64": 8, "eg_c128": 16}[_number_accumulator(d)]
    return {"bool": 1, "float": 4, "double": 8}.get(d.compute, d.bits // 8)


def op_sources(family: str, ops: dict[str, str], macro: str) -> dict[str, Source]:
    """One source per op (``<family>_<op>``) of kernels ``eg_<family>_<op>_<dtype>``, each the
    ``macro`` instantiated with the element op of the reduction ``ops[op]``, for the op's dtypes."""
    out = {}
    for op, reduction in ops.items():
        parts, kernels = [HEADER], []
        for d in registry_dtypes(op):
            name = f"eg_{family}_{op}_{d.name}"
            parts.append(reduction_op(reduction, d, f"{name}_op"))
            parts.append(f"{macro}({name}, {name}_op)\n\n")
            kernels.append(name)
        out[f"{family}_{op}"] = Source("".join(parts), kernels)
    return out


def sources() -> dict[str, Source]:
    return op_sources("reduce", {op: op for op in OPS}, "EG_REDUCE_KERNEL")

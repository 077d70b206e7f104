"""The indexing kernels and the integer matmul (csrc/eg_index.h), one image each: take and
index_put move stored elements, so they exist per element size (``eg_index_take_<bytes>``,
``eg_index_put_<bytes>``) and serve every dtype; index_put with accumulation adds per dtype
(``eg_index_put_add_<dtype>``, ember-cpu's adds: bool ORs, integers wrap, float16 / bfloat16 add
in float32 and round each time); the integer matmul (``eg_matmul_matmul_<dtype>``) wraps, as
integer arithmetic does everywhere in ember (floating matmul goes through the vendor's BLAS);
nonzero (``eg_nonzero_nonzero_<dtype>``) tests each element as any() does."""

from __future__ import annotations

from ember_gpu.codegen import DTYPES, HEADER, DType, Source
from ember_gpu.gen_reduce import truth

ELEMENT_BYTES = (1, 2, 4, 8, 16)


def _unsigned(d: DType) -> str:
    return "eg_u64" if d.bits == 64 else "eg_u32"


def _add(d: DType) -> str:
    """old + value in d's storage type, as ember-cpu accumulates."""
    if d.cls == "bool":
        return "(eg_u8)((old | value) != 0)"
    if d.cls in ("int", "uint"):
        return f"({d.storage})(({_unsigned(d)})old + ({_unsigned(d)})value)"
    if d.storage != d.compute:  # float16, bfloat16
        return d.store.replace("$v", f"({d.load.replace('$v', 'old')} + {d.load.replace('$v', 'value')})")
    return "old + value"


def _registry_dtypes(op: str) -> list[DType]:
    from ember_core.ops.registry import REGISTRY

    names = {d.name for d in REGISTRY[op].dtypes}
    return [d for d in DTYPES if d.name in names]


def sources() -> dict[str, Source]:
    move = "".join(f"EG_MOVE_KERNELS({b})\n" for b in ELEMENT_BYTES)
    moved = [f"eg_index_{op}_{b}" for b in ELEMENT_BYTES for op in ("take", "put")]
    parts, added = [HEADER, move], []
    for d in _registry_dtypes("index_put"):
        name = f"eg_index_put_add_{d.name}"
        parts.append(f"struct {name}_op {{\n    typedef {d.storage} T;\n"
                     f"    static EG_HD EG_INLINE T apply(T old, T value) {{ return {_add(d)}; }}\n}};\n"
                     f"EG_PUT_ADD_KERNEL({name}, {name}_op)\n\n")
        added.append(name)
    matmul, products = [HEADER], []
    for d in _registry_dtypes("matmul"):
        if d.cls not in ("int", "uint"):
            continue
        name = f"eg_matmul_matmul_{d.name}"
        matmul.append(f"struct {name}_op {{\n    typedef {d.storage} T;\n    typedef {_unsigned(d)} acc_t;\n"
                      f"    static EG_HD EG_INLINE acc_t load(T v) {{ return (acc_t)v; }}\n"
                      f"    static EG_HD EG_INLINE T store(acc_t a) {{ return (T)a; }}\n}};\n"
                      f"EG_MATMUL_KERNEL({name}, {name}_op)\n\n")
        products.append(name)
    nonzero, found = [HEADER], []
    for d in _registry_dtypes("nonzero"):
        name = f"eg_nonzero_nonzero_{d.name}"
        nonzero.append(f"struct {name}_op {{\n    typedef {d.storage} T;\n"
                       f"    static EG_HD EG_INLINE bool truth(T v) {{ return {truth(d)}; }}\n}};\n"
                       f"EG_NONZERO_KERNEL({name}, {name}_op)\n\n")
        found.append(name)
    return {"index": Source("".join(parts), moved + added), "matmul": Source("".join(matmul), products),
            "nonzero": Source("".join(nonzero), found)}

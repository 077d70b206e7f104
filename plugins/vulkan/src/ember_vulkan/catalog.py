"""Which SPIR-V variants exist: one source of truth for the build (which shaders to compile, with
which ``#define`` prelude) and for the run time (which variant serves an op on a dtype).

A variant is a GLSL template from ``shaders/`` compiled with a generated prelude that names the
storage and compute types of each operand slot (``A``, ``B``, ``C`` inputs, ``O`` output) and the
op codes.  The op an elementwise or reduction pipeline runs is a specialization constant, so one
SPIR-V module per (template, dtypes) serves every op of its family.

This module imports nothing from ember: the build script loads it by path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Storage:
    """How a dtype is stored in a buffer and computed with in a shader."""

    buf: str  # buffer-reference type from common.glsl
    compute: str  # GLSL type values are computed in
    load: str  # storage value -> compute type ("{}" is the value)
    store: str  # compute value -> storage type
    cls: str  # "bool" | "int" | "float"
    itemsize: int


STORAGE = {
    "bool": Storage("BufU8", "bool", "(uint({}) != 0u)", "uint8_t(({}) ? 1u : 0u)", "bool", 1),
    "int32": Storage("BufI32", "int", "({})", "({})", "int", 4),
    "int64": Storage("BufI64", "int64_t", "({})", "({})", "int", 8),
    "float16": Storage("BufF16", "float", "float({})", "float16_t({})", "float", 2),
    "float32": Storage("BufF32", "float", "({})", "({})", "float", 4),
}
DTYPES = tuple(STORAGE)
# float64 for a few ops only (add, subtract, multiply, sum, prod, full, copy / astype: what dtype=float64
# and astype to float64 and their gradients need): those variants need shaderFloat64, so the type is
# declared only in them and the host declines them on a device without it.
WIDE = {"float64": Storage("BufF64", "double", "({})", "({})", "float", 8)}
FLOATS = ("float16", "float32")
INTS = ("int32", "int64")
NUMERIC = (*INTS, *FLOATS)

# ---- elementwise ops: name -> (op code, input dtypes, result: "same" | "bool") ------------------
# Codes are positions in these lists; the GLSL switch statements use the OP_* names the prelude
# defines, so reordering is harmless.

_FLOAT_MATH = ("sqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
               "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc",
               "reciprocal")
UNARY: dict[str, tuple[tuple[str, ...], str]] = {
    "abs": (NUMERIC, "same"),
    "negative": (NUMERIC, "same"),
    "positive": (NUMERIC, "same"),
    "conj": (NUMERIC, "same"),  # real dtypes only: conj and real are the identity, imag is zero
    "real": (NUMERIC, "same"),
    "imag": (NUMERIC, "same"),
    "square": (NUMERIC, "same"),
    "sign": (NUMERIC, "same"),
    "floor": (NUMERIC, "same"),
    "ceil": (NUMERIC, "same"),
    "trunc": (NUMERIC, "same"),
    "round": (NUMERIC, "same"),
    **{name: (FLOATS, "same") for name in _FLOAT_MATH},
    "bitwise_invert": (("bool", *INTS), "same"),
    "logical_not": (("bool",), "same"),
    "isnan": (NUMERIC, "bool"),
    "isinf": (NUMERIC, "bool"),
    "isfinite": (NUMERIC, "bool"),
    "signbit": (FLOATS, "bool"),
}

BINARY: dict[str, tuple[tuple[str, ...], str]] = {
    "add": ((*NUMERIC, *WIDE), "same"),
    "subtract": ((*NUMERIC, *WIDE), "same"),
    "multiply": ((*NUMERIC, *WIDE), "same"),
    "divide": (FLOATS, "same"),
    "maximum": (NUMERIC, "same"),
    "minimum": (NUMERIC, "same"),
    "copysign": (FLOATS, "same"),
    "hypot": (FLOATS, "same"),
    "logaddexp": (FLOATS, "same"),
    "atan2": (FLOATS, "same"),
    "floor_divide": (NUMERIC, "same"),
    "remainder": (NUMERIC, "same"),
    "pow": (NUMERIC, "same"),  # integers in binary.comp; floats in pow.comp (double precision)
    "bitwise_and": (("bool", *INTS), "same"),
    "bitwise_or": (("bool", *INTS), "same"),
    "bitwise_xor": (("bool", *INTS), "same"),
    "bitwise_left_shift": (INTS, "same"),
    "bitwise_right_shift": (INTS, "same"),
    "logical_and": (("bool",), "same"),
    "logical_or": (("bool",), "same"),
    "logical_xor": (("bool",), "same"),
    "equal": (DTYPES, "bool"),
    "not_equal": (DTYPES, "bool"),
    "less": (NUMERIC, "bool"),
    "less_equal": (NUMERIC, "bool"),
    "greater": (NUMERIC, "bool"),
    "greater_equal": (NUMERIC, "bool"),
}

# reductions: name -> (input dtypes, result: "same" | "bool")
REDUCE: dict[str, tuple[tuple[str, ...], str]] = {
    "sum": ((*NUMERIC, *WIDE), "same"),
    "prod": ((*NUMERIC, *WIDE), "same"),
    "max": (DTYPES, "same"),
    "min": (DTYPES, "same"),
    "any": (DTYPES, "bool"),
    "all": (DTYPES, "bool"),
}
ARG_REDUCE = ("argmax", "argmin")
SORT = ("sort", "argsort")  # every dtype: keys, a bitonic network over (key, index) pairs, a gather
SORT_NETWORK = "sort_network.pairs"
SORT_MERGE = "sort_merge.pairs"  # CPU devices merge instead (no barriers)
SCAN = ("cumulative_sum", "cumulative_prod")  # inputs: DTYPES; integers and bool accumulate in int64
MATMUL_DTYPES = NUMERIC
MATMUL_DIRECT_BLOCKS = (8, 16)  # register blocks (RB x RB outputs per invocation) of matmul_direct.comp
RANDOM = {"random_uniform": FLOATS, "random_normal": FLOATS, "random_integers": ("bool", *INTS)}
FILL_WIDTHS = {1: ("BufU8", "uint8_t"), 2: ("BufU16", "uint16_t"), 4: ("BufU32", "uint"), 8: ("BufU64", "uint64_t")}


def itemsize(dtype: str) -> int:
    return (STORAGE.get(dtype) or WIDE[dtype]).itemsize


def op_code(table: dict[str, tuple[tuple[str, ...], str]], name: str) -> int:
    return list(table).index(name)


# (input, output) dtypes of sum's subgroup variants: float32 accumulators only (16/64-bit ones would
# need shaderSubgroupExtendedTypes; integer sums give int64); float16 accumulates in float32.
SUBGROUP_SUM_PAIRS = (("float16", "float16"), ("float16", "float32"), ("float32", "float32"))


def partial_dtype(dtype: str, result: str) -> str:
    """The dtype a two-pass reduction keeps its per-chunk partials in (float16 accumulates in
    float32; any/all and bool max/min in bool)."""
    if result == "bool" or dtype == "bool":
        return "bool"
    return "float32" if dtype == "float16" else dtype


def scan_dtype(dtype: str) -> str:
    """What cumulative_sum / cumulative_prod of ``dtype`` give (numpy's rule, as the core's)."""
    return dtype if dtype in FLOATS else "int64"


# ---- variants -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    name: str  # file stem of the .spv
    template: str  # shaders/<template>.comp
    slots: tuple[tuple[str, str], ...]  # (slot letter, dtype)
    defines: tuple[tuple[str, str], ...] = ()


def name_of(template: str, **slots: str) -> str:
    """The variant name of a template compiled for these slot dtypes (e.g. ``copy.Afloat32.Oint64``)."""
    return ".".join([template, *(f"{s}{d}" for s, d in slots.items())])


def _v(template: str, slots: dict[str, str]) -> Variant:
    return Variant(name_of(template, **slots), template, tuple(slots.items()))


def variants() -> list[Variant]:
    """Every SPIR-V module the plugin ships."""
    out: dict[str, Variant] = {}

    def add(v: Variant) -> None:
        out[v.name] = v

    for src in (*DTYPES, *WIDE):
        for dst in (*DTYPES, *WIDE):
            add(_v("copy", {"A": src, "O": dst}))
        add(_v("where", {"A": "bool", "B": src, "C": src, "O": src}))
        add(_v("take", {"A": src, "O": src}))
        add(_v("put", {"A": src, "O": src}))
        add(_v("argreduce", {"A": src}))
    for dtypes, result in UNARY.values():
        for d in dtypes:
            add(_v("unary", {"A": d, "O": d if result == "same" else "bool"}))
    for dtypes, result in BINARY.values():
        for d in dtypes:
            add(_v("binary", {"A": d, "B": d, "O": d if result == "same" else "bool"}))
    for d in FLOATS:
        add(_v("pow", {"A": d, "B": d, "O": d}))
    for dtypes, result in REDUCE.values():
        for d in dtypes:
            final = d if result == "same" else "bool"
            partial = partial_dtype(d, result)
            for template in ("reduce", "reduce_serial"):
                add(_v(template, {"A": d, "O": final}))
                add(_v(template, {"A": d, "O": partial}))
                add(_v(template, {"A": partial, "O": final}))
                add(_v(template, {"A": partial, "O": partial}))
    for d in DTYPES:
        add(_v("scan", {"A": d, "O": scan_dtype(d)}))
        add(_v("sort_keys", {"A": d}))
        add(_v("sort_gather", {"A": d, "O": d}))
        add(_v("searchsorted", {"A": d}))
        add(_v("nonzero", {"A": d}))
    add(Variant(SORT_NETWORK, "sort_network", ()))  # no slots: named apart from their templates' files
    add(Variant(SORT_MERGE, "sort_merge", ()))
    for a, o in SUBGROUP_SUM_PAIRS:
        add(Variant(name_of("reduce_subgroup", A=a, O=o), "reduce", (("A", a), ("O", o)), (("SUBGROUP_SUM", "1"),)))
    for d in MATMUL_DTYPES:
        add(_v("matmul", {"A": d}))
        for block in MATMUL_DIRECT_BLOCKS:
            add(Variant(name_of(f"matmul_direct{block}", A=d), "matmul_direct", (("A", d),), (("RB", str(block)),)))
    for kind, dtypes in RANDOM.items():
        for d in dtypes:
            add(_v(kind, {"O": d}))
    for width, (buf, ctype) in FILL_WIDTHS.items():
        add(Variant(f"fill.w{width}", "fill", (), (("FILL_BUF", buf), ("FILL_T", ctype))))
    return list(out.values())


def prelude(variant: Variant) -> str:
    """The ``#define`` block compiled in front of a variant's template."""
    lines = ["#version 460", "#extension GL_GOOGLE_include_directive : require", f"// variant {variant.name}"]
    if any(dtype in WIDE for _, dtype in variant.slots):
        lines += ["#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require", "#define HAS_FLOAT64 1"]
    for slot, dtype in variant.slots:
        s = STORAGE.get(dtype) or WIDE[dtype]
        lines += [
            f"#define {slot}_BUF {s.buf}",
            f"#define {slot}_T {s.compute}",
            f"#define {slot}_LOAD(v) {s.load.format('v')}",
            f"#define {slot}_STORE(v) {s.store.format('v')}",
            f"#define {slot}_IS_{s.cls.upper()} 1",
            f"#define {slot}_DTYPE_{dtype.upper()} 1",
        ]
    for key, value in variant.defines:
        lines.append(f"#define {key} {value}")
    for table, prefix in ((UNARY, "UOP"), (BINARY, "BOP"), (REDUCE, "ROP")):
        lines += [f"#define {prefix}_{name.upper()} {i}" for i, name in enumerate(table)]
    lines += [f"#define AOP_{name.upper()} {i}" for i, name in enumerate(ARG_REDUCE)]
    lines.append('#include "common.glsl"')
    lines.append(f'#include "{variant.template}.comp"')
    return "\n".join(lines) + "\n"

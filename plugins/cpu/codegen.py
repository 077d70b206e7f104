"""Generates ember-cpu's elementwise C sources from src/ember_cpu/kernels.toml.

Outputs (in csrc/, gitignored, rewritten only when their text changes):

- ``ember_cpu_ops.h``: the op codes (``enum ember_cpu_unary_op`` / ``ember_cpu_binary_op``), in the
  order of kernels.toml;
- ``gen_unary.c``, ``gen_binary.c``, ``gen_copy.c``: one strided inner loop per op x dtype (per
  dtype pair for copies) and the dispatch tables ``elementwise.c`` drives.

An inner loop handles one row: ``n`` elements, byte strides per operand.  It specialises the cases
that dominate (every operand unit-stride: a loop gcc vectorises; one input of stride 0: a scalar
hoisted out of the loop) and falls back to plain strided addressing.  The op's C code from
kernels.toml becomes a ``static inline`` function the loops call, so each expression is written
once per dtype class, never per dtype.  float16 and bfloat16 compute in float32; contiguous float16
runs convert in blocks with F16C / AVX-512 (gcc 12 does not vectorise _Float16 conversions).

Built with ``-DEMBER_CPU_LIBMVEC -fno-math-errno`` and linked with ``-lmvec`` (x86_64, glibc >=
2.35), the generated files declare glibc's SIMD variants of the libm functions they call
(``#pragma omp declare simd``), and gcc vectorises exp, log, tanh, sin, pow, ... loops with them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

KERNELS = Path(__file__).resolve().parent / "src" / "ember_cpu" / "kernels.toml"


@dataclass(frozen=True)
class DType:
    name: str  # the Array API name
    cls: str  # bool | int | uint | float | complex
    storage: str  # C type of one stored element
    compute: str = ""  # C type the op expressions see (default: the storage type)
    real: str = ""  # floating / complex: the real type ({R})
    unsigned: str = ""  # integers: an unsigned type at least as wide as int ({U})
    bits: int = 0
    limits: tuple[str, str] = ("", "")
    load: str = "$v"  # storage -> compute
    store: str = "$v"  # compute -> storage

    @property
    def enum(self) -> str:
        return f"EMBER_{self.name.upper()}"

    @property
    def ctype(self) -> str:
        return self.compute or self.storage

    @property
    def suffix(self) -> str:
        return "f" if self.real == "float" else ""


def _int(name: str, cls: str, bits: int, lo: str, hi: str) -> DType:
    return DType(name, cls, f"{name}_t", unsigned="uint64_t" if bits == 64 else "uint32_t", bits=bits, limits=(lo, hi))


# In ember.h's code order, so that DTYPES[code] is the dtype of that code.
DTYPES: list[DType] = [
    DType("bool", "bool", "uint8_t"),
    _int("int8", "int", 8, "INT8_MIN", "INT8_MAX"),
    _int("int16", "int", 16, "INT16_MIN", "INT16_MAX"),
    _int("int32", "int", 32, "INT32_MIN", "INT32_MAX"),
    _int("int64", "int", 64, "INT64_MIN", "INT64_MAX"),
    _int("uint8", "uint", 8, "0", "UINT8_MAX"),
    DType("float16", "float", "uint16_t", "float", "float", load="ember_f16_to_f32($v)",
          store="ember_f32_to_f16($v)"),
    DType("bfloat16", "float", "uint16_t", "float", "float", load="ember_bf16_to_f32($v)",
          store="ember_f32_to_bf16($v)"),
    DType("float32", "float", "float", real="float"),
    DType("float64", "float", "double", real="double"),
    DType("complex64", "complex", "float _Complex", real="float"),
    DType("complex128", "complex", "double _Complex", real="double"),
]  # fmt: skip
BY_NAME = {d.name: d for d in DTYPES}
REAL_OF = {"complex64": "float32", "complex128": "float64"}

# kernels.toml keys: a class, or a group of classes (most specific first).
GROUPS: dict[str, set[str]] = {
    "integer": {"int", "uint"},
    "real": {"int", "uint", "float"},
    "numeric": {"int", "uint", "float", "complex"},
    "any": {"bool", "int", "uint", "float", "complex"},
}
CLASSES = ("bool", "int", "uint", "float", "complex")


def _names(pred: Callable[[DType], bool]) -> list[str]:
    return [d.name for d in DTYPES if pred(d)]


# The dtype groups of ember_core/dtypes.py (kernels.toml's `dtypes` names one, or lists dtypes).
DTYPE_SETS: dict[str, list[str]] = {
    "bool": ["bool"],
    "signed_integer": _names(lambda d: d.cls == "int"),
    "unsigned_integer": _names(lambda d: d.cls == "uint"),
    "integer": _names(lambda d: d.cls in ("int", "uint")),
    "real_floating": _names(lambda d: d.cls == "float"),
    "complex_floating": _names(lambda d: d.cls == "complex"),
    "floating": _names(lambda d: d.cls in ("float", "complex")),
    "real": _names(lambda d: d.cls in ("int", "uint", "float")),
    "numeric": _names(lambda d: d.cls != "bool"),
    "integer_or_bool": _names(lambda d: d.cls in ("bool", "int", "uint")),
    "real_or_bool": _names(lambda d: d.cls != "complex"),
    "all": _names(lambda d: True),
}

ARITY = {"unary": ("x",), "binary": ("a", "b")}


def load() -> dict:
    return tomllib.loads(KERNELS.read_text())


# ---- looking up and instantiating kernels.toml's C code ------------------------------------------


def _keys_for(cls: str) -> list[str]:
    return [cls] + [g for g in GROUPS if cls in GROUPS[g]]


def _code_for(table: dict, cls: str, where: str) -> str:
    for key in _keys_for(cls):
        if key in table:
            return table[key]
    raise ValueError(f"kernels.toml: {where} has no C code for class {cls!r}")


def _check_keys(table: dict, classes: set[str], where: str, ignore: tuple[str, ...] = ()) -> None:
    """Every key must name a class or group and be the most specific match of some class used."""
    used = {next(k for k in _keys_for(c) if k in table) for c in classes if any(k in table for k in _keys_for(c))}
    for key in table:
        if key in ignore:
            continue
        if key not in CLASSES and key not in GROUPS:
            raise ValueError(f"kernels.toml: {where}: unknown key {key!r}")
        if key not in used:
            raise ValueError(f"kernels.toml: {where}: key {key!r} serves no dtype")


_PLACEHOLDER = re.compile(r"\{(T|R|U|f|CMPLX|RMAGIC|BITS|MIN|MAX|DT|DMIN|DMAX)\}")


def _placeholders(d: DType) -> dict[str, str]:
    """The placeholder values for dtype `d`; an empty value means "not defined for this dtype",
    except {f}, which is legitimately empty for double-based dtypes."""
    floating = bool(d.real)
    return {
        "T": d.ctype,
        "R": d.real,
        "U": d.unsigned,
        "f": d.suffix if floating else "",
        "CMPLX": ("CMPLXF" if d.real == "float" else "CMPLX") if floating else "",
        "RMAGIC": ("0x1p23f" if d.real == "float" else "0x1p52") if floating else "",
        "BITS": str(d.bits) if d.bits else "",
        "MIN": d.limits[0],
        "MAX": d.limits[1],
    }


def _subst(code: str, values: dict[str, str], where: str) -> str:
    def repl(m: re.Match) -> str:
        value = values.get(m.group(1), "")
        if not value and not (m.group(1) == "f" and values.get("R")):
            raise ValueError(f"kernels.toml: {where}: placeholder {m.group(0)} has no value here")
        return value

    return _PLACEHOLDER.sub(repl, code)


def _function(name: str, ret: str, params: str, code: str) -> str:
    """A static inline function from an expression or (when it says `return`) a body."""
    if re.search(r"\breturn\b", code):
        lines = [line.rstrip() for line in code.strip("\n").splitlines()]
        indent = min(len(s) - len(s.lstrip()) for s in lines if s.strip())
        body = "\n".join("    " + s[indent:] if s.strip() else "" for s in lines)
    else:
        body = f"    return {code.strip()};"
    return f"static inline {ret} {name}({params})\n{{\n{body}\n}}\n"


def _expand(template: str, **values: str) -> str:
    return Template(template).substitute(values)


def _load(d: DType, v: str) -> str:
    return _expand(d.load, v=v)


def _store(d: DType, v: str) -> str:
    return _expand(d.store, v=v)


# ---- loop templates --------------------------------------------------------------------------------

UNARY_LOOP = """\
static void $name(int64_t n, char *out, int64_t so, const char *x, int64_t sx)
{
    if (so == (int64_t)sizeof($ot) && sx == (int64_t)sizeof($it)) {
        $ot *o = ($ot *)out;
        const $it *xs = (const $it *)x;
$contig
    } else if (sx == 0 && so == (int64_t)sizeof($ot)) {  /* a fill (zeros, a broadcast made contiguous) */
        $ot *o = ($ot *)out;
        const $ot v = $scalar;
        for (int64_t i = 0; i < n; i++) o[i] = v;
    } else if (sx == 0) {
        const $ot v = $scalar;
        for (int64_t i = 0; i < n; i++) *($ot *)(out + i * so) = v;
    } else {
        for (int64_t i = 0; i < n; i++) *($ot *)(out + i * so) = $strided;
    }
}
"""

BINARY_LOOP = """\
static void $name(int64_t n, char *out, int64_t so, const char *a, int64_t sa, const char *b, int64_t sb)
{
    $ot *o = ($ot *)out;
    const $it *as = (const $it *)a, *bs = (const $it *)b;
    if (so == (int64_t)sizeof($ot) && sa == (int64_t)sizeof($it) && sb == (int64_t)sizeof($it)) {
$vv
    } else if (so == (int64_t)sizeof($ot) && sa == (int64_t)sizeof($it) && sb == 0) {
        const $ct bv = $bload;
$vs
    } else if (so == (int64_t)sizeof($ot) && sa == 0 && sb == (int64_t)sizeof($it)) {
        const $ct av = $aload;
$sv
    } else {
        for (int64_t i = 0; i < n; i++)
            *($ot *)(out + i * so) = $strided;
    }
}
"""

PRELUDE_TEMPLATE = """\
/* Generated by codegen.py from kernels.toml: do not edit. */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include "common.h"   /* the loop types and tables' declarations, the float16 converters */

$simd
/* float16 <-> float32 over short blocks: gcc 12 does not vectorise _Float16 conversions, so the
 * contiguous float16 loops convert EW_BLOCK elements at a time (common.h's block converters) and
 * run the op on float32 in between. */
#define EW_BLOCK 256
/* gcc cannot see the intrinsics fill the block buffers */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
"""

F16_LOAD = "ember_f16_to_f32($v)"
F16_STORE = "ember_f32_to_f16($v)"


# libm functions that glibc's libmvec (x86_64, glibc >= 2.35) provides in vector form, by arity.
LIBMVEC = {
    1: ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "erf", "exp", "expm1", "log", "log10",
        "log1p", "log2", "sin", "sinh", "tan", "tanh"],
    2: ["atan2", "hypot", "pow"],
}  # fmt: skip


def _simd_declarations() -> str:
    """With EMBER_CPU_LIBMVEC defined (and -fno-math-errno, and libmvec linked), gcc vectorises the
    loops that call these functions with glibc's SIMD variants (<= 4 ulp); without it they stay
    scalar calls of the same functions."""
    lines = ["#if defined(EMBER_CPU_LIBMVEC)"]
    for arity, names in LIBMVEC.items():
        for name in names:
            for real, suffix in (("float", "f"), ("double", "")):
                params = ", ".join([real] * arity)
                lines.append(f"#pragma omp declare simd notinbranch\n{real} {name}{suffix}({params});")
    lines.append("#endif")
    return "\n".join(lines) + "\n"


PRELUDE = _expand(PRELUDE_TEMPLATE, simd=_simd_declarations())


def _contig_loop(fn: str, src: DType, dst: DType, operands: list[tuple[str, bool]]) -> str:
    """The unit-stride loop `o[i] = fn(operands...)`.  An operand is (name, True) for a pointer
    read at [i], or (name, False) for a scalar already loaded.  float16 operands and results pass
    through EW_BLOCK-long float buffers (ember_f16_to_f32_block / ember_f32_to_f16_block) so that the op itself runs
    on float32 vectors."""
    vectors = [v for v, is_vector in operands if is_vector]
    operand_names = [v for v, _ in operands]
    block_in = src.load == F16_LOAD
    block_out = dst.store == F16_STORE
    if not (block_in or block_out):
        args = ", ".join(_load(src, f"{v}[i]") if v in vectors else v for v in operand_names)
        return f"        for (int64_t i = 0; i < n; i++) o[i] = {_store(dst, f'{fn}({args})')};"
    lines = [
        "        for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {",
        "            const int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;",
    ]
    args = []
    for v in operand_names:
        if v not in vectors:
            args.append(v)
        elif block_in:
            lines.append(f"            float {v}b[EW_BLOCK];")
            lines.append(f"            ember_f16_to_f32_block({v}b, {v} + i0, m);")
            args.append(f"{v}b[j]")
        else:
            args.append(_load(src, f"{v}[i0 + j]"))
    value = f"{fn}({', '.join(args)})"
    if block_out:
        lines.append("            float ob[EW_BLOCK];")
        lines.append(f"            for (int64_t j = 0; j < m; j++) ob[j] = {value};")
        lines.append("            ember_f32_to_f16_block(o + i0, ob, m);")
    else:
        lines.append(f"            for (int64_t j = 0; j < m; j++) o[i0 + j] = {_store(dst, value)};")
    lines.append("        }")
    return "\n".join(lines)


def _unary_loop(name: str, fn: str, src: DType, dst: DType) -> str:
    def apply(v: str) -> str:
        return _store(dst, f"{fn}({_load(src, v)})")

    return _expand(
        UNARY_LOOP,
        name=name,
        ot=dst.storage,
        it=src.storage,
        contig=_contig_loop(fn, src, dst, [("xs", True)]),
        scalar=apply(f"*(const {src.storage} *)x"),
        strided=apply(f"*(const {src.storage} *)(x + i * sx)"),
    )


def _binary_loop(name: str, fn: str, src: DType, dst: DType) -> str:
    return _expand(
        BINARY_LOOP,
        name=name,
        ot=dst.storage,
        it=src.storage,
        ct=src.ctype,
        aload=_load(src, "as[0]"),
        bload=_load(src, "bs[0]"),
        vv=_contig_loop(fn, src, dst, [("as", True), ("bs", True)]),
        vs=_contig_loop(fn, src, dst, [("as", True), ("bv", False)]),
        sv=_contig_loop(fn, src, dst, [("av", False), ("bs", True)]),
        strided=_store(
            dst,
            f"{fn}({_load(src, f'*(const {src.storage} *)(a + i * sa)')}, "
            f"{_load(src, f'*(const {src.storage} *)(b + i * sb)')})",
        ),
    )


def _table(ctype: str, name: str, rows: str, cols: str, entries: dict[tuple[str, str], str]) -> str:
    by_row: dict[str, list[str]] = {}
    for (row, col), value in entries.items():
        by_row.setdefault(row, []).append(f"[{col}] = {value}")
    body = "".join(f"    [{row}] = {{{', '.join(cells)}}},\n" for row, cells in by_row.items())
    return f"const {ctype} {name}[{rows}][{cols}] = {{\n{body}}};\n"


# ---- the ops -----------------------------------------------------------------------------------------


def _op_dtypes(spec: dict, where: str) -> list[DType]:
    sel = spec.get("dtypes")
    names = DTYPE_SETS.get(sel) if isinstance(sel, str) else sel
    if not names or any(n not in BY_NAME for n in names):
        raise ValueError(f"kernels.toml: {where}: bad dtypes {sel!r}")
    return [BY_NAME[n] for n in names]


def _result(spec: dict, d: DType, where: str) -> DType:
    kind = spec.get("result", "same")
    if kind == "same":
        return d
    if kind == "bool":
        return BY_NAME["bool"]
    if kind == "real":
        return BY_NAME[REAL_OF.get(d.name, d.name)]
    raise ValueError(f"kernels.toml: {where}: bad result {kind!r}")


def _gen_ops(kind: str, ops: dict[str, dict]) -> str:
    params = ARITY[kind]
    prefix = f"EMBER_CPU_{kind.upper()}"
    parts = [PRELUDE]
    loops: dict[tuple[str, str], str] = {}
    results: dict[tuple[str, str], str] = {}
    for op, spec in ops.items():
        where = f"[{kind}.{op}]"
        dtypes = _op_dtypes(spec, where)
        _check_keys(spec, {d.cls for d in dtypes}, where, ignore=("dtypes", "result"))
        parts.append(f"\n/* ---- {op} ---- */\n")
        for d in dtypes:
            out = _result(spec, d, where)
            ret = "_Bool" if out.name == "bool" else out.ctype
            fn = f"ew_{op}_{d.name}"
            code = _subst(_code_for(spec, d.cls, where), _placeholders(d), f"{where} {d.name}")
            parts.append(_function(fn, ret, ", ".join(f"{d.ctype} {p}" for p in params), code))
            loop = f"ew_{kind}_{op}_{d.name}"
            parts.append((_unary_loop if kind == "unary" else _binary_loop)(loop, fn, d, out))
            loops[(f"{prefix}_{op.upper()}", d.enum)] = loop
            results[(f"{prefix}_{op.upper()}", d.enum)] = out.enum
    loop_type = "ember_ew_loop1" if kind == "unary" else "ember_ew_loop2"
    parts.append("\n")
    parts.append(_table(loop_type, f"ember_ew_{kind}_loops", f"{prefix}_COUNT", "EMBER_NUM_DTYPES", loops))
    parts.append(_table("int8_t", f"ember_ew_{kind}_result", f"{prefix}_COUNT", "EMBER_NUM_DTYPES", results))
    return "".join(parts)


# ---- astype ------------------------------------------------------------------------------------------

BF16_VIA_DOUBLE = ("int32_t", "int64_t", "double", "double _Complex")

COPY_HELPERS = """
/* double -> bfloat16 rounded once: round to odd into float32, then to nearest even. */
static inline uint16_t ew_f64_to_bf16(double d)
{
    float f = (float)d;
    if (isfinite(f) && (double)f != d) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if (!(bits & 1u)) bits += fabs((double)f) > fabs(d) ? -1u : 1u;
        memcpy(&f, &bits, 4);
    }
    return ember_f32_to_bf16(f);
}
"""


def _copy_target(src: DType, dst: DType) -> tuple[str, str]:
    """The C type a value is converted to on its way into `dst`, and the store from that type."""
    if dst.name == "float16":
        if src.ctype == "float":  # float32 / bfloat16 / float16 sources: the block path
            return "float", F16_STORE
        return "_Float16", "ember_f16_bits($v)"  # one rounding from double / integers
    if dst.name == "bfloat16":
        if src.ctype in BF16_VIA_DOUBLE:
            return "double", "ew_f64_to_bf16($v)"
        return "float", "ember_f32_to_bf16($v)"
    return ("_Bool" if dst.name == "bool" else dst.ctype), "$v"


def _gen_copy(copy: dict[str, dict]) -> str:
    parts = [PRELUDE, COPY_HELPERS]
    loops: dict[tuple[str, str], str] = {}
    for key, table in copy.items():
        if key not in CLASSES and key not in GROUPS:
            raise ValueError(f"kernels.toml: [copy.{key}]: unknown destination class")
        _check_keys(table, set(CLASSES), f"[copy.{key}]")
    for dst in DTYPES:
        dst_key = next((k for k in _keys_for(dst.cls) if k in copy), None)
        if dst_key is None:
            raise ValueError(f"kernels.toml: no [copy.*] table for destination {dst.name}")
        for src in DTYPES:
            loop = f"ew_copy_{src.name}_to_{dst.name}"
            if src == dst:  # the stored bits, unchanged
                same = DType(src.name, src.cls, src.storage)
                parts.append(_unary_loop(loop, "", same, same))
            else:
                where = f"[copy.{dst_key}] {src.name} -> {dst.name}"
                values = _placeholders(src) | {"DMIN": dst.limits[0], "DMAX": dst.limits[1]}
                cvt, store = _copy_target(src, dst)
                values["DT"] = cvt
                code = _subst(_code_for(copy[dst_key], src.cls, where), values, where)
                fn = f"ew_cvt_{src.name}_to_{dst.name}"
                parts.append(_function(fn, cvt, f"{src.ctype} x", code))
                target = DType(dst.name, dst.cls, dst.storage, store=store)
                parts.append(_unary_loop(loop, fn, src, target))
            loops[(dst.enum, src.enum)] = loop
    parts.append("\n")
    parts.append(_table("ember_ew_loop1", "ember_ew_copy_loops", "EMBER_NUM_DTYPES", "EMBER_NUM_DTYPES", loops))
    return "".join(parts)


# ---- the header ----------------------------------------------------------------------------------------

HEADER_DOC = """\
/* Generated by codegen.py from kernels.toml: do not edit.
 *
 * Op codes of ember_cpu_unary / ember_cpu_binary (and their _contig forms), numbered in the order
 * of kernels.toml; the dtypes each op accepts and its result dtype are stated there.  Values are
 * user data, so no input traps or invokes undefined behaviour:
 *   - integer arithmetic wraps modulo 2**bits (abs / negative of MIN give MIN);
 *   - integer floor_divide / remainder by 0 give 0; MIN // -1 gives MIN, MIN % -1 gives 0;
 *   - shifts by a count < 0 or >= the bit width give 0 (right shift of a negative value: -1);
 *   - integer pow with a negative exponent gives 1 for base 1, +-1 for base -1, 0 otherwise;
 *   - floating maximum / minimum propagate NaN; remainder takes the sign of the divisor.
 * float16 / bfloat16 ops compute in float32 and round the result once.
 * ember_cpu_copy (astype): float -> integer truncates toward zero and SATURATES: NaN gives 0 and
 * values beyond the target's range give its min / max; integer -> narrower integer wraps; complex
 * -> real drops the imaginary part; anything -> bool is != 0; to float16 / bfloat16 rounds to
 * nearest even once (int64 -> bfloat16: once from the int64's nearest double).
 */
"""


def _enum(name: str, prefix: str, ops: list[str]) -> str:
    body = "".join(f"    {prefix}_{op.upper()} = {i},\n" for i, op in enumerate(ops))
    return f"enum {name} {{\n{body}    {prefix}_COUNT = {len(ops)}\n}};\n"


def generate(csrc: Path) -> None:
    table = load()
    header = (
        HEADER_DOC
        + _enum("ember_cpu_unary_op", "EMBER_CPU_UNARY", list(table["unary"]))
        + _enum("ember_cpu_binary_op", "EMBER_CPU_BINARY", list(table["binary"]))
    )
    _write_if_changed(csrc / "ember_cpu_ops.h", header)
    _write_if_changed(csrc / "gen_unary.c", _gen_ops("unary", table["unary"]))
    _write_if_changed(csrc / "gen_binary.c", _gen_ops("binary", table["binary"]))
    _write_if_changed(csrc / "gen_copy.c", _gen_copy(table["copy"]))


def _write_if_changed(path: Path, text: str) -> None:
    """Keeps mtimes stable so that rebuilding an unchanged tree recompiles nothing."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


if __name__ == "__main__":
    generate(Path(__file__).resolve().parent / "src" / "ember_cpu" / "csrc")

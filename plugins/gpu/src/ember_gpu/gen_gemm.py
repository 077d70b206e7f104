"""ember's own tiled GEMM (csrc/eg_gemm.h), one image: ``eg_gemm_<dtype>`` for every floating dtype
matmul serves (real and complex), and ``eg_gemm_epilogue_<dtype>``, the same with the store's bias and
relu.  Each dtype is a struct of its stored and accumulation types (float16 / bfloat16 accumulate in
float32, as cuBLAS does for ember), its load and store, its fused multiply-add (explicit, so that the
host and every GPU round alike), its alpha / beta from the kernel's doubles and its relu (for the
epilogue).  The tile shapes are per dtype here (``TILES``), and ``ember_gpu.blas`` sizes its grids from them."""

from __future__ import annotations

from typing import NamedTuple

from ember_gpu.codegen import DTYPES, HEADER, DType, Source


class Tile(NamedTuple):
    """A block's tile of c (bm x bn), its step along k (bk) and each thread's micro-tile (tm x tn):
    (bm / tm) * (bn / tn) is EG_BLOCK threads."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int


_WIDE = Tile(128, 128, 8, 8, 8)  # 64 float accumulators a thread
_NARROW = Tile(64, 64, 8, 4, 4)  # 16 accumulators of 8 or 16 bytes a thread
TILES = {"float16": _WIDE, "bfloat16": _WIDE, "float32": _WIDE, "float64": _NARROW, "complex64": _NARROW,
         "complex128": _NARROW}


def _madd(d: DType) -> str:
    """acc + x * y, fused: a real fma, or a complex product-and-add as two fma chains per part."""
    f = d.suffix
    if d.cls == "complex":
        return (f"eg_cmplx(fma{f}(x.re, y.re, fma{f}(-x.im, y.im, acc.re)), "
                f"fma{f}(x.re, y.im, fma{f}(x.im, y.re, acc.im)))")
    return f"fma{f}(x, y, acc)"


def _scalar(d: DType) -> str:
    return f"eg_cmplx(({d.real})v[0], ({d.real})v[1])" if d.cls == "complex" else f"({d.compute})v[0]"


def _relu(d: DType) -> str:
    """maximum(v, 0) with NaN and -0 kept (a comparison false for both); complex: v (never asked)."""
    return "v" if d.cls == "complex" else "v < C(0) ? C(0) : v"


def dtype_struct(d: DType) -> str:
    """The D of eg_gemm.h for dtype d (its comment says what each member is)."""
    hd = "static EG_HD EG_INLINE"
    return (f"struct eg_gemm_{d.name}_t {{\n    typedef {d.storage} T;\n    typedef {d.compute} C;\n"
            f"    {hd} C load(T v) {{ return {d.load.replace('$v', 'v')}; }}\n"
            f"    {hd} T store(C v) {{ return {d.store.replace('$v', 'v')}; }}\n"
            f"    {hd} C madd(C x, C y, C acc) {{ return {_madd(d)}; }}\n"
            f"    {hd} C scalar(const double *v) {{ return {_scalar(d)}; }}\n"
            f"    {hd} C relu(C v) {{ return {_relu(d)}; }}\n}};\n")


def sources() -> dict[str, Source]:
    parts, kernels = [HEADER], []
    for d in DTYPES:
        tile = TILES.get(d.name)
        if tile is None:
            continue
        parts.append(dtype_struct(d))
        parts.append(f"EG_GEMM_KERNEL({d.name}, eg_gemm_{d.name}_t, {', '.join(map(str, tile))})\n\n")
        kernels += [f"eg_gemm_{d.name}", f"eg_gemm_epilogue_{d.name}"]
    return {"gemm": Source("".join(parts), kernels)}

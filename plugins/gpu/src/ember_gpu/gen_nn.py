"""The nn kernels of csrc/eg_nn.h and csrc/eg_norm.h: ``eg_softmax_<softmax|log_softmax>_<dtype>``
(image softmax), ``eg_loss_<nll_loss|nll_loss_grad>_<dtype>`` (image loss), ``eg_norm_rows_<dtype>``
(image norm: layer_norm and group_norm) and ``eg_dropout_dropout_<dtype>`` (image dropout), for the
registry's dtypes of those ops (the real floating ones).  Each dtype is a struct of its storage and
compute types, its load and store (float16 / bfloat16 compute in float32 and round once) and the
exp of its compute type.  nn.toml's activations (relu, gelu, silu) are elementwise kernels
(kernels.toml)."""

from __future__ import annotations

from ember_gpu.codegen import DTYPES, HEADER, DType, Source

IMAGES = {"softmax": ("softmax", "log_softmax"), "loss": ("nll_loss", "nll_loss_grad"), "norm": ("rows",),
          "dropout": ("dropout",)}
SERVES = {"norm": ("layer_norm", "group_norm")}  # the registry's ops of an image, where not its kernels'


def registry_dtypes(ops: tuple[str, ...]) -> list[DType]:
    from ember_core.ops.registry import REGISTRY

    names = set.intersection(*({d.name for d in REGISTRY[op].dtypes} for op in ops))
    return [d for d in DTYPES if d.name in names]


def dtype_struct(d: DType) -> str:
    """The dtype struct eg_nn.h's templates take (its comment says what each member is)."""
    name, f, hd = f"eg_nn_{d.name}", d.suffix, "static EG_HD EG_INLINE"
    return (f"struct {name} {{\n    typedef {d.storage} T;\n    typedef {d.compute} C;\n"
            f"    {hd} C load(T v) {{ return {d.load.replace('$v', 'v')}; }}\n"
            f"    {hd} T store(C v) {{ return {d.store.replace('$v', 'v')}; }}\n"
            f"    {hd} C exponential(C v) {{ return exp{f}(v); }}\n}};\n")


def sources() -> dict[str, Source]:
    out = {}
    for image, ops in IMAGES.items():
        parts, kernels = [HEADER], []
        for d in registry_dtypes(SERVES.get(image, ops)):
            parts.append(dtype_struct(d))
            parts.append(f"EG_{image.upper()}_KERNELS({d.name}, eg_nn_{d.name})\n\n")
            kernels += [f"eg_{image}_{op}_{d.name}" for op in ops]
        out[image] = Source("".join(parts), kernels)
    return out

"""The nn and optimizer kernels of csrc/eg_nn.h, eg_norm.h and eg_optim.h, one image per entry of IMAGES, for the
registry's dtypes of the ops they serve (the real floating ones).  Each dtype is a struct of its storage and
compute types, its load and store (float16 / bfloat16 compute in float32 and round once) and the
exp of its compute type.  nn.toml's activations (relu, gelu, silu) are elementwise kernels
(kernels.toml)."""

from __future__ import annotations

from ember_gpu.codegen import DTYPES, HEADER, DType, Source

POOL_OPS = ("max_pool2d", "max_pool2d_grad", "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad",
            "adaptive_avg_pool2d")  # csrc/eg_pool.h: eg_pool_<op>_<dtype>

CONV_KERNELS = ("im2col", "col2im", "direct", "direct_input_grad",
                "direct_weight_grad")  # csrc/eg_conv.h: eg_conv_<kernel>_<dtype>

# image -> (its kernels' prefixes, each followed by _<dtype>; the registry ops they serve)
IMAGES = {
    "softmax": (("eg_softmax_softmax", "eg_softmax_log_softmax"), ("softmax", "log_softmax")),
    "loss": (("eg_loss_nll_loss", "eg_loss_nll_loss_grad"), ("nll_loss", "nll_loss_grad")),
    "norm": (("eg_norm_rows", "eg_batchnorm_train", "eg_normgrad_rows", "eg_normgrad_channels", "eg_normgrad_bninput"),
             ("layer_norm", "group_norm", "batch_norm_train", "batch_norm_backward_reduce", "batch_norm_input_grad",
              "layer_norm_input_grad", "layer_norm_affine_grad", "group_norm_input_grad", "group_norm_affine_grad")),
    "dropout": (("eg_dropout_dropout",), ("dropout",)),
    "optim": (("eg_update_sgd", "eg_update_adam", "eg_updates_sgd", "eg_updates_adam"), ("sgd_step", "adam_step")),
    "conv": (tuple(f"eg_conv_{kernel}" for kernel in CONV_KERNELS),
             ("conv2d", "conv2d_input_grad", "conv2d_weight_grad", "linear")),
    "pool": (tuple(f"eg_pool_{op}" for op in POOL_OPS), POOL_OPS),
}


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
    for image, (prefixes, ops) in IMAGES.items():
        parts, kernels = [HEADER], []
        for d in registry_dtypes(ops):
            parts.append(dtype_struct(d))
            parts.append(f"EG_{image.upper()}_KERNELS({d.name}, eg_nn_{d.name})\n\n")
            kernels += [f"{prefix}_{d.name}" for prefix in prefixes]
        out[image] = Source("".join(parts), kernels)
    return out

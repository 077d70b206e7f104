"""Which generator makes the samples of an op: by name for ops with their own rules, else by family."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember_conformance.samples import data, elementwise, linalg, nn, randomness, reductions, sorting, views
from ember_conformance.samples.base import Sample

Generator = Callable[[Any, str, str, int], list[Sample]]

BY_NAME: dict[str, Generator] = {
    "astype": data.astype, "copy": data.copy, "full": data.full, "where": data.where, "take": data.take,
    "index_put": data.index_put, "nonzero": data.nonzero, "concat": data.concat, "stack": data.stack,
    "tril": data.triangle, "triu": data.triangle, "repeat": data.repeat, "roll": data.roll, "tile": data.tile,
    "unstack": data.unstack, "clip": data.clip, "relu": elementwise.unary,
    "mean": reductions.reduction, "var": reductions.reduction, "std": reductions.reduction,
    "count_nonzero": reductions.reduction,
    "vecdot": linalg.vecdot, "tensordot": linalg.tensordot, "conv2d": nn.conv2d_fused,
    "linear": nn.linear, "max_pool2d": nn.pool, "avg_pool2d": nn.pool, "adaptive_avg_pool2d": nn.pool,
    "softmax": nn.softmax, "log_softmax": nn.softmax, "conv2d_input_grad": nn.through_gradients,
    "conv2d_weight_grad": nn.through_gradients, "max_pool2d_grad": nn.through_gradients,
    "max_pool2d_select": nn.through_gradients, "avg_pool2d_grad": nn.through_gradients,
    "nll_loss": nn.nll_loss, "nll_loss_grad": nn.through_gradients, "adam_step": nn.adam_step,
    "sgd_step": nn.sgd_step, "batch_norm_train": nn.batch_norm, "batch_norm_backward_reduce": nn.through_gradients,
    "batch_norm_input_grad": nn.through_gradients, "layer_norm": nn.layer_norm,
    "layer_norm_input_grad": nn.through_gradients, "layer_norm_affine_grad": nn.through_gradients,
    "group_norm": nn.group_norm, "group_norm_input_grad": nn.through_gradients,
    "group_norm_affine_grad": nn.through_gradients,
    "unique_all": sorting.unique, "unique_counts": sorting.unique, "unique_inverse": sorting.unique,
    "unique_values": sorting.unique, "bernoulli": randomness.bernoulli, "permutation": randomness.permutation,
    "dropout": randomness.dropout,
}
BY_FAMILY: dict[str, Generator] = {
    "unary": elementwise.unary, "binary": elementwise.binary, "reduction": reductions.reduction,
    "arg_reduction": reductions.arg_reduction, "scan": reductions.scan, "sort": sorting.sort,
    "searchsorted": sorting.searchsorted, "matmul": linalg.matmul, "random": randomness.random_op,
    "copy": data.copy, "fill": data.full, "where": data.where, "take": data.take, "put": data.index_put,
    "nonzero": data.nonzero, "conv": linalg.conv2d, "pool": nn.pool, "softmax": nn.softmax, "linear": nn.linear,
    "view": views.view_op,
}


def generator_for(schema: Any) -> Generator | None:
    return BY_NAME.get(schema.name) or BY_FAMILY.get(schema.family)


def samples_for(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    """The samples of one op in one dtype (level 1 adds error inputs and integer-input samples)."""
    generator = generator_for(schema)
    return [] if generator is None else generator(schema, dtype, device, level)

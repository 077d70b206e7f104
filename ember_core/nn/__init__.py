"""``ember_core.nn``: modules, layers, losses, ``functional`` and ``init``, written against the
public core API only, so they run on every backend.  Modelled on ``torch.nn``."""

from ember_core.nn import functional, init
from ember_core.nn.layers import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    BCEWithLogitsLoss,
    Conv2d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    GroupNorm,
    Identity,
    LayerNorm,
    Linear,
    LogSoftmax,
    MaxPool2d,
    MSELoss,
    NLLLoss,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from ember_core.nn.module import Module, ModuleList, Sequential
from ember_core.nn.parameter import Parameter

__all__ = [
    "GELU", "AdaptiveAvgPool2d", "AvgPool2d", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "Conv2d",
    "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GroupNorm", "Identity", "LayerNorm", "Linear", "LogSoftmax",
    "MSELoss", "MaxPool2d", "Module", "ModuleList", "NLLLoss", "Parameter", "ReLU", "SiLU", "Sequential",
    "Sigmoid", "Softmax", "Tanh", "functional", "init",
]

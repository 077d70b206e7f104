"""Datasets: anything with ``__len__`` and ``__getitem__``; ``TensorDataset`` indexes tensors along
their first dim and serves whole batches with one gather per tensor."""

from __future__ import annotations

from typing import Any

from ember_core.errors import ShapeError
from ember_core.tensor import Tensor


class Dataset:
    """Subclasses implement ``__len__`` and ``__getitem__(index) -> sample``."""

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


class TensorDataset(Dataset):
    """Sample i is ``tuple(t[i] for t in tensors)``; an index tensor gives a whole batch at once."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset holds ember tensors, got {type(t).__name__}")
            if t.ndim == 0 or t.shape[0] != tensors[0].shape[0]:
                raise ShapeError(f"TensorDataset: every tensor needs the same first dim, got shapes "
                                 f"{[x.shape for x in tensors]}")
        self.tensors = tensors

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        if isinstance(index, Tensor):
            return tuple(t[index.to_device(t.device)] for t in self.tensors)
        return tuple(t[index] for t in self.tensors)

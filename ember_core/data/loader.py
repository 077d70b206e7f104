"""``DataLoader``: batches of a dataset, in order or shuffled by a permutation drawn from ember's
random generator (``ember_core.manual_seed`` or an explicit ``generator`` makes it reproducible)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ember_core as em
from ember_core.data.dataset import Dataset, TensorDataset
from ember_core.tensor import Tensor


def default_collate(samples: Sequence[Any]) -> Any:
    """Stack a list of samples: tensors along a new first dim, numbers into a tensor, tuples,
    lists and dicts field by field."""
    first = samples[0]
    if isinstance(first, Tensor):
        return em.stack(list(samples))
    if isinstance(first, (bool, int, float)):
        return em.asarray(list(samples))
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(default_collate(list(field)) for field in zip(*samples))
    raise TypeError(f"default_collate cannot batch {type(first).__name__} samples; pass collate_fn")


class DataLoader:
    """Iterates over batches of ``batch_size`` samples; ``shuffle`` draws a new order each epoch
    from ``generator`` (default: the cpu generator), ``drop_last`` drops a short final batch."""

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 generator: Any = None, collate_fn: Callable[[Sequence[Any]], Any] | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.generator, self.collate_fn = generator, collate_fn or default_collate

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self) -> Tensor:
        n = len(self.dataset)
        if self.shuffle:
            return em.permutation(n, device="cpu", generator=self.generator)
        return em.arange(n, device="cpu")

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        whole_batches = isinstance(self.dataset, TensorDataset) and self.collate_fn is default_collate
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            indices = order[start:start + self.batch_size]
            if whole_batches:
                yield self.dataset[indices]
            else:
                yield self.collate_fn([self.dataset[i] for i in indices.tolist()])

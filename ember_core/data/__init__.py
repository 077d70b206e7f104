"""``ember_core.data``: ``Dataset``, ``TensorDataset`` and ``DataLoader`` (batching, shuffling
driven by ember's random generator, drop_last).  Modelled on ``torch.utils.data``."""

from ember_core.data.dataset import Dataset, TensorDataset
from ember_core.data.loader import DataLoader, default_collate

__all__ = ["DataLoader", "Dataset", "TensorDataset", "default_collate"]

"""Dataset, TensorDataset and DataLoader: batching, shuffling from ember's generator, drop_last."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
from ember_core.data import DataLoader, Dataset, TensorDataset, default_collate


def dataset(n=10):
    return TensorDataset(em.arange(n), em.asarray(np.arange(n * 2, dtype=np.float32).reshape(n, 2)))


def test_tensor_dataset_indexing():
    ds = dataset()
    assert len(ds) == 10
    x, y = ds[3]
    assert x.item() == 3 and y.tolist() == [6.0, 7.0]
    xs, ys = ds[em.asarray([4, 1])]
    assert xs.tolist() == [4, 1] and ys.shape == (2, 2)
    with pytest.raises(em.ShapeError):
        TensorDataset(em.zeros(3), em.zeros(4))
    with pytest.raises(TypeError):
        TensorDataset(np.zeros(3))


@pytest.mark.parametrize(("batch_size", "drop_last", "sizes"), [(4, False, [4, 4, 2]), (4, True, [4, 4]),
                                                                 (10, False, [10]), (20, True, [])])
def test_batches_in_order(batch_size, drop_last, sizes):
    loader = DataLoader(dataset(), batch_size=batch_size, drop_last=drop_last)
    batches = list(loader)
    assert len(loader) == len(sizes) and [b[0].shape[0] for b in batches] == sizes
    assert [v for b in batches for v in b[0].tolist()] == list(range(sum(sizes)))


def test_shuffle_is_a_permutation_reproducible_from_the_generator():
    def epoch(loader):
        return [v for xs, _ in loader for v in xs.tolist()]

    loader = DataLoader(dataset(50), batch_size=8, shuffle=True, generator=em.random.Generator("cpu", 7))
    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == list(range(50)) and first != list(range(50)) and first != second
    again = DataLoader(dataset(50), batch_size=8, shuffle=True, generator=em.random.Generator("cpu", 7))
    assert epoch(again) == first
    em.manual_seed(11)
    a = epoch(DataLoader(dataset(50), batch_size=8, shuffle=True))
    em.manual_seed(11)
    assert epoch(DataLoader(dataset(50), batch_size=8, shuffle=True)) == a


class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": em.full((2,), float(i)), "y": i * i}


def test_generic_datasets_are_collated_field_by_field():
    batches = list(DataLoader(Squares(), batch_size=2))
    assert [b["y"].tolist() for b in batches] == [[0, 1], [4, 9], [16]]
    assert batches[1]["x"].tolist() == [[2.0, 2.0], [3.0, 3.0]]
    assert default_collate([(1, 2.0), (3, 4.0)])[1].tolist() == [2.0, 4.0]
    custom = list(DataLoader(Squares(), batch_size=5, collate_fn=lambda items: len(items)))
    assert custom == [5]
    with pytest.raises(TypeError, match="collate_fn"):
        default_collate([object()])


def test_loader_rejects_bad_arguments():
    with pytest.raises(ValueError):
        DataLoader(dataset(), batch_size=0)
    with pytest.raises(NotImplementedError):
        len(Dataset())

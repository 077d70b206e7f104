"""Files ember writes open in PyTorch through the safetensors package, and the reverse, for every dtype
both have; ember's private complex128 code is rejected cleanly there."""

from __future__ import annotations

import pytest
from serialization_files import raw_values, sample

import ember_core as em

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")
TORCH_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
                "complex64"]


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_ember_files_open_in_pytorch(tmp_path, name):
    t = sample(em.dtypes.BY_NAME[name], (4, 3))
    em.save({"w": t, "b": em.arange(3, dtype=em.float32)}, tmp_path / "f.safetensors")
    loaded = st_torch.load_file(tmp_path / "f.safetensors")
    assert loaded["w"].dtype == getattr(torch, name) and tuple(loaded["w"].shape) == (4, 3)
    assert loaded["w"].contiguous().view(torch.uint8).numpy().tobytes() == raw_values(t).tobytes()
    assert loaded["b"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_pytorch_files_open_in_ember(tmp_path, name):
    source = torch.arange(12, dtype=torch.float64).reshape(3, 4).to(getattr(torch, name))
    st_torch.save_file({"x": source, "e": torch.zeros(0, 2)}, tmp_path / "f.safetensors", metadata={"k": "v"})
    back = em.load(tmp_path / "f.safetensors")
    assert back["x"].dtype == name and back["x"].shape == (3, 4) and back["e"].shape == (0, 2)
    assert raw_values(back["x"]).tobytes() == source.view(torch.uint8).numpy().tobytes()


def test_safetensors_rejects_ember_complex128_cleanly(tmp_path):
    em.save({"z": em.asarray([1 + 2j], dtype=em.complex128)}, tmp_path / "f")
    from safetensors import SafetensorError

    with pytest.raises(SafetensorError, match=r"unknown variant `EMBER_C128`"):
        st_torch.load_file(tmp_path / "f")

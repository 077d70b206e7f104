"""em.load of damaged or hostile files: each problem is a SerializationError naming the file and the problem,
raised before anything large is allocated; a bounded hypothesis fuzz of the header parser finds no other error."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serialization_files import read_header, rewrite_header, write_raw

import ember_core as em


@pytest.fixture
def saved(tmp_path) -> Path:
    path = tmp_path / "model.safetensors"
    base = em.arange(6, dtype=em.float32)
    em.save({"w": base, "v": base[1:3], "b": em.ones(2, dtype=em.int64)}, path)
    return path


def entry(dtype="F32", shape=(2,), offsets=(0, 8)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def load_fails(path: Path, problem: str) -> None:
    with pytest.raises(em.SerializationError, match=problem) as info:
        em.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("size", [0, 5, 8])
def test_truncated_files(tmp_path, size):
    path = tmp_path / "t"
    path.write_bytes(b"\x10" * size)
    load_fails(path, "truncated|beyond the end")


def test_a_file_cut_inside_the_data(saved):
    saved.write_bytes(saved.read_bytes()[:-4])
    load_fails(saved, r"data_offsets .* outside the data section")


def test_header_length_beyond_the_file_and_absurd(tmp_path):
    path = tmp_path / "h"
    path.write_bytes((1000).to_bytes(8, "little") + b"{}")
    load_fails(path, "beyond the end of the file")
    path.write_bytes((2**63).to_bytes(8, "little") + b"{}")
    load_fails(path, "absurd")


@pytest.mark.parametrize(("header", "problem"), [
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{not json", "not JSON"),
    (b"[1, 2]", "JSON list, not an object"),
    (b'{"a": ' + json.dumps(entry()).encode() + b', "a": ' + json.dumps(entry()).encode() + b"}", "duplicate name 'a'"),
    (json.dumps({"a": entry(dtype="F8_E4M3")}).encode(), "unknown dtype 'F8_E4M3'"),
    (json.dumps({"a": entry(dtype=7)}).encode(), "unknown dtype 7"),
    (json.dumps({"a": entry(shape=(3,))}).encode(), "needs 12 bytes, its data_offsets give 8"),
    (json.dumps({"a": entry(shape=(-2,), offsets=(0, 0))}).encode(), "non-negative"),
    (json.dumps({"a": entry(shape=(2**40, 2**40), offsets=(0, 8))}).encode(), "needs .* bytes"),
    (json.dumps({"a": entry(), "b": entry(offsets=(4, 12))}).encode(), "overlap"),
    (json.dumps({"a": entry(offsets=(8, 16))}).encode(), "outside the data section"),
    (json.dumps({"a": entry(offsets=(8, 0))}).encode(), "outside the data section"),
    (json.dumps({"a": {"dtype": "F32", "shape": [2]}}).encode(), "exactly dtype, shape and data_offsets"),
    (json.dumps({"__metadata__": {"k": 1}}).encode(), "strings to strings"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply|not JSON"),
], ids=lambda v: v[:24].decode("latin-1") if isinstance(v, bytes) else None)
def test_malformed_headers(tmp_path, header, problem):
    path = tmp_path / "bad"
    write_raw(path, header, bytes(12))
    load_fails(path, problem)


def test_absurd_sizes_fail_before_any_allocation(tmp_path):
    path = tmp_path / "huge"
    write_raw(path, json.dumps({"a": entry(dtype="F64", shape=(2**61,), offsets=(0, 2**64))}).encode(), bytes(8))
    tracemalloc.start()
    try:
        load_fails(path, "outside the data section")
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda s: s["$dict"][1][1].update(offset=5), "reaches outside"),
    (lambda s: s["$dict"][1][1].update(strides=[-5]), "reaches outside"),
    (lambda s: s["$dict"][1][1].update(shape=[2, 2]), "malformed layout"),
    (lambda s: s["$dict"][1][1].update({"$tensor": "missing"}), "entry 'missing'"),
    (lambda s: s["$dict"][1][1].update(dtype="float8"), "malformed layout"),
    (lambda s: s["$dict"].append([{"$set": [1]}, 1]), r"malformed '\$set' node"),
    (lambda s: s["$dict"].append([[1], 1]), "dict key of type list"),
    (lambda s: s["$dict"][1][1].pop("id"), "without its id"),
])
def test_malformed_structure(saved, edit, problem):
    rewrite_header(saved, lambda header: edit(header["structure"]))
    load_fails(saved, problem)


def test_an_unknown_format_version_says_to_upgrade(saved):
    rewrite_header(saved, lambda header: header["__metadata__"].update({"ember.format": "99"}))
    load_fails(saved, "version '99'.*upgrade ember")


def test_loading_runs_no_code(saved):
    """A structure naming a class or a callable is data, never looked up."""
    rewrite_header(saved, lambda header: header["structure"]["$dict"].append(
        [{"$class": "os.system"}, {"$reduce": ["os.system", ["echo pwned"]]}]))
    load_fails(saved, "malformed")


_ENTRY = st.fixed_dictionaries({
    "dtype": st.sampled_from(["F32", "I64", "BF16", "EMBER_C128", "X", 3]),
    "shape": st.lists(st.integers(-2, 2**40), max_size=4) | st.just("s"),
    "data_offsets": st.lists(st.integers(-8, 64), min_size=0, max_size=3),
})
_HEADERS = (
    st.dictionaries(st.text(max_size=4), _ENTRY, max_size=4).map(lambda h: json.dumps(h).encode())
    | st.binary(max_size=64)
    | st.recursive(st.none() | st.integers() | st.text(max_size=3), lambda c: st.lists(c) | st.dictionaries(
        st.text(max_size=3), c), max_leaves=10).map(lambda h: json.dumps(h).encode())
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=_HEADERS, data=st.binary(max_size=64), declared=st.none() | st.integers(0, 2**64 - 1))
def test_fuzzed_headers_load_or_fail_cleanly(tmp_path, header, data, declared):
    path = tmp_path / "fuzz"
    length = len(header) if declared is None else declared
    path.write_bytes(length.to_bytes(8, "little") + header + data)
    try:
        em.load(path)
    except em.SerializationError as exc:
        assert str(path) in str(exc)


def test_the_fixture_file_itself_loads(saved):
    back = em.load(saved)
    assert back["v"].tolist() == [1, 2] and back["b"].tolist() == [1, 1]
    assert set(read_header(saved)[0]) == {"__metadata__", "w", "b"}

"""The op registry: declarations drive the namespace; malformed entries name file, op and problem."""

from __future__ import annotations

import pytest

import ember_core as em
from ember_core.ops import registry
from ember_core.ops.registry import REGISTRY, Registry


def write(tmp_path, text):
    path = tmp_path / "ops.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[ops.f]\nfamily = "unary"\ndtypes = "all"\n', "missing required field 'signature'"),
        ('[ops.f]\nsignature = "(x: Tensor"\nfamily = "unary"\ndtypes = "all"\n', "not valid Python syntax"),
        ('[ops.f]\nsignature = "(x) -> Tensor"\nfamily = "unary"\ndtypes = "all"\n', "needs a type annotation"),
        ('[ops.f]\nsignature = "(x: Tensr) -> Tensor"\nfamily = "unary"\ndtypes = "all"\n', "unknown type 'Tensr'"),
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "floats"\n', "unknown dtype"),
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\ncolour = 1\n',
         "unknown field"),
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\nkind = "composite"\n',
         "needs a 'composite' field"),
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\nderivatives = {y = "g"}\n',
         "derivative given for 'y'"),
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\nderivatives = {grad = "g"}\n',
         "derivative given for 'grad'"),  # a rewritten gradient is a derivative term now
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\n'
         'derivative_terms = {x = "x * 2"}\n', "derivative term 'x' must be a new identifier"),
        ('[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\n'
         'derivative_terms = {result = "x"}\n', "derivative term 'result'"),
    ],
)
def test_malformed_entries_name_file_op_and_problem(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(em.RegistryError) as info:
        Registry().load_file(path)
    assert str(path) in str(info.value) and "'f'" in str(info.value) and message in str(info.value)


def test_unknown_family_is_rejected_when_installed(tmp_path):
    path = write(tmp_path, '[ops.f]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "magic"\ndtypes = "all"\n')
    with pytest.raises(em.RegistryError, match=r"op 'f': unknown family 'magic'; known: .*binary"):
        em.ops.load_vendor_file(str(path))


def test_duplicate_op_is_rejected(tmp_path):
    path = write(tmp_path, '[ops.add]\nsignature = "(x: Tensor) -> Tensor"\nfamily = "unary"\ndtypes = "all"\n')
    with pytest.raises(em.RegistryError, match="already declared"):
        REGISTRY.load_file(path)


def test_every_op_is_callable_from_namespace_and_has_its_doc():
    for schema in REGISTRY:
        fn = em.ops.namespace
        for part in schema.name.split("."):  # vendor ops other tests declared live in sub-namespaces
            fn = getattr(fn, part)
        assert schema.name in fn.__doc__
        if "." not in schema.name:
            assert getattr(em, schema.name) is fn


def test_methods_and_operators_come_from_the_registry():
    assert em.Tensor.__add__ is not None and em.Tensor.sum is em.sum
    x = em.asarray([1.0, -2.0])
    assert (-x).tolist() == [-1.0, 2.0] and abs(x).tolist() == [1.0, 2.0] and (2 - x).tolist() == [1.0, 4.0]


def test_vendor_ops_become_callable(tmp_path):
    path = write(tmp_path, 'namespace = "acme"\n[ops.double]\nsignature = "(x: Tensor, /) -> Tensor"\n'
                           'family = "composite"\ndtypes = "numeric"\nkind = "composite"\ncomposite = "add(x, x)"\n')
    from ember_core.ops import load_vendor_file, unload_vendor_ops

    assert load_vendor_file(str(path)) == ["acme.double"]
    try:
        assert em.ops.namespace.acme.double(em.asarray([1.5])).tolist() == [3.0]
    finally:
        unload_vendor_ops(["acme.double"])
    assert REGISTRY.get("acme.double") is None and not hasattr(em.ops.namespace.acme, "double")


def test_signature_round_trips():
    schema = REGISTRY["sum"]
    assert schema.params[0].positional_only and schema.params[1].keyword_only
    assert registry.NO_DEFAULT is schema.params[0].default

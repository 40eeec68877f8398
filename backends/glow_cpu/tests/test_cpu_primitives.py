"""Every primitive, every example its declaration gives, every element kind cpu declares,
plus odd sizes: one-primitive functions compiled for cpu against the float64 reference,
under the conformance suite's tolerance per element kind (one definition of "close enough")."""

from __future__ import annotations

import pytest
from cpu_cases import run_case
from glow_conformance.compare import TOLERANCE
from glow_cpu.backend import CpuBackend

from glow_core.primitives import CORE
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind

SUPPORTS = CpuBackend().info().supports


def _cases():
    for kind, spec in sorted(PRIMITIVES.items()):
        for number, example in enumerate(spec.examples):
            for elem_name in SUPPORTS.get(kind, []):
                proposal = retyped(spec, example, ElemKind.parse(elem_name))
                if proposal is not None:
                    types, attrs = proposal
                    yield pytest.param(
                        kind, types, attrs, id=f"{kind}[{ElemKind.parse(elem_name).value}-{number}]"
                    )


def retyped(spec, example, elem: ElemKind):
    """The example made to select ``elem`` (as the conformance suite derives it): operands
    and attributes naming the example's selecting kind (its result's, or ArgMax's input's)
    take ``elem``; others keep theirs."""
    types = example.types()
    full = spec.complete_attrs(example.attrs)
    old = spec.selecting_kind(spec.infer_type(types, full), types)
    new_types = [t.with_elem(elem) if t.elem is old else t for t in types]
    attrs = {**example.attrs, **{k: elem.name for k, v in full.items() if v in (old.name, old.value)}}
    try:
        result = spec.infer_type(new_types, spec.complete_attrs(attrs))
    except Exception:
        return None
    return (new_types, attrs) if spec.selecting_kind(result, new_types) is elem else None


@pytest.mark.parametrize(("kind", "types", "attrs"), list(_cases()))
def test_spec_examples(kind, types, attrs, rng):
    result = PRIMITIVES[kind].infer_type(types, PRIMITIVES[kind].complete_attrs(attrs))
    assert run_case(kind, types, attrs, rng) <= TOLERANCE.get(result.elem, 0.0)


def test_the_core_set_and_float32_are_declared():
    """cpu runs every core primitive, and every primitive it declares in float32 where the
    primitive's examples compute float32 (a new primitive needs no cpu line unless cpu
    implements it: docs/new-primitive.md)."""
    kept_int8 = {"QuantizedConv", "QuantizedFullyConnected", "QuantizedAdd", "QuantizeLinear"}
    kept_float = {"Gelu", "LayerNorm", "Softmax", "LSTM", "GRU", "RNN"}  # one kernel each (should_lower)
    assert CORE <= set(SUPPORTS) <= set(PRIMITIVES) | kept_int8 | kept_float
    for kind in set(SUPPORTS) & set(PRIMITIVES):
        spec = PRIMITIVES[kind]
        results = {
            spec.selecting_kind(spec.infer_type(e.types(), spec.complete_attrs(e.attrs)), e.types())
            for e in spec.examples
        }
        if ElemKind.float32 in results:
            assert "float32" in SUPPORTS[kind], kind
        assert SUPPORTS[kind], kind

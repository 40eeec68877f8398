"""The primitive contract: every declared example's type rule agrees with its numpy
reference, examples use declared kinds, and type-rule errors name the types. The references
against independent float64 oracles: test_primitive_windows.py (convolution, pooling),
test_primitive_indexing.py (Slice, Gather, Pad, Broadcast); shape rules by property:
test_primitive_shape_rules.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from primitive_cases import infer, sample_inputs, seed_of

from glow_core.errors import GlowError, ShapeError
from glow_core.spec import PRIMITIVES, Example
from glow_core.types import Type


def _example_label(example: Example) -> str:
    """``f32-4x3_3x5`` for (f32[4,3], f32[3,5]); the kind is repeated only when it changes."""
    if not example.operands:
        return "_".join(f"{k}={v}" for k, v in example.attrs.items()).replace(" ", "")
    parts = []
    kind = None
    for t in example.types():
        dims = "x".join(map(str, t.shape)) or "s"
        parts.append(dims if t.elem.value == kind else f"{t.elem.value}-{dims}")
        kind = t.elem.value
    return "_".join(parts)


def _cases() -> list[Any]:
    cases = []
    for name in sorted(PRIMITIVES):
        labels: set[str] = set()
        for index, example in enumerate(PRIMITIVES[name].examples):
            label = _example_label(example)
            if label in labels:
                label = f"{label}-{index}"
            labels.add(label)
            cases.append(pytest.param(name, example, id=f"{name}[{label}]"))
    return cases


CASES = _cases()


# ---- every primitive, every example ---------------------------------------------------


def test_case_ids_are_unique_and_cover_every_primitive() -> None:
    """Each (primitive, example) pair has its own id, and no primitive is left out."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert "MatMul[f32-4x3_3x5]" in ids
    assert {c.values[0] for c in CASES} == set(PRIMITIVES)


@pytest.mark.parametrize(("name", "example"), CASES)
def test_type_rule_matches_reference(name: str, example: Example, request: pytest.FixtureRequest) -> None:
    """The type rule's result shape is the shape the reference computes on random inputs."""
    spec = PRIMITIVES[name]
    rng = np.random.default_rng(seed_of(request.node.callspec.id))
    types = example.types()
    attrs = spec.complete_attrs(example.attrs)
    result_type = spec.infer_type(types, attrs)
    arrays = sample_inputs(spec, types, attrs, rng)
    assert [Type.of(a) for a in arrays] == types, "sample must produce the declared operand types"
    copies = [a.copy() for a in arrays]
    out = np.asarray(spec.evaluate(arrays, attrs))
    assert out.shape == result_type.shape
    if result_type.elem.is_float:
        assert out.dtype.kind == "f"
        assert np.all(np.isfinite(out))
    else:
        assert out.dtype == result_type.dtype
    for before, after in zip(copies, arrays, strict=True):
        np.testing.assert_array_equal(before, after, err_msg="the reference modified an operand")


@pytest.mark.parametrize(("name", "example"), CASES)
def test_examples_use_declared_kinds(name: str, example: Example) -> None:
    """Float operands of an example are of a kind the primitive declares support for."""
    spec = PRIMITIVES[name]
    for t in example.types():
        if t.elem.is_float:
            assert t.elem in spec.kinds


# ---- type-rule errors name the types ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "types", "attrs", "message"),
    [
        ("MatMul", ["f32[4,3]", "f32[5,2]"], {}, "inner dimensions differ"),
        ("BatchMatMul", ["f32[2,3,4]", "f32[3,4,5]"], {}, "batch dimensions differ"),
        ("Add", ["f32[4,5]", "f32[5,4]"], {}, "same type"),
        ("Mul", ["f32[4]", "i32[4]"], {}, "same type"),
        ("Convolution", ["f32[1,3,8,8]", "f32[4,2,3,3]"], {}, "channels differ"),
        ("Concat", ["f32[2,3]", "f32[3,4]"], {"axis": 1}, "disagree outside axis"),
    ],
)
def test_type_errors_are_shape_errors_naming_both_types(
    kind: str, types: list[str], attrs: dict, message: str
) -> None:
    """A refusal is a ShapeError (a GlowError) whose message names every offending type."""
    parsed = [Type.parse(t) for t in types]
    with pytest.raises(ShapeError) as err:
        infer(PRIMITIVES[kind], parsed, attrs)
    assert isinstance(err.value, GlowError)
    text = str(err.value)
    assert message in text
    for t in parsed:
        assert str(t) in text


def test_wrong_operand_count_is_a_shape_error() -> None:
    """Giving a binary primitive one operand is a ShapeError naming the operands."""
    with pytest.raises(ShapeError, match=r"expects 2 operands \(lhs, rhs\), got 1"):
        infer(PRIMITIVES["Add"], [Type((2,))], {})


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_reference_orders_large_integers_exactly(dtype, largest):
    """Values float64 would merge (2**64-4 and 2**64-1; int64 extremes) keep their order."""
    from glow_core.spec import spec_of

    info = np.iinfo(dtype)
    x = np.array([[info.max - 3, info.max, info.min, info.max - 3, info.min + 1]], dtype=dtype)
    got = spec_of("TopK").evaluate([x], {"k": 5, "axis": 1, "largest": largest})
    want = sorted(range(5), key=lambda i: (-int(x[0, i]) if largest else int(x[0, i]), i))
    assert got.tolist() == [want]

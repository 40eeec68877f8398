"""Registry invariants of the operator declarations, and what ``@primitive``/``@node`` refuse."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import numpy as np
import pytest

import glow_core.graph.nodes  # noqa: F401 - registers the high-level nodes
from glow_core import primitives
from glow_core.spec import NODES, PRIMITIVES, Attr, Example, In, OpSpec, ex, node, primitive, spec_of
from glow_core.types import ElemKind, Type


@pytest.fixture
def clean_registries() -> Iterator[None]:
    """Whatever a test declares is removed from both registries afterwards."""
    before_p, before_n = set(PRIMITIVES), set(NODES)
    try:
        yield
    finally:
        for name in set(PRIMITIVES) - before_p:
            PRIMITIVES.pop(name)
        for name in set(NODES) - before_n:
            NODES.pop(name)


def _signature(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_registries_are_populated() -> None:
    """The documented set: (at least) 28 primitives and a set of high-level nodes."""
    assert len(PRIMITIVES) >= 28
    assert {"Add", "MatMul", "Convolution", "MaxPool", "AvgPool", "Concat", "Gather"} <= set(PRIMITIVES)
    assert {"Conv", "FullyConnected", "Relu", "Softmax", "LayerNorm", "BatchNorm"} <= set(NODES)


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_primitive_declaration_complete(name: str) -> None:
    """Each primitive has a docstring, a type rule, numpy reference, examples, matching signatures."""
    spec = PRIMITIVES[name]
    assert spec.name == name
    assert spec.doc.strip()
    assert spec.is_primitive
    assert callable(spec.type_rule) and callable(spec.reference)
    assert spec.lowering is None
    assert len(spec.examples) >= 1
    expected = list(spec.operands) + list(spec.attrs)
    assert _signature(spec.type_rule) == expected
    assert _signature(spec.reference) == expected
    if spec.sample is not None:
        assert _signature(spec.sample)[0] == "rng"
    assert set(spec.inplace) <= set(spec.operands)
    assert spec.kinds and spec.kinds <= set(ElemKind)
    for example in spec.examples:
        assert isinstance(example, Example)
        assert set(example.attrs) <= set(spec.attrs)
        if not spec.variadic:
            assert len(example.operands) == len(spec.operands)


@pytest.mark.parametrize("name", sorted(NODES))
def test_node_declaration_complete(name: str) -> None:
    """Each high-level node has a docstring, a type rule, a lowering ``lower(b, ...)`` and examples."""
    spec = NODES[name]
    assert spec.name == name
    assert spec.doc.strip()
    assert not spec.is_primitive
    assert spec.reference is None
    assert callable(spec.lowering)
    assert len(spec.examples) >= 1
    expected = list(spec.operands) + list(spec.attrs)
    assert _signature(spec.type_rule) == expected
    assert _signature(spec.lowering) == ["b", *expected]
    for example in spec.examples:
        assert set(example.attrs) <= set(spec.attrs)
        if spec.variadic:  # one declared operand takes the whole list (Einsum)
            assert len(example.operands) >= 1
        else:
            assert len(example.operands) == len(spec.operands)


def test_no_name_in_both_registries() -> None:
    """A name denotes either a primitive or a high-level node, never both."""
    assert not set(PRIMITIVES) & set(NODES)


def test_spec_of() -> None:
    """spec_of finds both kinds and refuses unknown names."""
    assert spec_of("MatMul") is PRIMITIVES["MatMul"]
    assert spec_of("Conv") is NODES["Conv"]
    with pytest.raises(KeyError, match="NoSuchOp"):
        spec_of("NoSuchOp")


def test_elementwise_set_is_computed_from_flags() -> None:
    """ELEMENTWISE is exactly the primitives flagged element-wise."""
    flagged = {name for name, spec in PRIMITIVES.items() if spec.elementwise}
    assert flagged == primitives.ELEMENTWISE
    assert {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Exp", "Log", "Sqrt", "Tanh", "Erf"} <= flagged
    assert not flagged & {"MatMul", "Convolution", "Reshape", "Concat", "Broadcast"}
    for name in flagged:
        assert PRIMITIVES[name].inplace, f"{name} is element-wise, so may run in place"


def test_example_types_retype_only_floats() -> None:
    """Example.types(elem) retypes float operands and leaves integer ones alone."""
    example = ex("f32[5,4]", "i64[3]", axis=0)
    assert example.types() == [Type((5, 4)), Type((3,), ElemKind.int64)]
    assert example.types(ElemKind.float16) == [Type((5, 4), ElemKind.float16), Type((3,), ElemKind.int64)]


def test_complete_attrs() -> None:
    """Defaults are filled, lists frozen to tuples, unknown and missing attributes refused."""
    spec = PRIMITIVES["Convolution"]
    full = spec.complete_attrs({"strides": [2, 2]})
    assert full == {"strides": (2, 2), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    with pytest.raises(Exception, match="unknown attribute"):
        spec.complete_attrs({"stride": (1, 1)})
    with pytest.raises(Exception, match="missing attribute 'kernel'"):
        PRIMITIVES["MaxPool"].complete_attrs({})


# ---- what the declaration machinery refuses -------------------------------------------


def test_a_base_class_declares_shared_operands_and_attributes_first(clean_registries: None) -> None:
    """A family shares operands and attributes through a plain base class (LSTM, GRU, RNN):
    the base's come first, a name the declaration sets again keeps its place and takes the
    new value, and the base's functions (``sample``) are inherited; the base registers nothing."""

    class ZzFamily:
        """Never registered itself."""

        input = In()
        weights = In("shared doc")
        axis = Attr(int, 0)

        def sample(rng, *operands, **attrs):
            return [np.full(t.shape, 2.0, t.dtype) for t in operands]

    @node
    class ZzMember(ZzFamily):
        """A member with one operand and one attribute of its own."""

        weights = In("its own doc")
        extra = In()
        scale = Attr(float, 1.0)

        def type(input, weights, extra, axis, scale):
            return input

        def lower(b, input, weights, extra, axis, scale):
            return input

    assert ZzMember.operands == ("input", "weights", "extra")
    assert list(ZzMember.attrs) == ["axis", "scale"]
    assert "ZzFamily" not in NODES and "ZzFamily" not in PRIMITIVES
    f32 = Type((2,))
    assert [a.tolist() for a in ZzMember.sample_inputs(np.random.default_rng(0), [f32] * 3, {})] == [
        [2.0, 2.0]
    ] * 3
    with pytest.raises(TypeError, match=r"ZzBadMember.type takes"):

        @node
        class ZzBadMember(ZzFamily):
            """Its type rule forgets the inherited ``axis``."""

            def type(input, weights):
                return input

            def lower(b, input, weights, axis):
                return input


def test_valid_throwaway_primitive_registers(clean_registries: None) -> None:
    """A well-formed declaration becomes an OpSpec in PRIMITIVES (and is removed afterwards)."""

    @primitive
    class ZzNegate:
        """Negate."""

        input = In()
        alpha = Attr(float, 1.0)
        examples = (ex("f32[2]"),)

        def type(input, alpha):
            return input

        def reference(input, alpha):
            return -input

    assert isinstance(ZzNegate, OpSpec)
    assert PRIMITIVES["ZzNegate"] is ZzNegate
    assert ZzNegate.operands == ("input",)
    assert list(ZzNegate.attrs) == ["alpha"]


def test_type_signature_mismatch_refused(clean_registries: None) -> None:
    """A type rule whose parameters are not operands + attrs (in order) is refused."""
    with pytest.raises(TypeError, match=r"ZzBadType\.type takes"):

        @primitive
        class ZzBadType:
            """Doc."""

            lhs = In()
            rhs = In()
            examples = (ex("f32[2]", "f32[2]"),)

            def type(rhs, lhs):
                return lhs

            def reference(lhs, rhs):
                return lhs

    assert "ZzBadType" not in PRIMITIVES


def test_reference_signature_mismatch_refused(clean_registries: None) -> None:
    """A reference that forgets an attribute is refused."""
    with pytest.raises(TypeError, match=r"ZzBadRef\.reference takes"):

        @primitive
        class ZzBadRef:
            """Doc."""

            input = In()
            axis = Attr(int, 0)
            examples = (ex("f32[2]"),)

            def type(input, axis):
                return input

            def reference(input):
                return input

    assert "ZzBadRef" not in PRIMITIVES


def test_lowering_needs_builder_parameter(clean_registries: None) -> None:
    """A node's ``lower`` must take the builder ``b`` first."""
    with pytest.raises(TypeError, match=r"ZzBadLower\.lower takes"):

        @node
        class ZzBadLower:
            """Doc."""

            input = In()
            examples = (ex("f32[2]"),)

            def type(input):
                return input

            def lower(input):
                return input

    assert "ZzBadLower" not in NODES


def test_missing_docstring_refused(clean_registries: None) -> None:
    """Every operator needs a docstring."""
    with pytest.raises(TypeError, match="docstring"):

        @primitive
        class ZzNoDoc:
            input = In()

            def type(input):
                return input

            def reference(input):
                return input

    assert "ZzNoDoc" not in PRIMITIVES


def test_missing_semantics_refused(clean_registries: None) -> None:
    """A primitive without ``reference`` (or a node without ``lower``) is refused."""
    with pytest.raises(TypeError, match="needs both `type` and `reference`"):

        @primitive
        class ZzNoRef:
            """Doc."""

            input = In()

            def type(input):
                return input

    with pytest.raises(TypeError, match="needs both `type` and `lower`"):

        @node
        class ZzNoLower:
            """Doc."""

            input = In()

            def type(input):
                return input

    assert "ZzNoRef" not in PRIMITIVES and "ZzNoLower" not in NODES


@pytest.mark.parametrize("existing", ["Add", "Relu"])
def test_duplicate_name_refused(existing: str, clean_registries: None) -> None:
    """A name already declared (as a primitive or a node) cannot be declared again."""
    original = spec_of(existing)

    def type_rule(input):
        return input

    def reference(input):
        return input

    body = {"__doc__": "Duplicate.", "input": In(), "type": type_rule, "reference": reference}
    with pytest.raises(TypeError, match="declared twice"):
        primitive(type(existing, (), body))
    assert spec_of(existing) is original


def test_variadic_must_be_only_operand(clean_registries: None) -> None:
    """A variadic operand cannot sit beside other operands."""
    with pytest.raises(TypeError, match="variadic"):

        @primitive
        class ZzVariadic:
            """Doc."""

            inputs = In(variadic=True)
            extra = In()

            def type(inputs, extra):
                return extra

            def reference(inputs, extra):
                return extra

    assert "ZzVariadic" not in PRIMITIVES


def test_inplace_must_name_operands(clean_registries: None) -> None:
    """``inplace`` may only list declared operands."""
    with pytest.raises(TypeError, match="in-place"):

        @primitive
        class ZzInplace:
            """Doc."""

            input = In()
            inplace = ("output",)

            def type(input):
                return input

            def reference(input):
                return input

    assert "ZzInplace" not in PRIMITIVES

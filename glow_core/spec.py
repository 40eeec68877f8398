"""The declaration machinery shared by primitives and high-level nodes.

An operator is declared once, as a class body holding its operands (``In``), attributes
(``Attr``), type rule, and either numpy reference semantics (a primitive) or a lowering
into primitives (a high-level node). ``@primitive`` and ``@node`` turn that class into an
``OpSpec`` and register it; every other layer (builder, verifier, printer, IRGen, the
interpreter, conformance) reads the registry instead of listing operators by hand.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.errors import ShapeError
from glow_core.types import FLOAT_KINDS, ElemKind, Type

_REQUIRED = object()


@dataclass(frozen=True, slots=True)
class In:
    """An operand: a tensor the operator reads; a variadic one takes a list (Concat)."""

    doc: str = ""
    variadic: bool = False


@dataclass(frozen=True, slots=True)
class Attr:
    """A typed, immutable attribute; ``default`` makes it optional in the builder."""

    kind: type | tuple[type, ...]
    default: Any = _REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True, slots=True)
class Example:
    """Operand types (compact form ``f32[4,3]``) and attributes the conformance suite builds."""

    operands: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)

    def types(self, elem: ElemKind | None = None) -> list[Type]:
        """The operand types, with float operands retyped to ``elem`` when given."""
        types = [Type.parse(t) for t in self.operands]
        if elem is None:
            return types
        return [t.with_elem(elem) if t.elem.is_float else t for t in types]


def ex(*operands: str, **attrs: Any) -> Example:
    """Shorthand for an ``Example`` in declarations."""
    return Example(tuple(operands), attrs)


@dataclass(frozen=True, eq=False)
class OpSpec:
    """Everything known about one operator kind, read by every layer."""

    name: str
    doc: str
    operands: tuple[str, ...]
    attrs: dict[str, Attr]
    type_rule: Callable[..., Type]
    reference: Callable[..., np.ndarray] | None = None
    lowering: Callable[..., Any] | None = None
    elementwise: bool = False
    inplace: tuple[str, ...] = ()
    view: bool = False
    core: bool = False
    """A primitive every backend implements (``glow_core.primitives.CORE``): the lowerings,
    the ONNX loader and the model zoo emit only these and views."""
    kinds: frozenset[ElemKind] = FLOAT_KINDS
    examples: tuple[Example, ...] = ()
    sample: Callable[..., list[np.ndarray]] | None = None
    variadic: bool = False
    kind_operand: str | None = None
    grad: Callable[..., Sequence[Any]] | None = None
    """The gradient rule, ``grad(b, node, out_grad)``: one gradient Node (or None: no
    gradient flows there) per operand, built with ``b``. Read by ``glow_core.training``;
    None means the operator cannot be differentiated (a high-level node is differentiated
    through its lowering)."""

    def selecting_kind(self, result: Type, operands: Sequence[Type]) -> ElemKind:
        """The element kind that picks a kernel: the result's, or the declared operand's for
        operators whose result kind is fixed (ArgMax gives int64 whatever it reads)."""
        if self.kind_operand is None:
            return result.elem
        return operands[self.operands.index(self.kind_operand)].elem

    @property
    def is_primitive(self) -> bool:
        return self.reference is not None

    def call(self, fn: Callable[..., Any], operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
        """Call a declared function (type rule, reference, lowering) with operands and attrs.

        A variadic operator's single operand receives the whole list.
        """
        if self.variadic:
            return fn(list(operands), **attrs)
        if len(operands) != len(self.operands):
            raise ShapeError(
                f"expects {len(self.operands)} operands ({', '.join(self.operands)}), got {len(operands)}"
            )
        return fn(*operands, **attrs)

    def infer_type(self, operand_types: Sequence[Type], attrs: dict[str, Any]) -> Type:
        """Run the type rule; raises ShapeError (unnamed: the caller adds the node)."""
        return self.call(self.type_rule, operand_types, attrs)

    def sample_inputs(
        self, rng: np.random.Generator, types: Sequence[Type], attrs: dict[str, Any]
    ) -> list[np.ndarray]:
        """Random operands for these types: the spec's own ``sample`` (valid indices,
        positive bases...) when it has one, else ``random_tensor`` per operand."""
        if self.sample is not None:
            return list(self.call(lambda *ts, **a: self.sample(rng, *ts, **a), types, attrs))
        return [random_tensor(rng, t) for t in types]

    def evaluate(self, operands: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        """Run the numpy reference semantics (primitives only)."""
        assert self.reference is not None, f"{self.name} is not a primitive"
        return self.call(self.reference, operands, attrs)

    def complete_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults, refuse unknown or missing attributes, normalize lists to tuples."""
        if not given.keys() <= self.attrs.keys():
            unknown = set(given) - set(self.attrs)
            raise ShapeError(f"unknown attribute(s) {sorted(unknown)}; known: {list(self.attrs)}")
        out: dict[str, Any] = {}
        for name, attr in self.attrs.items():
            if name in given:
                value = given[name]
            elif attr.required:
                raise ShapeError(f"missing attribute {name!r}")
            else:
                value = attr.default
            out[name] = _freeze(value)
        return out


_PLAIN = frozenset({int, float, str, bool, type(None)})
"""Attribute value types ``_freeze`` keeps as they are (checked first: most values are)."""


def _freeze(value: Any) -> Any:
    """Attributes are hashed (CSE, caches), so lists become tuples and numpy scalars plain."""
    if type(value) in _PLAIN:
        return value
    if type(value) is tuple and all(type(v) in _PLAIN for v in value):
        return value  # the usual shape or axes tuple: already frozen
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def random_tensor(rng: np.random.Generator, t: Type) -> np.ndarray:
    """Standard-normal floats, small random integers, random booleans: never all zeros."""
    if t.elem.is_float:
        return rng.standard_normal(t.shape).astype(t.dtype)
    if t.elem is ElemKind.bool:
        return rng.integers(0, 2, t.shape).astype(bool)
    low = 0 if np.dtype(t.dtype).kind == "u" else -50  # unsigned kinds get no wrapped negatives
    return rng.integers(low, 50, t.shape).astype(t.dtype)


PRIMITIVES: dict[str, OpSpec] = {}
NODES: dict[str, OpSpec] = {}


def _declaration_body(cls: type) -> dict[str, Any]:
    """The class body with those of its bases: a family of operators (LSTM, GRU, RNN) declares
    the operands and attributes they share once, in a plain base class. Bases come first, so
    their operands and attributes keep their place; a name the class sets again keeps it too."""
    body: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):  # object last in the MRO: left out
        body.update((k, v) for k, v in vars(klass).items() if not k.startswith("__"))
    return body


def _declare(cls: type, registry: dict[str, OpSpec], *, primitive: bool) -> OpSpec:
    body = _declaration_body(cls)
    operands = tuple(k for k, v in body.items() if isinstance(v, In))
    attrs = {k: v for k, v in body.items() if isinstance(v, Attr)}
    type_rule = body.get("type")
    semantic_name = "reference" if primitive else "lower"
    semantics = body.get(semantic_name)
    name = cls.__name__
    variadic = [k for k in operands if body[k].variadic]
    if variadic and len(operands) != 1:
        raise TypeError(f"{name}: a variadic operand must be the only operand")
    if not cls.__doc__:
        raise TypeError(f"{name}: every operator needs a docstring")
    if type_rule is None or semantics is None:
        raise TypeError(f"{name}: needs both `type` and `{semantic_name}`")
    expected = list(operands) + list(attrs)
    _check_signature(name, "type", type_rule, expected)
    _check_signature(name, semantic_name, semantics, (["b"] if not primitive else []) + expected)
    if body.get("grad") is not None:
        _check_signature(name, "grad", body["grad"], ["b", "node", "out_grad"])
    if name in PRIMITIVES or name in NODES:
        raise TypeError(f"operator {name!r} declared twice")
    spec = OpSpec(
        name=name,
        doc=inspect.cleandoc(cls.__doc__),
        operands=operands,
        attrs=attrs,
        type_rule=type_rule,
        reference=semantics if primitive else None,
        lowering=None if primitive else semantics,
        elementwise=body.get("elementwise", False),
        inplace=tuple(body.get("inplace", ())),
        view=body.get("view", False),
        core=body.get("core", False),
        kinds=frozenset(body.get("kinds", FLOAT_KINDS)),
        examples=tuple(body.get("examples", ())),
        sample=body.get("sample"),
        variadic=bool(variadic),
        kind_operand=body.get("kind_operand"),
        grad=body.get("grad"),
    )
    if spec.kind_operand is not None and spec.kind_operand not in operands:
        raise TypeError(f"{name}: kind_operand {spec.kind_operand!r} is not an operand")
    if spec.core and (spec.view or not primitive):
        raise TypeError(f"{name}: only a primitive with a kernel can be core (views need none)")
    bad_inplace = set(spec.inplace) - set(operands)
    if bad_inplace:
        raise TypeError(f"{name}: in-place operands {bad_inplace} are not operands")
    registry[name] = spec
    return spec


def _check_signature(op: str, what: str, fn: Callable[..., Any], expected: list[str]) -> None:
    params = list(inspect.signature(fn).parameters)
    if params != expected:
        raise TypeError(f"{op}.{what} takes {params}, declaration says {expected}")


def primitive(cls: type) -> OpSpec:
    """Declare a primitive: operands, attributes, ``type`` and numpy ``reference``."""
    return _declare(cls, PRIMITIVES, primitive=True)


def node(cls: type) -> OpSpec:
    """Declare a high-level node: operands, attributes, ``type`` and ``lower(b, ...)``."""
    return _declare(cls, NODES, primitive=False)


def spec_of(kind: str) -> OpSpec:
    """The spec of a primitive or high-level node by name."""
    spec = PRIMITIVES.get(kind) or NODES.get(kind)
    if spec is None:
        raise KeyError(f"no operator named {kind!r}")
    return spec


# ---- helpers for type rules -------------------------------------------------------------


def expect(condition: bool, message: str, *types: Any) -> None:
    """Raise ShapeError with ``message`` and the offending types when ``condition`` fails."""
    if not condition:
        detail = " vs ".join(str(t) for t in types)
        raise ShapeError(f"{message}: {detail}" if types else message)


def same_type(*names: str) -> Callable[..., Type]:
    """A type rule: all named operands share one type, which is the result's."""

    def rule(*operands: Type) -> Type:
        first = operands[0]
        for other in operands[1:]:
            expect(other == first, "operands must have the same type", *operands)
        return first

    rule.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    )
    return rule


def normalize_axis(axis: int, rank: int, what: Any = None) -> int:
    """A non-negative axis, or ShapeError when out of range."""
    expect(-rank <= axis < max(rank, 1), f"axis {axis} out of range for rank {rank}", what or "")
    return axis % rank if rank else 0

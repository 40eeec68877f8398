"""Deriving more operand types from an operator's declared examples, without listing any op.

Every derivation *proposes* operand types (or attributes) and keeps those the operator's own
type rule (``OpSpec.infer_type``) accepts: nothing here knows what MatMul or Gather need.
Element-wise operators get sizes chosen to break vectorized kernels (1, 7, 17, 33, 1023,
size-1 dimensions, about 2**18 elements); other operators get their example dimensions
scaled (the first example also gets each distinct dimension shrunk to 1 in turn).
Attributes that are per-axis lists (strides, pads, kernel, dilations, axes, shuffle,
starts/ends/steps) get variants whose entries differ per axis (and pads per side), and an
``axis`` gets its negative spelling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from glow_core.errors import GlowError
from glow_core.spec import Example, OpSpec
from glow_core.types import ElemKind, Type

ELEMENTWISE_SHAPES: tuple[tuple[int, ...], ...] = (
    (1,),
    (7,),
    (17,),
    (33,),
    (1023,),
    (1, 1, 7),
    (5, 1, 3),
    (3, 17, 33),
    (511, 513),  # 262143 elements: past any cache-blocking threshold, a multiple of no vector width
)
"""Shapes every operand of an element-wise operator takes in turn."""

SCALES: tuple[int, ...] = (2, 3)
"""Factors applied to every example dimension larger than 1 (size-1 dims stay: often they must)."""

ODD_STEP = 1
"""Added to every dimension larger than 1, giving odd sizes where the example has even ones."""

MAX_ELEMENTS = 1 << 19
"""A derived case whose operands or result exceed this many elements is dropped (keeps runs short)."""

Proposal = tuple[tuple[Type, ...], dict[str, Any]]


def accepts(spec: OpSpec, types: Sequence[Type], attrs: dict[str, Any]) -> Type | None:
    """The result type when the type rule accepts these operands and attributes, else None."""
    try:
        return spec.infer_type(list(types), spec.complete_attrs(attrs))
    except (GlowError, ValueError, TypeError, IndexError):
        return None


def retyped(spec: OpSpec, example: Example, elem: ElemKind) -> Proposal | None:
    """The example made to check a claim for ``elem``, or None when it cannot be.

    A claim names the *result* kind: operands and attributes of the example's result kind
    take ``elem``, others (Gather's indices, Convert's source) keep theirs. An operator whose
    result kind is fixed (ArgMax gives int64, Compare bool) declares the operand that selects
    its kernel (``kind_operand``): the claim names that operand's kind, and operands of its
    kind take ``elem``, also where the fixed result kind is ``elem`` too (ArgMax[int64] reads
    int64, not the example's float32).
    """
    types = tuple(example.types())
    original = accepts(spec, types, example.attrs)
    if original is None:
        return None
    if spec.kind_operand is None:
        proposal = _replace_kind(spec, types, example.attrs, original.elem, elem)
        result = accepts(spec, *proposal)
        if result is not None and result.elem is elem:
            return proposal
    if not types:
        return None
    # The operand that selects the kernel (``kind_operand``: ArgMax's input, Compare's lhs)
    # takes ``elem`` even where the fixed result kind is ``elem`` too (ArgMax[int64] reads int64).
    selecting = spec.operands.index(spec.kind_operand) if spec.kind_operand in spec.operands else 0
    proposal = _replace_kind(spec, types, example.attrs, types[selecting].elem, elem)
    result = accepts(spec, *proposal)
    return proposal if result is not None and result.elem is original.elem else None


def _replace_kind(
    spec: OpSpec, types: tuple[Type, ...], attrs: dict[str, Any], old: ElemKind, new: ElemKind
) -> Proposal:
    """Operands and attributes naming ``old`` take ``new`` (defaults too: Splat's ``elem``
    defaults to float32); only the changed attributes are added to the given ones."""
    new_types = tuple(t.with_elem(new) if t.elem is old else t for t in types)
    full = spec.complete_attrs(attrs)
    return new_types, {**attrs, **{k: new.name for k, v in full.items() if _names_kind(v, old)}}


def _names_kind(value: Any, kind: ElemKind) -> bool:
    """Whether an attribute value is the name of ``kind`` (Splat's or Convert's ``elem``)."""
    return isinstance(value, str) and value in (kind.name, kind.value)


def derived(spec: OpSpec, types: tuple[Type, ...], attrs: dict[str, Any]) -> Iterator[tuple[Type, ...]]:
    """Operand types derived from one accepted example, each accepted by the type rule."""
    if not types:
        return
    if spec.elementwise:
        proposals = [tuple(t.with_shape(shape) for t in types) for shape in ELEMENTWISE_SHAPES]
    else:
        proposals = [_scaled(types, lambda d, k=k: d * k) for k in SCALES]
        proposals.append(_scaled(types, lambda d: d + ODD_STEP))
    for proposal in proposals:
        result = accepts(spec, proposal, attrs)
        if result is not None and _small(proposal, result):
            yield proposal


def _scaled(types: tuple[Type, ...], grow: Callable[[int], int]) -> tuple[Type, ...]:
    return tuple(t.with_shape(tuple(grow(d) if d > 1 else d for d in t.shape)) for t in types)


def _small(types: tuple[Type, ...], result: Type) -> bool:
    return result.size > 0 and max([result.size, *(t.size for t in types)]) <= MAX_ELEMENTS


def shrunk(spec: OpSpec, types: tuple[Type, ...], attrs: dict[str, Any]) -> Iterator[tuple[Type, ...]]:
    """For each distinct dimension size above 1, every dimension of that size set to 1 (sizes
    that must agree, such as MatMul's inner one, shrink together): the first and last
    iteration of a loop at once. Element-wise operators have size-1 shapes already."""
    if spec.elementwise:
        return
    for size in sorted({d for t in types for d in t.shape if d > 1}):
        proposal = tuple(t.with_shape(tuple(1 if d == size else d for d in t.shape)) for t in types)
        result = accepts(spec, proposal, attrs)
        if result is not None and _small(proposal, result):
            yield proposal


def _per_axis(value: Any) -> list[tuple[int, ...]]:
    """A per-axis list with its first entry grown, its last entry grown, and reversed: entries
    that differ per axis (and, for pads, begin from end), so a kernel reading one axis's entry
    for another's fails. A reversal that comes out ascending is left out: for a permutation it
    is the identity, which the graph optimizer removes before any kernel runs."""
    if not isinstance(value, tuple) or len(value) < 2:
        return []
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return []
    first = (value[0] + 1, *value[1:])
    last = (*value[:-1], value[-1] + 1)
    backwards = tuple(reversed(value))
    return [first, last] + ([backwards] if list(backwards) != sorted(backwards) else [])


def attr_variants(spec: OpSpec, types: tuple[Type, ...], attrs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Attributes derived from one accepted example's, each accepted by the type rule."""
    full = spec.complete_attrs(attrs)
    proposals: list[dict[str, Any]] = []
    for name, value in full.items():
        proposals += [{**attrs, name: new} for new in _per_axis(value)]
        if name == "axis" and isinstance(value, int) and value >= 0 and types:
            proposals.append({**attrs, name: value - types[0].rank})
    seen: set[tuple[tuple[str, Any], ...]] = {tuple(sorted(full.items()))}
    for proposal in proposals:
        key = tuple(sorted(spec.complete_attrs(proposal).items()))
        if key in seen:
            continue
        seen.add(key)
        result = accepts(spec, types, proposal)
        if result is not None and _small(types, result):
            yield proposal

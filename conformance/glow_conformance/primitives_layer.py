"""The primitives layer: one case per (claimed kind, element kind, operand types), from data.

``BackendInfo.supports`` says what to test (kind -> result element kinds); the operator's
declaration says how (its ``examples``, type rule, ``sample`` and reference). Beside the
examples and the shapes derived from them, each claim gets the examples' per-axis attribute
variants (``variants.attr_variants``) and one case per input class of special values
(``input_classes``: NaN, infinities, -0.0, denormals, overflow, integer limits). Each claim
also gets a case of its own, ``Kind[elem]``, which fails when nothing checks the claim: no
example can produce that element kind, or every case of it is declared xfail. The
``predication[...]`` cases (``predication.py``) check that every backend skips predicated-off
instructions; a backend declaring fused activations gets its kept layers with each of them.
The views (Reshape, BitCast) are checked on every backend, claimed or not: the core runs them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from glow_conformance import predication
from glow_conformance.case import Case
from glow_conformance.input_classes import InputClass, classes_for
from glow_conformance.one_op import build, check_op, sample
from glow_conformance.results import PASS, Outcome, Verdict
from glow_conformance.variants import Proposal, accepts, attr_variants, derived, retyped, shrunk
from glow_core.backend import Backend, BackendInfo
from glow_core.graph.activations import ACTIVATION_OF_KIND
from glow_core.primitives import VIEWS
from glow_core.spec import OpSpec, spec_of
from glow_core.types import ElemKind, Type


@dataclass(frozen=True, eq=False)
class OpCase(Case):
    """One operator on one list of operand types, e.g. ``MatMul[float32-4x3_3x5]``."""

    kind: str
    types: tuple[Type, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    input_class: str | None = None
    """The ``input_classes`` class whose values are planted in the inputs; None: the sample's."""
    layer: ClassVar[str] = "primitives"

    def run(self, target: Backend) -> Verdict:
        return check_op(target, self.kind, self.types, self.attrs, self.seed, self.input_class)


@dataclass(frozen=True, eq=False)
class ClaimCase(Case):
    """``Kind[elem]``: the claim itself, failing with ``problem`` when nothing can check it."""

    problem: str = ""
    layer: ClassVar[str] = "primitives"

    def run(self, target: Backend) -> Verdict:
        return Verdict(Outcome.FAILED, self.problem) if self.problem else PASS


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _compact(value: Any) -> str:
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    return str(value)


def label(elem: ElemKind, types: tuple[Type, ...], result: Type, attrs: dict[str, Any] | None = None) -> str:
    """``float32-4x3_3x5``: the result kind, then each operand's dims (its kind when it differs)."""
    tokens = [_dims(t.shape) if t.elem is elem else f"{t.elem.value}.{_dims(t.shape)}" for t in types]
    text = f"{elem.name}-{'_'.join(tokens or [_dims(result.shape)])}"
    if attrs:
        text += "-" + ",".join(f"{k}={_compact(v)}" for k, v in sorted(attrs.items()))
    return text


def claim_cases(kind: str, elem_name: str) -> tuple[list[OpCase], str]:
    """The cases checking that ``kind`` runs for results of ``elem_name``, and the claim's problem."""
    try:
        spec = spec_of(kind)
    except KeyError:
        return (
            [],
            f"no operator named {kind!r}: supports must list kinds of glow_core.spec PRIMITIVES or NODES",
        )
    try:
        elem = ElemKind.parse(elem_name)
    except ValueError:
        return [], f"{elem_name!r} is not an element kind; use one of {[k.name for k in ElemKind]}"
    if elem not in spec.kinds:
        defined = sorted(k.name for k in spec.kinds)
        return [], f"claims {kind} for {elem.name}, but glow defines {kind} only for {defined}"
    cases = _cases_for(spec, elem)
    problem = "" if cases else f"none of {kind}'s examples can be made to produce {elem.name}"
    return cases, problem


def _cases_for(spec: OpSpec, elem: ElemKind) -> list[OpCase]:
    cases: dict[str, OpCase] = {}
    seen: set[tuple[tuple[Type, ...], tuple[tuple[str, Any], ...]]] = set()

    def add(variant: tuple[Type, ...], attrs: dict[str, Any], named: bool = False) -> None:
        key = (variant, tuple(sorted(attrs.items())))
        if key in seen:
            return
        seen.add(key)
        result = accepts(spec, variant, attrs)
        assert result is not None  # retyped(), derived() and attr_variants() keep accepted ones
        name = label(elem, variant, result, attrs if named else None)
        if name in cases:
            name = label(elem, variant, result, attrs)
        cases[name] = OpCase(f"{spec.name}[{name}]", spec.name, spec.name, variant, attrs)

    proposals = [p for p in (retyped(spec, e, elem) for e in spec.examples) if p is not None]
    for types, attrs in proposals:
        for variant in [types, *derived(spec, types, attrs)]:
            add(variant, attrs)
    for types, attrs in proposals[:1]:
        for variant in shrunk(spec, types, attrs):
            add(variant, attrs)
    for types, attrs in proposals:
        for changed in attr_variants(spec, types, attrs):
            add(types, changed, named=True)
    specials = [c for p in _first_per_signature(proposals) for c in special_cases(spec, elem, *p)]
    return list(cases.values()) + specials


def _first_per_signature(proposals: list[Proposal]) -> list[Proposal]:
    """The first proposal for each list of operand element kinds (Convert gets one from
    float32 and one from int64): the special values of every operand kind are fed."""
    firsts: dict[tuple[ElemKind, ...], Proposal] = {}
    for types, attrs in proposals:
        firsts.setdefault(tuple(t.elem for t in types), (types, attrs))
    return list(firsts.values())


def special_cases(
    spec: OpSpec, elem: ElemKind, types: tuple[Type, ...], attrs: dict[str, Any]
) -> list[OpCase]:
    """``Kind[...-values=nan]``: the first example with each input class's values planted,
    for each class that applies to an operand and that the reference accepts."""
    result = accepts(spec, types, attrs)
    assert result is not None
    base = label(elem, types, result)
    cases = []
    for input_class in classes_for(spec.name, (t.elem for t in types), spec.is_primitive):
        if _defined(spec, types, attrs, input_class):
            case_id = f"{spec.name}[{base}-values={input_class.name}]"
            cases.append(OpCase(case_id, spec.name, spec.name, types, attrs, input_class.name))
    return cases


PROBE_SEED = 0
"""The draw that decides, at generation, whether the reference defines a class for an op."""


def _defined(spec: OpSpec, types: tuple[Type, ...], attrs: dict[str, Any], input_class: InputClass) -> bool:
    """Whether the reference gives an answer on the class's values (NaN cast to int32 has
    none: ONNX leaves it undefined, and numpy's cast reports it invalid)."""
    full = spec.complete_attrs(attrs)
    module = build(spec.name, types, attrs)
    drawn = sample(spec, module, types, full, np.random.default_rng(PROBE_SEED), input_class)
    return not isinstance(drawn, Verdict)


def generate(info: BackendInfo, xfail_ids: Collection[str] = ()) -> list[Case]:
    """Every primitive-layer case for a backend's declared support, claims last per kind."""
    cases: list[Case] = []
    for kind in sorted(info.supports):
        for elem_name in sorted(set(info.supports[kind])):
            op_cases, problem = claim_cases(kind, elem_name)
            if op_cases and all(c.id in xfail_ids for c in op_cases):
                problem = f"every case of {kind} for {elem_name} is declared xfail: nothing checks the claim"
            cases.extend(op_cases)
            cases.append(ClaimCase(f"{kind}[{elem_name}]", kind, problem))
    return cases + view_cases(info) + fused_activation_cases(info) + predication.generate(info)


def view_cases(info: BackendInfo) -> list[Case]:
    """The views (Reshape, BitCast) a backend does not claim: the core runs them for every
    backend (IRGen makes them views of their operand's bytes, and the output is a Copy), so
    each is checked for every element kind the backend claims for anything."""
    claimed = {e for elems in info.supports.values() for e in elems}
    kinds = {ElemKind.parse(e) for e in claimed if e in ElemKind.__members__}
    cases: list[Case] = []
    for name in sorted(VIEWS - set(info.supports)):
        spec = spec_of(name)
        for elem in sorted(kinds & spec.kinds, key=lambda k: k.name):
            cases.extend(_cases_for(spec, elem))
    return cases


FUSED_ARGS = {"clip": (-0.5, 0.5)}
"""Arguments the fused-activation cases give (a clip range that both cuts and passes values)."""


def fused_activation_cases(info: BackendInfo) -> list[Case]:
    """``Conv[float32-...-activation=relu]``: each layer the backend keeps, with each activation
    it declares fused (``BackendInfo.fused_activations``), on the layer's float32 examples."""
    cases: list[Case] = []
    for layer, activations in sorted(info.fused_activations.items()):
        layer_cases, _ = claim_cases(layer, "float32")
        for node_kind in sorted(activations):
            name = ACTIVATION_OF_KIND.get(node_kind)
            if name is None:
                problem = f"{node_kind} is not a fusable activation; known: {sorted(ACTIVATION_OF_KIND)}"
                cases.append(ClaimCase(f"{layer}+{node_kind}", layer, problem))
                continue
            attrs = {"activation": name, "activation_args": FUSED_ARGS.get(name, ())}
            # The special-value cases check the layer's kernel, not the fusion: left out.
            for case in (c for c in layer_cases if c.input_class is None):
                case_id = f"{case.id[:-1]}-activation={name}]"
                cases.append(OpCase(case_id, layer, layer, case.types, {**case.attrs, **attrs}))
    return cases

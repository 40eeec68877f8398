"""Predication: a predicated-off node's instructions are skipped at run time, on every backend.

One function, two results: ``y = max(x * w + c, 0)`` computed by predicated nodes and saved
by a predicated Save, and ``z = x + c`` computed unconditionally. With the predicate true both
results must match the float64 oracle; with it false ``z`` must still match and ``y`` must hold
exactly the poison a backend writes into outputs before a run (every byte 0xFF), which is how
an output no instruction wrote shows. The ``computed`` case reads a predicate the function
itself computes (``sum(x) > 0`` as a Compare on an activation), so it also checks that the
predicate buffer stays live until the last instruction that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

import glow_core
from glow_conformance.case import Case, one_line
from glow_conformance.compare import check_result
from glow_conformance.results import PASS, Outcome, Verdict
from glow_core.backend import Backend, BackendInfo
from glow_core.errors import GlowError
from glow_core.graph import Builder, Module
from glow_core.runtime.arena import POISON_BYTE
from glow_core.types import ElemKind, Type

SHAPE = (7, 5)
USED_KINDS = ("Add", "Mul", "Max", "Splat", "Compare", "ReduceSum")
"""The primitives these cases build; a backend claiming them for float32 gets the cases."""

MODES = ("true", "false", "computed")


def build(mode: str) -> Module:
    """The function of the module docstring; ``mode`` says where the predicate comes from."""
    module = Module(f"predication_{mode}")
    fn = module.create_function("main")
    b = fn.builder()
    x = b.placeholder("x", SHAPE)
    w = b.placeholder("w", SHAPE)
    c = b.placeholder("c", SHAPE)
    if mode == "computed":
        total = b.ReduceSum(x, axes=(0, 1))
        predicate = b.Compare(b.splat(0.0, total), total, predicate="lt")
    else:
        predicate = b.placeholder("p", (1,), ElemKind.bool)
    when = Builder(fn, predicate=predicate)
    y = when.Max(when.Add(when.Mul(x, w), c), when.splat(0.0, x))
    when.save(y, "y")
    b.save(b.Add(x, c), "z")
    return module


def claimed(info: BackendInfo) -> bool:
    """Whether the backend claims every primitive the cases use, for float32."""
    return all("float32" in info.supports.get(kind, ()) for kind in USED_KINDS)


@dataclass(frozen=True, eq=False)
class PredicationCase(Case):
    """``predication[false]``: the predicate is an input set false (or true, or computed)."""

    mode: str = "true"
    layer: ClassVar[str] = "primitives"

    def run(self, target: Backend) -> Verdict:
        rng = np.random.default_rng(self.seed)
        x, w, c = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3))
        feeds = {"x": x, "w": w, "c": c}
        if self.mode == "computed":
            on = bool(x.astype(np.float64).sum() > 0)
        else:
            on = self.mode == "true"
            feeds["p"] = np.array([on])
        wide = [a.astype(np.float64) for a in (x, w, c)]
        expected_y = np.maximum(wide[0] * wide[1] + wide[2], 0.0)
        expected_z = wide[0] + wide[2]
        try:
            compiled = glow_core.compile(build(self.mode), backend=target)
            outputs = compiled.run(feeds)
        except GlowError as err:
            return Verdict(Outcome.FAILED, f"refused although the primitives are claimed: {one_line(err)}")
        except Exception as err:
            return Verdict(Outcome.FAILED, f"crashed: {one_line(err)}")
        result = Type(SHAPE, ElemKind.float32)
        verdict = check_result(outputs["z"], expected_z, result)
        if verdict.outcome is not Outcome.PASSED:
            return Verdict(verdict.outcome, f"unpredicated result z: {verdict.message}")
        if on:
            verdict = check_result(outputs["y"], expected_y, result)
            return verdict if verdict.outcome is not Outcome.PASSED else PASS
        written = np.flatnonzero(np.asarray(outputs["y"]).reshape(-1).view(np.uint8) != POISON_BYTE)
        if written.size:
            return Verdict(
                Outcome.FAILED,
                f"predicate false, but {written.size} bytes of y were written (first at byte "
                f"{written[0]}): predicated instructions must be skipped",
            )
        return PASS


def generate(info: BackendInfo) -> list[Case]:
    """The predication cases, when the backend claims what they are built from."""
    if not claimed(info):
        return []
    return [PredicationCase(f"predication[{mode}]", "predication", mode) for mode in MODES]

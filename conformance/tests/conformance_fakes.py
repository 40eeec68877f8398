"""Deliberately wrong backends: the interpreter with one primitive broken, or bad claims.

Each breaks only its own compiled functions, by giving the IR instructions it compiles a
wrong copy of the primitive's spec; the global ``PRIMITIVES`` registry is never touched.
They claim a few kinds only, so a whole primitives run on them takes a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from glow_conformance import predication
from glow_interpreter.backend import InterpreterBackend, InterpreterOptions

from glow_core.backend import BackendInfo
from glow_core.ir.instructions import IRFunction, Role

SMALL_CLAIMS = ("Add", "MatMul", "Sub", "Transpose")


class SmallInterpreter(InterpreterBackend):
    """The interpreter claiming only ``claims`` (kind -> element kinds; None: as declared)."""

    name = "small"
    claims: ClassVar[dict[str, list[str] | None]] = dict.fromkeys(SMALL_CLAIMS)
    xfail: ClassVar[dict[str, str]] = {}
    broken: ClassVar[dict[str, Callable[..., Any]]] = {}
    """kind -> function(reference) returning the wrong reference this backend runs instead."""

    def info(self) -> BackendInfo:
        base = super().info()
        supports = {k: v if v is not None else base.supports[k] for k, v in self.claims.items()}
        return base.model_copy(update={"name": self.name, "supports": supports, "xfail": dict(self.xfail)})

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> Any:  # type: ignore[override]
        for instr in ir.instrs:
            if instr.kind in self.broken and instr.spec is not None:
                wrong = self.broken[instr.kind](instr.spec.reference)
                instr.spec = dataclasses.replace(instr.spec, reference=wrong)
        return super().compile(ir, options)


def _subtracting(reference: Callable[..., Any]) -> Callable[..., Any]:
    def add(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        return lhs - rhs

    return add


def _dropping_last_row(reference: Callable[..., Any]) -> Callable[..., Any]:
    def matmul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        out = np.array(reference(lhs, rhs))
        out[-1] = 0
        return out

    return matmul


class WrongAdd(SmallInterpreter):
    """Its Add subtracts."""

    name = "wrong-add"
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"Add": _subtracting}


class WrongMatMul(SmallInterpreter):
    """Its MatMul leaves the last row of the result zero."""

    name = "wrong-matmul"
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"MatMul": _dropping_last_row}


def _last_element_wrong(reference: Callable[..., Any]) -> Callable[..., Any]:
    """The bug of a loop bound off by one: every element right but the last."""

    def kernel(*operands: Any, **attrs: Any) -> np.ndarray:
        out = np.array(reference(*operands, **attrs))
        last = out.reshape(-1)[-1:]
        last[...] = ~last if out.dtype == bool else last + 1
        return out

    return kernel


MUTATED_FAMILIES = {
    "Add": "elementwise",
    "Floor": "unary",
    "MatMul": "linalg",
    "Transpose": "movement",
    "MaxPool": "window",
    "Compare": "compare",
    "Bitwise": "bits",
    "ArgMax": "indexing",
    "CumReduce": "scan",
}
"""One primitive per family of ``glow_core.primitives``, each planted with the off-by-one bug."""


def mutant(kind: str) -> type[SmallInterpreter]:
    """A backend claiming ``kind`` alone (for one element kind) whose kernel of it is wrong in
    its last element."""
    elem = "int32" if kind == "Bitwise" else "float32"
    return type(
        f"Mutant{kind}",
        (SmallInterpreter,),
        {
            "__doc__": f"Its {kind} gets the last element wrong.",
            "__module__": __name__,  # picklable by name, for the workers
            "name": f"mutant-{kind.lower()}",
            "claims": {kind: [elem]},
            "broken": {kind: _last_element_wrong},
        },
    )


MUTANTS = tuple(mutant(kind) for kind in MUTATED_FAMILIES)
globals().update({cls.__name__: cls for cls in MUTANTS})


def _crashing(reference: Callable[..., Any]) -> Callable[..., Any]:
    def add(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        if lhs.shape == CRASH_SHAPE and lhs.dtype == np.float32:
            os.kill(os.getpid(), signal.SIGSEGV)  # as a kernel reading out of bounds would
        return reference(lhs, rhs)

    return add


def _hanging(reference: Callable[..., Any]) -> Callable[..., Any]:
    def matmul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        if lhs.shape == HANG_SHAPE and lhs.dtype == np.float32:
            time.sleep(600)  # as a kernel waiting for a device that never answers
        return reference(lhs, rhs)

    return matmul


CRASH_SHAPE = (5, 1, 3)  # one derived shape: the special-value cases use the first example's
HANG_SHAPE = (8, 6)  # MatMul's first example scaled by 2


class CrashingAdd(SmallInterpreter):
    """Its Add kills the process on float32[4,5] operands; everything else is right."""

    name = "crashing-add"
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"Add": _crashing}


class HangingMatMul(SmallInterpreter):
    """Its MatMul never returns on float32[4,3] operands; everything else is right."""

    name = "hanging-matmul"
    claims: ClassVar[dict[str, list[str] | None]] = {"MatMul": ["float32"], "Sub": ["float32"]}
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"MatMul": _hanging}


class Overclaiming(SmallInterpreter):
    """Claims what no case can check: int8 MatMul (glow defines it for floats) and a non-kind."""

    name = "overclaiming"
    claims: ClassVar[dict[str, list[str] | None]] = {
        "Add": ["float32"],
        "MatMul": ["float32", "int8"],
        "Frobnicate": ["float32"],
    }


class BadXfails(SmallInterpreter):
    """Declares a known failure that passes, and one whose id matches no case."""

    name = "bad-xfails"
    claims: ClassVar[dict[str, list[str] | None]] = {"Add": ["float32"]}
    xfail: ClassVar[dict[str, str]] = {
        "Add[float32-4x5_4x5]": "thought broken",
        "Add[float32-99x99_99x99]": "a typo",
    }


class IgnoresPredicates(SmallInterpreter):
    """Claims what the predication cases build, but runs predicated instructions anyway."""

    name = "ignores-predicates"
    claims: ClassVar[dict[str, list[str] | None]] = {kind: ["float32"] for kind in predication.USED_KINDS}

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> Any:  # type: ignore[override]
        for instr in ir.instrs:
            instr.operands = [(v, r) for v, r in instr.operands if r is not Role.PRED]
        return super().compile(ir, options)


class DropsFusedActivation(SmallInterpreter):
    """Keeps FullyConnected and declares Relu fused into it, but its kernel forgets the Relu."""

    name = "drops-fused-activation"
    claims: ClassVar[dict[str, list[str] | None]] = {"FullyConnected": ["float32"]}

    def __init__(self) -> None:
        super().__init__(keep=("FullyConnected",))

    def info(self) -> BackendInfo:
        return super().info().model_copy(update={"fused_activations": {"FullyConnected": ["Relu"]}})

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> Any:  # type: ignore[override]
        for instr in ir.instrs:
            if instr.kind == "FullyConnected":
                instr.attrs = {**instr.attrs, "activation": "none"}
        return super().compile(ir, options)


FAKES = (
    SmallInterpreter,
    WrongAdd,
    WrongMatMul,
    Overclaiming,
    BadXfails,
    IgnoresPredicates,
    DropsFusedActivation,
)
"""The fakes every conformance test sees (``glow conformance --all`` runs them all)."""


def _dropping_nan(reference: Callable[..., Any]) -> Callable[..., Any]:
    def maximum(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        return np.fmax(lhs, rhs)  # the number beside a NaN wins

    return maximum


class NanDroppingMax(SmallInterpreter):
    """Its Max returns the number beside a NaN (a ``a > b ? a : b`` kernel)."""

    name = "nan-dropping-max"
    claims: ClassVar[dict[str, list[str] | None]] = {"Max": ["float32"]}
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"Max": _dropping_nan}


def _row_stride_for_columns(reference: Callable[..., Any]) -> Callable[..., Any]:
    def maxpool(input: np.ndarray, kernel: Any, strides: Any, pads: Any) -> np.ndarray:
        return reference(input, kernel=kernel, strides=(strides[0], strides[0]), pads=pads)

    return maxpool


class RowStrideMaxPool(SmallInterpreter):
    """Its MaxPool uses the row stride for the columns too."""

    name = "row-stride-maxpool"
    claims: ClassVar[dict[str, list[str] | None]] = {"MaxPool": ["float32"]}
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"MaxPool": _row_stride_for_columns}


def _argmin_on_int64(reference: Callable[..., Any]) -> Callable[..., Any]:
    def argmax(input: np.ndarray, **attrs: Any) -> np.ndarray:
        return reference(-input if input.dtype == np.int64 else input, **attrs)

    return argmax


class Int64ArgMin(SmallInterpreter):
    """Its ArgMax kernel for int64 inputs finds the minimum (its float32 kernel is right)."""

    name = "int64-argmin"
    claims: ClassVar[dict[str, list[str] | None]] = {"ArgMax": ["int64"]}
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"ArgMax": _argmin_on_int64}


MORE_FAKES = (CrashingAdd, HangingMatMul, NanDroppingMax, RowStrideMaxPool, Int64ArgMin, *MUTANTS)
"""Fakes registered only for the tests about them (``more_fakes`` fixture)."""

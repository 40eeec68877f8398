"""What every generated case is: a stable id, the layer and group it counts under, and a run.

A case is data: generating the suite never runs anything, so the pytest plugin can list the
cases at collection time and the CLI can filter them before paying for a run.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from glow_conformance.results import Verdict
from glow_core.errors import GlowError

LAYERS = ("primitives", "onnx", "models", "partitions")
"""The layers, in the order they run: the contract, then ONNX operators, then whole models,
then whole models split between the backend and the reference interpreter."""

ONNX_PREFIX = "onnx:"
MODEL_PREFIX = "model:"
PARTITION_PREFIX = "partition:"


def layer_of(case_id: str) -> str:
    """The layer a case id belongs to, read from its form (xfail ids are checked per layer)."""
    if case_id.startswith(ONNX_PREFIX):
        return "onnx"
    if case_id.startswith(MODEL_PREFIX):
        return "models"
    if case_id.startswith(PARTITION_PREFIX):
        return "partitions"
    return "primitives"


def parse_layers(text: str | None) -> tuple[str, ...]:
    """``"primitives,onnx"`` -> the layers in run order; an unknown name is a GlowError."""
    if not text:
        return LAYERS
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(LAYERS))
    if unknown:
        raise GlowError(f"unknown conformance layer(s) {unknown}; the layers are {', '.join(LAYERS)}")
    return tuple(n for n in LAYERS if n in names)


@dataclass(frozen=True, eq=False)
class Case(ABC):
    """One check: ``run`` never raises for anything the target does, it returns a Verdict."""

    id: str
    group: str
    layer: ClassVar[str]

    @property
    def seed(self) -> int:
        """A seed from the id: different per case, the same on every run and machine."""
        return zlib.crc32(self.id.encode())

    @abstractmethod
    def run(self, target: Any) -> Verdict:
        """Run on ``target`` (a Backend, or a node-test runner for the ONNX layer)."""


def one_line(err: BaseException) -> str:
    """An exception as ``Type: message`` on one line, for tables and JSON."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__

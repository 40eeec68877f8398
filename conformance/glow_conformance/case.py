"""What every generated case is: a stable id, the layer and group it counts under, and a run.

A case is data: generating the suite never runs anything, so the pytest plugin can list the
cases at collection time and the CLI can filter them before paying for a run.
"""

from __future__ import annotations

import os
import secrets
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
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
    run_seed: int = field(default=0, kw_only=True)
    """The run's seed (``resolve_seed``), set by ``suite.plan`` on every case."""
    layer: ClassVar[str]

    @property
    def seed(self) -> int:
        """The case's own seed: its id mixed with the run's seed, so it differs per case and
        per run, and a run seed replays every case of that run (run seed 0 gives each case
        the seed of its id alone)."""
        return zlib.crc32(self.id.encode(), self.run_seed)

    @abstractmethod
    def run(self, target: Any) -> Verdict:
        """Run on ``target`` (a Backend, or a node-test runner for the ONNX layer)."""


SEED_ENV = "GLOW_CONFORMANCE_SEED"
"""An environment variable pinning the run seed where no ``--seed`` is given: test suites set
it (glow's own sets 0) so that their runs, subprocesses included, draw the same inputs."""

SEED_LIMIT = 2**32
"""Run seeds are 32-bit (they seed a CRC-32 of the case id)."""


def resolve_seed(given: int | None = None) -> int:
    """The run seed: ``given``, else ``$GLOW_CONFORMANCE_SEED``, else a fresh random one, so
    a default run draws new inputs each time and a bug that hides from one draw meets the next."""
    if given is None:
        pinned = os.environ.get(SEED_ENV, "").strip()
        if not pinned:
            return secrets.randbelow(SEED_LIMIT)
        try:
            given = int(pinned)
        except ValueError:
            raise GlowError(
                f"${SEED_ENV}={pinned!r} is not an integer seed; unset it or give a number"
            ) from None
    if not 0 <= given < SEED_LIMIT:
        raise GlowError(f"seed {given} is out of range: use 0 to {SEED_LIMIT - 1}")
    return given


def one_line(err: BaseException) -> str:
    """An exception as ``Type: message`` on one line, for tables and JSON."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__

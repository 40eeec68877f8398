"""Known failures a backend declares, by stable case id, and how they change an outcome.

Two places, merged: ``BackendInfo.xfail`` (id -> reason), and a file in the backend's
package, ``conformance_xfail.toml`` (a ``[xfail]`` table) or ``conformance_xfail.json``
(``{"xfail": {...}}``), for lists too long to keep in code. Declarations are strict: one
that passes is reported (XPASSED fails the run), and one naming no generated case is an
error, so the list can only shrink as the backend improves.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glow_conformance.case import layer_of
from glow_conformance.results import Outcome, Verdict
from glow_core.backend import Backend
from glow_core.errors import GlowError

XFAIL_FILES = ("conformance_xfail.toml", "conformance_xfail.json")
"""File names looked up in the top-level package of the backend's class."""

INFO_SOURCE = "BackendInfo.xfail"


@dataclass(frozen=True)
class Xfails:
    """Declared known failures: id -> reason, and where each was declared."""

    reasons: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def apply(self, case_id: str, verdict: Verdict) -> Verdict:
        """The verdict once declarations count: a declared failure is XFAILED, a declared pass XPASSED."""
        if case_id not in self.reasons or verdict.outcome not in (
            Outcome.PASSED,
            Outcome.FAILED,
            Outcome.UNSUPPORTED,
            Outcome.CRASHED,
            Outcome.TIMEOUT,
        ):
            return verdict
        declared = f"declared xfail in {self.sources[case_id]} ({self.reasons[case_id]})"
        if verdict.outcome is Outcome.PASSED:
            return Verdict(Outcome.XPASSED, f"{declared} but passed: remove the declaration")
        return Verdict(Outcome.XFAILED, f"{self.reasons[case_id]}; got: {verdict.message}")

    def unknown(self, known_ids: Collection[str], layers: Collection[str]) -> list[str]:
        """Declared ids of the layers being run that match no generated case."""
        return sorted(i for i in self.reasons if layer_of(i) in layers and i not in known_ids)


def load_xfails(backend: Backend) -> Xfails:
    """The backend's declarations: ``BackendInfo.xfail`` plus its package's xfail file."""
    reasons = dict(backend.info().xfail)
    sources = dict.fromkeys(reasons, INFO_SOURCE)
    for path in _xfail_files(type(backend)):
        for case_id, reason in read_xfail_file(path).items():
            reasons[case_id] = reason
            sources[case_id] = path.name
    return Xfails(reasons, sources)


def _xfail_files(cls: type) -> list[Path]:
    """The xfail files in the top-level package defining ``cls`` (none for a plain module)."""
    package = sys.modules.get(cls.__module__.split(".")[0])
    if package is None or not hasattr(package, "__path__"):
        return []
    found = []
    for directory in package.__path__:
        found += [Path(directory) / n for n in XFAIL_FILES if (Path(directory) / n).is_file()]
    return found


def read_xfail_file(path: Path) -> dict[str, str]:
    """id -> reason from a TOML or JSON xfail file; a malformed file is a GlowError naming it."""
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(path.read_text(encoding="utf-8"))
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise GlowError(f"cannot read xfail file {path}: {err}") from None
    table = data.get("xfail") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise GlowError(
            f"xfail file {path} must hold one table `xfail` of case id -> reason strings, "
            'e.g. [xfail] "MatMul[float16-4x3_3x5]" = "accumulates in f16"'
        )
    return dict(table)

"""The results model: what one case gave, and a backend's scoreboard over all layers.

Every runner (the CLI, the pytest plugin) produces these same objects, so the counts in a
scoreboard mean the same thing however the suite was run.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


class Outcome(enum.StrEnum):
    """How one case ended."""

    PASSED = "passed"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"
    """Refused at load or compile time with a GlowError: reported, never counted as a pass."""
    XFAILED = "xfailed"
    """Did not pass, and the backend declared it would not."""
    XPASSED = "xpassed"
    """Passed although declared xfail: strict, so a failure of the run (remove the xfail)."""
    SKIPPED = "skipped"
    """Could not be checked here (no onnxruntime for the models layer)."""
    ERROR = "error"
    """The suite itself could not build the case (an unknown xfail id, a bad sample)."""
    CRASHED = "crashed"
    """The process running the case died (a segfault in a kernel): the run went on without it."""
    TIMEOUT = "timeout"
    """The case ran past the per-case time limit and was stopped: the run went on without it."""


BAD_OUTCOMES = frozenset({Outcome.FAILED, Outcome.XPASSED, Outcome.ERROR, Outcome.CRASHED, Outcome.TIMEOUT})
"""Outcomes that make a run fail."""

COLUMNS = tuple(Outcome)
"""Column order of every table."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What running a case said, before xfail declarations are applied."""

    outcome: Outcome
    message: str = ""


PASS = Verdict(Outcome.PASSED)


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's final outcome, with the group (op kind, ONNX op type, model) it counts under."""

    id: str
    layer: str
    group: str
    outcome: Outcome
    message: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        return cls(**{**data, "outcome": Outcome(data["outcome"])})


def count(results: list[CaseResult]) -> dict[str, int]:
    """Outcome name -> number of results, every outcome present (zeros included)."""
    found = Counter(r.outcome for r in results)
    return {o.value: found.get(o, 0) for o in COLUMNS}


def by_group(results: list[CaseResult]) -> dict[str, list[CaseResult]]:
    """Results per group, groups sorted by name."""
    groups: dict[str, list[CaseResult]] = {}
    for r in sorted(results, key=lambda r: r.group):
        groups.setdefault(r.group, []).append(r)
    return groups


class RunVerdict(enum.StrEnum):
    """What a whole run says, with the exit status ``glow conformance`` gives it."""

    PASS = "PASS"
    FAIL = "FAIL"
    """A case failed, crashed, timed out, errored, or a declared xfail passed."""
    INCOMPLETE = "INCOMPLETE"
    """Nothing failed, but a layer could not run: every one of its cases was skipped."""
    EMPTY = "NO CASES"
    """Nothing ran: no case was generated or matched the selection (pytest's "no tests")."""

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self]


EXIT_STATUS = {RunVerdict.PASS: 0, RunVerdict.FAIL: 1, RunVerdict.INCOMPLETE: 4, RunVerdict.EMPTY: 5}
"""Exit statuses of ``glow conformance`` per verdict; 2 is a usage error (pytest's 5 for
"no tests collected" is the model for EMPTY)."""


@dataclass
class Scoreboard:
    """One target's results (a backend, or a reference runtime) and facts about the run."""

    target: str
    meta: dict[str, Any] = field(default_factory=dict)
    layers: dict[str, list[CaseResult]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the run passes: nothing failed, no xfail passed, no error."""
        return not self.problems()

    @property
    def verdict(self) -> RunVerdict:
        """PASS only when something ran, nothing went wrong and every layer could run."""
        if self.problems():
            return RunVerdict.FAIL
        if not any(self.layers.values()):
            return RunVerdict.EMPTY
        if self.layers_not_run():
            return RunVerdict.INCOMPLETE
        return RunVerdict.PASS

    def layers_not_run(self) -> dict[str, str]:
        """Layers whose every case was skipped -> the first reason: nothing in them was checked."""
        return {
            name: results[0].message
            for name, results in self.layers.items()
            if results and all(r.outcome is Outcome.SKIPPED for r in results)
        }

    def problems(self) -> list[CaseResult]:
        """The results that make the run fail, in run order."""
        return [r for rs in self.layers.values() for r in rs if r.outcome in BAD_OUTCOMES]

    def add(self, result: CaseResult) -> None:
        self.layers.setdefault(result.layer, []).append(result)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per layer the counts, then every case that did not pass with its message."""
        layers = {}
        for name, results in self.layers.items():
            layers[name] = {
                "counts": count(results),
                "groups": {g: count(rs) for g, rs in by_group(results).items()},
                "problems": [r.to_dict() for r in results if r.outcome is not Outcome.PASSED],
                "passed": sorted(r.id for r in results if r.outcome is Outcome.PASSED),
            }
        head = {"target": self.target, "ok": self.ok, "verdict": self.verdict.value}
        return head | {"seconds": round(self.seconds, 2), **self.meta} | {"layers": layers}

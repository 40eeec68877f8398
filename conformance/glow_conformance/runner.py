"""Running one case: its verdict, the xfail declarations applied, the time it took.

The only place a case runs, so the CLI and the pytest plugin count outcomes identically.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from glow_conformance.case import Case, layer_of, one_line
from glow_conformance.results import CaseResult, Outcome, Verdict
from glow_conformance.xfail import Xfails


@dataclass(frozen=True, eq=False)
class UnknownXfail(Case):
    """An xfail declaration naming no generated case: an error, so typos cannot hide."""

    source: str = ""

    @property
    def layer(self) -> str:  # type: ignore[override]
        return layer_of(self.id)

    def run(self, target: Any) -> Verdict:
        return Verdict(
            Outcome.ERROR,
            f"xfail id {self.id!r} (declared in {self.source}) matches no generated case; "
            "fix or remove it (`glow conformance --backend NAME` lists the ids in its report)",
        )


def judge(case: Case, target: Any) -> tuple[Verdict, float]:
    """What running ``case`` on ``target`` says, and the seconds it took; a crash of the suite
    itself becomes an ERROR, never a raise."""
    start = time.perf_counter()
    try:
        verdict = case.run(target)
    except Exception as err:
        verdict = Verdict(Outcome.ERROR, f"the conformance suite crashed on this case: {one_line(err)}")
    return verdict, time.perf_counter() - start


def run_case(case: Case, target: Any, xfails: Xfails) -> CaseResult:
    """Run ``case`` on ``target`` in this process, xfail declarations applied."""
    return settle(case, *judge(case, target), xfails)


def settle(case: Case, verdict: Verdict, seconds: float, xfails: Xfails) -> CaseResult:
    """The case's result once the xfail declarations count (also for a verdict the worker
    could not give: a crash or a timeout)."""
    verdict = xfails.apply(case.id, verdict)
    message = verdict.message
    if verdict.outcome in REPLAYABLE:
        message += f" [seed {case.run_seed}: replay with --seed {case.run_seed} --select '{case.id}']"
    return CaseResult(case.id, case.layer, case.group, verdict.outcome, message, seconds)


REPLAYABLE = frozenset({Outcome.FAILED, Outcome.ERROR, Outcome.CRASHED, Outcome.TIMEOUT})
"""Outcomes whose message names the run seed: the inputs that found the problem come back
with it."""

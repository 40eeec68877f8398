"""A fuzz campaign: many seeded cases, counts per outcome and per failure, saved reproducers.

Failures are grouped by signature (outcome, exception type, glow site); the first case of
each group is minimized and saved as ``NAME.onnx`` plus ``NAME.txt`` (a line saying what
happened, then how the case was made and the recipe that replays it).

``TOLERATE_ENV`` names failures known and pending elsewhere (the loader's validation work, the
memory budget), by site prefix or exception type: they are counted and saved as
``tolerated`` and do not fail the campaign, so the rest of glow is held to the rule meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fuzz import spec
from fuzz.check import FAILURES
from fuzz.minimize import minimize
from fuzz.supervisor import Result, Supervisor

TOLERATE_ENV = "GLOW_FUZZ_TOLERATE"
"""Comma-separated site prefixes or exception types whose failures are tolerated, e.g.
``glow_core/frontends/,MemoryError``."""


def tolerated_entries() -> tuple[str, ...]:
    """The entries of ``TOLERATE_ENV``."""
    return tuple(p.strip() for p in os.environ.get(TOLERATE_ENV, "").split(",") if p.strip())


def is_tolerated(result: Result, tolerate: tuple[str, ...]) -> bool:
    """Whether a failure matches an entry: its site, or the importer frame it was raised for
    (``via``), starts with it, or its exception type is it."""
    _, kind, site = result.signature
    via = (result.error or {}).get("via", "")
    return any(
        site.startswith(entry) or (via and via.startswith(entry)) or kind == entry for entry in tolerate
    )


@dataclass
class Summary:
    """What a campaign found."""

    seed: int
    backend: str
    cases: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    failures: dict[tuple[str, str, str], list[Result]] = field(default_factory=dict)
    tolerated: dict[tuple[str, str, str], list[Result]] = field(default_factory=dict)
    reproducers: list[Path] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def add(self, result: Result, tolerate: tuple[str, ...]) -> None:
        self.cases += 1
        self.outcomes[result.outcome] += 1
        if result.outcome == "unchecked" or result.outcome == "fuzzer-error":
            self.notes[_note_kind(result.note)] += 1
        if result.outcome in FAILURES:
            group = self.tolerated if is_tolerated(result, tolerate) else self.failures
            group.setdefault(result.signature, []).append(result)

    def text(self) -> str:
        """The report: cases, time, outcomes, then each failure signature with a sample."""
        lines = [
            f"glow fuzz: seed {self.seed}, backend {self.backend}: {self.cases} cases in {self.seconds:.0f} s"
        ]
        lines += [f"  {count:6d}  {outcome}" for outcome, count in self.outcomes.most_common()]
        if self.notes:
            lines.append("not checked against the oracles, or not built, because:")
            lines += [f"  {count:6d}  {note}" for note, count in self.notes.most_common(8)]
        for title, groups in (("FAILURES", self.failures), ("tolerated (pending elsewhere)", self.tolerated)):
            if groups:
                lines.append(f"{title}: {sum(map(len, groups.values()))} cases, {len(groups)} distinct")
            for signature, results in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                first = results[0]
                error = first.error or {}
                message = error.get("message", "") or first.note
                via = f" (via {error['via']})" if error.get("via") and error["via"] != signature[2] else ""
                lines.append(
                    f"  {len(results):6d}  {' '.join(filter(None, signature))}{via}: {message[:140]}"
                )
        lines += [f"reproducer: {path}" for path in self.reproducers]
        return "\n".join(lines)


def _note_kind(note: str) -> str:
    """A note with its particulars (names, numbers) removed, for counting."""
    return re.sub(r"'[^']*'|\d+(\.\d+)?(e[-+]?\d+)?", "_", note.split(":")[0] if "refused" in note else note)[
        :90
    ]


def run_campaign(
    seed: int = 0,
    cases: int | None = 1000,
    minutes: float | None = None,
    backend: str = "interpreter",
    workers: int = 2,
    memory_mb: int = 3072,
    timeout_s: float = 30.0,
    out_dir: Path | None = None,
    shrink: bool = True,
    progress: bool = False,
    tolerate: tuple[str, ...] | None = None,
) -> Summary:
    """Run cases ``0..cases-1`` of campaign ``seed`` (or as many as fit in ``minutes``);
    ``tolerate`` defaults to the entries of ``TOLERATE_ENV``."""
    summary = Summary(seed, backend)
    tolerate = tolerated_entries() if tolerate is None else tolerate
    start = time.monotonic()
    deadline = start + minutes * 60 if minutes is not None else None
    count = cases if cases is not None else 1 << 62

    def on_result(result: Result) -> None:
        summary.add(result, tolerate)
        if progress and summary.cases % 200 == 0:
            print(
                f"... {summary.cases} cases, {time.monotonic() - start:.0f} s, "
                f"{sum(map(len, summary.failures.values()))} failures",
                flush=True,
            )

    with Supervisor(backend, workers, memory_mb, timeout_s) as supervisor:
        supervisor.run((spec.recipe(seed, i) for i in range(count)), deadline, on_result)
        summary.seconds = time.monotonic() - start
        if out_dir is not None:
            for groups in (summary.failures, summary.tolerated):
                for results in groups.values():
                    sample = minimize(supervisor, results[0]) if shrink else results[0]
                    summary.reproducers.append(save_reproducer(sample, out_dir))
    return summary


def reproducer_name(result: Result) -> str:
    """A file name that says what failed where: ``raw-exception-KeyError-onnx-loader-add_inputs``."""
    outcome, kind, site = result.signature
    site = site.replace("glow_core/", "").replace("frontends/", "").replace(".py", "")
    return re.sub(r"[^A-Za-z0-9_]+", "-", "-".join(filter(None, (outcome, kind, site)))).strip("-")


def save_reproducer(result: Result, out_dir: Path) -> Path:
    """Write ``NAME.onnx`` and ``NAME.txt`` (what happened, how the case was made, its recipe)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{reproducer_name(result)}.onnx"
    path.write_bytes(result.model)
    error = result.error or {}
    via = f" via {error['via']}" if error.get("via") and error["via"] != error.get("site") else ""
    site = f"{error.get('site', '')}{via}"
    what = f"{result.outcome}: {error.get('type', '')} at {site}: {error.get('message', '')}"
    if not error.get("type"):  # a wrong answer, a crash or a hang: no exception, the note says why
        what = f"{result.outcome}{f' at {site}' if site else ''}: {result.note}"
    text = [what, *(f"  {line}" for line in result.lines), f"  recipe: {json.dumps(result.recipe)}"]
    if error.get("traceback"):
        text += ["", error["traceback"]]
    path.with_suffix(".txt").write_text("\n".join(text) + "\n")
    return path

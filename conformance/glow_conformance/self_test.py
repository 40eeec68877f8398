"""The suite's mutation score: plant realistic bugs into the SDK template, one at a time.

``glow conformance --self-test`` renders the backend template (``glow-sdk new``) into a
temporary folder, and for each mutant of ``glow_backend_sdk.mutants.MUTANTS`` swaps the one
kernel it edits for its mutated source, runs the primitives-layer cases of that kernel's
primitive, and restores the kernel. A mutant is *caught* when a case fails, and the catch
counts only if that same case passes on the unmutated template (so a template bug or a
flaky draw never counts as a catch); otherwise it *escapes*, and the report names it.

Time is bounded two ways, and the report says so: each mutant's run is restricted to the
cases of the primitive it touches (a kernel of Max cannot make MatMul fail), and stops at
the first failing case; the mutants are spread over worker processes (``jobs``, one per CPU
by default), each of which imports the template once and swaps kernels in place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glow_conformance.case import resolve_seed
from glow_conformance.results import Outcome
from glow_core.cpus import usable_cpus
from glow_core.errors import GlowError

TEMPLATE_NAME = "selftest"
"""The name the template is rendered under (package ``glow_selftest``)."""

WORKER_TIMEOUT = 900.0
"""Seconds a worker may take for all its mutants before the self-test gives up on them."""


@dataclass(frozen=True)
class MutantResult:
    """What the suite did with one planted bug."""

    name: str
    bug: str
    caught_by: str = ""
    """The id of the first failing case (empty: the mutant escaped)."""
    message: str = ""
    problem: str = ""
    """Why the mutant could not be scored (its text is gone, the catching case also fails
    on the unmutated template); a problem counts as an escape."""

    @property
    def caught(self) -> bool:
        return bool(self.caught_by) and not self.problem


@dataclass(frozen=True)
class SelfTestReport:
    """Every mutant's result, the seed that drew the inputs, and the time taken."""

    results: list[MutantResult]
    seed: int
    seconds: float

    @property
    def escapes(self) -> list[MutantResult]:
        return [r for r in self.results if not r.caught]

    @property
    def share(self) -> float:
        return (len(self.results) - len(self.escapes)) / len(self.results) if self.results else 0.0

    def lines(self) -> list[str]:
        """The report as text: one line per mutant, then the score."""
        out = []
        for r in self.results:
            if r.caught:
                out.append(f"  caught   {r.name}: by {r.caught_by}")
            else:
                why = r.problem or "no case of its primitive failed"
                out.append(f"  ESCAPED  {r.name} ({r.bug}): {why}")
        caught = len(self.results) - len(self.escapes)
        out.append(
            f"mutation score: {caught}/{len(self.results)} planted bugs caught ({100 * self.share:.1f}%), "
            f"seed {self.seed}, {self.seconds:.0f} s; each mutant ran only its primitive's cases, "
            "up to the first failure"
        )
        return out


def run_self_test(
    seed: int | None = None,
    jobs: int | None = None,
    only: tuple[str, ...] = (),
    progress: Callable[[MutantResult], None] | None = None,
) -> SelfTestReport:
    """Render the template, run every mutant (or those named in ``only``), score the suite."""
    try:
        from glow_backend_sdk.mutants import MUTANTS
        from glow_backend_sdk.render import render_backend
    except ImportError as err:
        raise GlowError(
            f"the self-test plants its bugs into glow-backend-sdk's template, which cannot be "
            f"imported ({err}): `pip install glow-backend-sdk`"
        ) from None

    seed = resolve_seed(seed)
    names = [m.name for m in MUTANTS if not only or m.name in only]
    unknown = sorted(set(only) - {m.name for m in MUTANTS})
    if unknown:
        raise GlowError(f"no mutant named {unknown}; the mutants are {[m.name for m in MUTANTS]}")
    start = time.perf_counter()
    jobs = max(1, min(jobs or usable_cpus(), len(names)))
    with tempfile.TemporaryDirectory(prefix="glow-self-test-") as tmp:
        package = render_backend(TEMPLATE_NAME, Path(tmp) / "template")
        shares = [names[i::jobs] for i in range(jobs)]
        workers = [_start_worker(package, seed, share) for share in shares if share]
        results: dict[str, MutantResult] = {}
        for worker, share in zip(workers, shares, strict=False):
            for result in _collect(worker, share):
                results[result.name] = result
                if progress:
                    progress(result)
    ordered = [results[n] for n in names]
    return SelfTestReport(ordered, seed, time.perf_counter() - start)


def _start_worker(package: Path, seed: int, names: list[str]) -> subprocess.Popen[str]:
    request = package.parent / f"request-{names[0]}.json"
    request.write_text(json.dumps({"package": str(package), "seed": seed, "mutants": names}))
    path = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
    return subprocess.Popen(
        [sys.executable, "-m", "glow_conformance.self_test", str(request)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


def _collect(process: subprocess.Popen[str], names: list[str]) -> list[MutantResult]:
    """The worker's results; a mutant it never reported (it crashed, it hung) is a problem."""
    try:
        out, _ = process.communicate(timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    got = {}
    for line in out.splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            got[data["name"]] = MutantResult(**data)
    lost = f"its worker ended without a result (exit status {process.returncode})"
    return [got.get(n) or MutantResult(n, "", problem=lost) for n in names]


# ---- the worker -------------------------------------------------------------------------


def _template_backend(package: Path) -> tuple[type, types.ModuleType]:
    """The rendered backend's class and its kernel package, imported from ``package``."""
    import importlib

    from glow_core.backend import Backend

    sys.path.insert(0, str(package))
    backend_module = importlib.import_module(f"glow_{TEMPLATE_NAME}.backend")
    kernels = importlib.import_module(f"glow_{TEMPLATE_NAME}.kernels")
    classes = [
        v
        for v in vars(backend_module).values()
        if isinstance(v, type) and issubclass(v, Backend) and v is not Backend
    ]
    return classes[0], kernels


def _claiming_only(cls: type, kind: str) -> Any:
    """The template's backend claiming ``kind`` alone (for every element kind it runs)."""

    class Restricted(cls):  # type: ignore[misc, valid-type]
        def info(self) -> Any:
            info = super().info()
            return info.model_copy(update={"supports": {kind: info.supports[kind]}})

    return Restricted()


def _mutated_module(kernels: types.ModuleType, file: Path, source: str) -> types.ModuleType:
    module = types.ModuleType(f"{kernels.__name__}.{file.stem}")
    module.__file__ = str(file)
    module.__package__ = kernels.__name__
    exec(compile(source, f"{file} (mutant)", "exec"), module.__dict__)
    return module


def _score(mutant: Any, cls: type, kernels: types.ModuleType, seed: int) -> MutantResult:
    from glow_conformance.suite import SuiteOptions, plan

    file = Path(kernels.__file__).parent / mutant.kernel
    try:
        source = mutant.apply(file.read_text(encoding="utf-8"))
    except GlowError as err:
        return MutantResult(mutant.name, mutant.bug, problem=str(err))
    original_module = next(m for m in kernels.KERNELS.values() if Path(m.__file__).name == mutant.kernel)
    kind = original_module.KIND
    the_plan = plan(_claiming_only(cls, kind), SuiteOptions(layers=("primitives",), seed=seed))
    kernels.KERNELS[kind] = _mutated_module(kernels, file, source)
    try:
        failing = next(
            (r for r in map(the_plan.run, the_plan.cases) if r.outcome is not Outcome.PASSED), None
        )
    finally:
        kernels.KERNELS[kind] = original_module
    if failing is None:
        return MutantResult(mutant.name, mutant.bug)
    case = next(c for c in the_plan.cases if c.id == failing.id)
    control = the_plan.run(case)
    problem = ""
    if control.outcome is not Outcome.PASSED:
        problem = f"the catching case {failing.id} fails on the unmutated template too: {control.message}"
    return MutantResult(mutant.name, mutant.bug, failing.id, failing.message, problem)


def _serve() -> None:
    """Worker: read the request (the file named by the one argument), print one JSON line per
    mutant scored."""
    import dataclasses
    import warnings

    from glow_backend_sdk.mutants import MUTANTS

    warnings.simplefilter("ignore")
    request = json.loads(Path(sys.argv[1]).read_text())
    cls, kernels = _template_backend(Path(request["package"]))
    by_name = {m.name: m for m in MUTANTS}
    for name in request["mutants"]:
        try:
            result = _score(by_name[name], cls, kernels, request["seed"])
        except Exception as err:  # a bug of the self-test itself: reported, never hidden
            result = MutantResult(name, by_name[name].bug, problem=f"the self-test crashed: {err!r}")
        print(json.dumps(dataclasses.asdict(result)), flush=True)


if __name__ == "__main__":
    _serve()

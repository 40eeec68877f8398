"""The suite's mutation score: every realistic bug planted into the template is caught.

``glow conformance --self-test`` in a test: each mutant of ``glow_backend_sdk.mutants`` is
planted alone into a freshly rendered template and must make one of its primitive's cases
fail (a case that passes on the unmutated template). The run is bounded: each mutant runs
only its primitive's cases, up to the first failure, spread over one worker per CPU.
"""

from __future__ import annotations

import pytest
from glow_backend_sdk.mutants import MUTANTS, Mutant
from glow_conformance.self_test import run_self_test

from glow_core.errors import GlowError


def test_every_planted_bug_is_caught():
    report = run_self_test(seed=0)
    assert len(report.results) == len(MUTANTS) >= 30
    assert not report.escapes, "\n".join(report.lines())
    assert report.share == 1.0


def test_the_mutants_are_distinct_and_named_once():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert len({(m.kernel, m.old, m.new) for m in MUTANTS}) == len(MUTANTS)


def test_a_mutant_whose_text_is_gone_fails_loudly():
    stale = Mutant("stale", "max.py", "np.maximum(lhs, rhs, out=dest, where=True)", "", "a template change")
    with pytest.raises(GlowError, match=r"occurs 0 times in kernels/max\.py"):
        stale.apply("def run(dest, lhs, rhs):\n    np.maximum(lhs, rhs, out=dest)\n")

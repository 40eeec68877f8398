"""The pass manager: pipelines as data, repeats to a fixed point, reports, verification
between passes, and refusals."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from graph_helpers import kinds_of, new_function, random_feeds, seeded_rng

from glow_core.errors import GlowError, VerifyError
from glow_core.graph import Function, Module
from glow_core.graph.parser import parse_function
from glow_core.graph.printer import function_to_text
from glow_core.graph.verifier import verify
from glow_core.lowering.evaluate import evaluate
from glow_core.passes import DEFAULT_GRAPH_PIPELINE, GRAPH_PASSES, PassReport, Pipeline, Repeat, run_pipeline

# ---- the pass manager ---------------------------------------------------------------


def _messy(rng: np.random.Generator) -> Module:
    """A graph with work for every default pass."""
    m, _fn, b = new_function()
    x = b.placeholder("x", (4, 6))
    w = b.constant(rng.standard_normal((6, 3)), name="w")
    w2 = b.Transpose(b.Transpose(w, shuffle=(1, 0)), shuffle=(1, 0))  # identity pair
    h1 = b.MatMul(b.Reshape(b.Reshape(x, shape=(24,)), shape=(4, 6)), w2)
    h2 = b.MatMul(x, w2)  # a duplicate once the reshapes are gone
    scale = b.Mul(b.constant(np.full((4, 3), 2.0, np.float32)), b.splat(0.25, h1))  # foldable
    y = b.Add(b.Mul(h1, b.splat(1.0, h1)), b.Mul(h2, scale))
    b.Exp(y)  # dead
    b.save(b.Sub(y, b.splat(0.0, y)), "y")
    return m


def test_default_pipeline_preserves_results_and_reports() -> None:
    """verify_each=True runs, every pass is timed and its changes counted; results are unchanged."""
    rng = seeded_rng("pipeline")
    m = _messy(rng)
    fn = m.function
    feeds = random_feeds(m, rng)
    before = evaluate(m, feeds)
    n_before = len(fn)
    report = run_pipeline(fn, DEFAULT_GRAPH_PIPELINE, verify_each=True)
    assert isinstance(report, PassReport)
    names = set(DEFAULT_GRAPH_PIPELINE.names())
    assert set(report.seconds) == names == set(report.changes)
    assert all(t >= 0.0 for t in report.seconds.values())
    for name in ("eliminate-noops", "merge-reshapes", "fold-transpose-pairs", "simplify-arithmetic"):
        assert report.changes[name] >= 1, name
    for name in ("fold-constants", "cse", "dce"):
        assert report.changes[name] >= 1, name
    assert len(fn) < n_before
    assert kinds_of(fn) == Counter({"MatMul": 1, "Add": 1, "Mul": 1, "Save": 1})
    verify(fn)
    after = evaluate(m, feeds)
    np.testing.assert_allclose(after["y"], before["y"], rtol=1e-6)


TRANSPOSE_PAIR = """
function main
  %x = placeholder : f32<2x3x4>
  %y = output : f32<2x3x4>
  %inner = Transpose %x {shuffle=(1,2,0)}
  %outer = Transpose %inner {shuffle=(2,0,1)}
  %tanh = Tanh %outer
  %save_y = Save %tanh, %y
"""
"""Tanh of two transposes that compose to the identity, written as graph text."""


def test_repeat_reaches_a_fixed_point() -> None:
    """A Repeat runs rounds until nothing changes: afterwards no pass in it changes anything."""
    fn = parse_function(TRANSPOSE_PAIR)
    # round 1: the pair folds (into an identity), dce drops the old pair;
    # round 2: eliminate-noops drops the identity; round 3: nothing changes.
    report = run_pipeline(
        fn, Pipeline(Repeat("eliminate-noops", "fold-transpose-pairs", "dce")), verify_each=True
    )
    assert report.changes == {"eliminate-noops": 1, "fold-transpose-pairs": 1, "dce": 1}
    assert kinds_of(fn) == Counter({"Tanh": 1, "Save": 1})
    for name in ("eliminate-noops", "fold-transpose-pairs", "dce"):
        assert GRAPH_PASSES[name](fn) is False


def test_repeat_limit_caps_rounds() -> None:
    """With limit=1 only one round runs, leaving the identity transpose for later."""
    fn = parse_function(TRANSPOSE_PAIR)
    report = run_pipeline(fn, Pipeline(Repeat("eliminate-noops", "fold-transpose-pairs", "dce", limit=1)))
    assert report.changes["eliminate-noops"] == 0
    assert [n.shuffle for n in fn.nodes_of("Transpose")] == [(0, 1, 2)]


def test_unknown_pass_fails_before_anything_runs() -> None:
    """An unknown name is a GlowError naming it, and the passes before it did not run."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    b.Exp(x)  # dead: dce would remove it
    b.save(b.Tanh(x), "y")
    kinds = kinds_of(fn)
    with pytest.raises(GlowError, match="no-such-pass"):
        run_pipeline(fn, Pipeline("dce", Repeat("cse", "no-such-pass")))
    assert kinds_of(fn) == kinds


def test_dump_after_captures_text() -> None:
    """dump_after records the text dump right after the named pass."""
    m = _messy(seeded_rng("dump"))
    fn = m.function
    report = run_pipeline(fn, Pipeline("eliminate-noops", "dce", "merge-reshapes"), dump_after="dce")
    assert set(report.dumps) == {"dce"}
    dump = report.dumps["dce"]
    assert dump.startswith("function main (")
    assert "Exp" not in dump, "the dump is taken after dce ran"
    assert function_to_text(fn) != dump, "merge-reshapes changed the graph after the dump"


def test_pipeline_names_flatten() -> None:
    """Pipeline.names lists every pass in order, Repeat groups expanded."""
    p = Pipeline("dce", Repeat("cse", "eliminate-noops", limit=3), "fold-constants")
    assert p.names() == ["dce", "cse", "eliminate-noops", "fold-constants"]
    assert p.steps[1].limit == 3


@pytest.fixture
def broken_pass() -> Iterator[str]:
    """A throwaway pass that corrupts a node's type; removed from the registry afterwards."""
    name = "test-corrupt-type"

    def corrupt(fn: Function) -> bool:
        for n in fn.nodes:
            if n.kind == "Tanh":
                n.type = n.type.with_shape((n.type.size, 1))
                return True
        return False

    GRAPH_PASSES[name] = corrupt
    try:
        yield name
    finally:
        GRAPH_PASSES.pop(name, None)


def test_verify_each_catches_a_broken_pass(broken_pass: str) -> None:
    """With verify_each the manager verifies after each pass and reports the broken graph."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    b.save(b.Exp(b.Tanh(x)), "y")
    with pytest.raises(VerifyError, match="Tanh"):
        run_pipeline(fn, Pipeline(broken_pass, "dce"), verify_each=True)

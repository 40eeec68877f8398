"""The graph IR checked and shown: verifier, text and DOT dumps, and evaluation."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from graph_helpers import mlp_module, new_function, seeded_rng

from glow_core.accuracy import relative_error
from glow_core.errors import GlowError, VerifyError
from glow_core.graph import Constant, Node, Placeholder
from glow_core.graph.function import SAVE
from glow_core.graph.printer import function_to_dot, function_to_text
from glow_core.graph.verifier import verify
from glow_core.lowering.evaluate import evaluate
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type

# ---- verifier ---------------------------------------------------------------------


def test_verifier_accepts_good_graphs() -> None:
    """A builder-made graph (high-level or lowered) verifies."""
    from glow_core.lowering import lower_function

    m, _ = mlp_module(seeded_rng("good"))
    verify(m.function)
    lower_function(m.function)
    verify(m.function)


def test_verifier_catches_tampered_type() -> None:
    """A stored type that disagrees with the type rule is reported with both types."""
    m, nodes = mlp_module(seeded_rng("tamper"))
    nodes["t"].type = Type((4, 5))
    with pytest.raises(VerifyError, match=r"Transpose 't' has type f32<4x5> but its operands give f32<5x4>"):
        verify(m.function)


def test_verifier_catches_broken_use_list() -> None:
    """An operand whose use list misses its reader is reported."""
    m, nodes = mlp_module(seeded_rng("uses"))
    nodes["fc"].users.remove((nodes["act"], 0))
    with pytest.raises(VerifyError, match="use list of 'fc' misses 'act' operand 0"):
        verify(m.function)


def test_verifier_catches_save_into_input_placeholder() -> None:
    """A Save must write an output placeholder."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    target = b.placeholder("not_out", (3,))
    fn.add(Node(SAVE, [b.Exp(x), target], {}, target.type, "bad_save"))
    with pytest.raises(VerifyError, match="'bad_save' writes 'not_out', which is not an output placeholder"):
        verify(fn)


def test_verifier_catches_output_saved_twice() -> None:
    """Two Saves into one output are reported."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    out = b.save(b.Exp(x), "y")
    fn.add(Node(SAVE, [b.Tanh(x), out], {}, out.type, "again"))
    with pytest.raises(VerifyError, match="saved twice"):
        verify(fn)


def test_verifier_catches_operand_outside_function() -> None:
    """An operand that belongs to no function (or another one) is reported."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    stray = Node(PRIMITIVES["Exp"], [x], {}, x.type, "stray")
    b.save(b.Tanh(stray, name="reader"), "y")
    with pytest.raises(VerifyError, match=r"Tanh 'reader' operand 0 \('stray'\) is not in the function"):
        verify(fn)
    other = m.create_function("other")
    foreign = other.builder().Exp(x, name="foreign")
    fn2 = m.create_function("third")
    fn2.builder().save(fn2.builder().Sqrt(foreign, name="r2"), "w")
    with pytest.raises(VerifyError, match=r"'foreign'.*not in the function"):
        verify(fn2)


def test_verifier_catches_storage_outside_module() -> None:
    """A Constant not registered in the module is reported."""
    _, fn, b = new_function()
    c = Constant("loose", np.ones(3, np.float32))
    b.save(b.Exp(c), "y")
    with pytest.raises(VerifyError, match="storage 'loose' not in the module"):
        verify(fn)


def test_verifier_lists_every_problem() -> None:
    """All problems are reported together, not just the first."""
    m, nodes = mlp_module(seeded_rng("many"))
    nodes["t"].type = Type((4, 5))
    nodes["fc"].users.remove((nodes["act"], 0))
    with pytest.raises(VerifyError) as err:
        verify(m.function)
    assert "has type" in str(err.value) and "use list" in str(err.value)


_CYCLE_SCRIPT = textwrap.dedent(
    """
    from glow_core.errors import VerifyError
    from glow_core.graph import Module
    from glow_core.graph.verifier import verify
    m = Module(); fn = m.create_function(); b = fn.builder()
    x = b.placeholder("x", (3,))
    a = b.Exp(x, name="a"); c = b.Exp(a, name="c"); b.save(c, "y")
    a.set_input(0, c)
    try:
        verify(fn)
    except VerifyError as err:
        print(err)
    """
)


def test_verifier_reports_cycle() -> None:
    """A cycle (a -> c -> a) is reported as 'the graph has a cycle'. Run in a subprocess so a
    verifier that loops forever fails the test instead of hanging it; the bound is generous
    (importing glow_core alone can take seconds on a loaded machine) since it only guards a hang."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CYCLE_SCRIPT], capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("verify() did not return on a cyclic graph within 120 s")
    assert "the graph has a cycle" in done.stdout, done.stderr


# ---- dumps -------------------------------------------------------------------------


def test_text_dump_has_a_line_per_node() -> None:
    """The text dump lists storage and one line per node with operands, attributes and type."""
    m, _nodes = mlp_module(seeded_rng("text"))
    fn = m.function
    text = function_to_text(fn)
    lines = text.splitlines()
    assert lines[0] == f"function main ({len(fn)} nodes)"
    assert "  %fc = FullyConnected %x, %w, %bias : f32<4x5>" in lines
    assert "  %act = Relu %fc : f32<4x5>" in lines
    assert "  %t = Transpose %act {shuffle=(1,0)} : f32<5x4>" in lines
    assert "  %x = placeholder : f32<4x3>" in lines
    assert "  %y = output : f32<5x4>" in lines
    assert "  %w = constant : f32<3x5>" in lines
    for n in fn.nodes:
        operands = ", ".join(f"%{i.name}" for i in n.inputs)
        matching = [ln for ln in lines if ln.startswith(f"  %{n.name} = {n.kind} {operands}")]
        assert len(matching) == 1, n
        assert matching[0].endswith(f": {n.type}")


def test_dot_dump_has_an_edge_per_operand() -> None:
    """The DOT dump is a digraph with one box per node and one edge per operand use."""
    m, _nodes = mlp_module(seeded_rng("dot"))
    fn = m.function
    dot = function_to_dot(fn)
    assert dot.startswith('digraph "main" {')
    assert dot.rstrip().endswith("}")
    edges = [ln.strip() for ln in dot.splitlines() if "->" in ln]
    assert len(edges) == sum(len(n.inputs) for n in fn.nodes)
    for n in fn.nodes:
        for i in n.inputs:
            assert f'"{i.name}" -> "{n.name}";' in edges
        assert f'  "{n.name}" [shape=' in dot
    assert dot.count("shape=ellipse") == len(fn.storage())
    assert "box3d" in dot, "high-level nodes are drawn differently from primitives"


# ---- evaluate ------------------------------------------------------------------------


def test_evaluate_matches_numpy() -> None:
    """Evaluating a tiny hand-built graph gives what numpy computes in float64."""
    rng = seeded_rng("evaluate")
    m, nodes = mlp_module(rng)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    out = evaluate(m, {"x": x})
    w = nodes["w"].value.astype(np.float64)
    bias = nodes["bias"].value.astype(np.float64)
    expected_y = np.maximum(x.astype(np.float64) @ w + bias, 0.0).T
    assert set(out) == {"y", "z"}
    assert out["y"].dtype == np.float32 and out["y"].shape == (5, 4)
    assert relative_error(out["y"], expected_y) < 1e-6
    assert relative_error(out["z"], np.exp(x.astype(np.float64))) < 1e-6
    # evaluate works on a copy: the module still holds its high-level nodes
    assert any(n.kind == "FullyConnected" for n in m.function.nodes)


def test_evaluate_integer_graph() -> None:
    """Integer kinds flow through evaluate exactly (Gather of int64 data, Add, Convert)."""
    rng = seeded_rng("evaluate-int")
    m, _fn, b = new_function()
    data = b.placeholder("data", (5, 3), ElemKind.int64)
    idx = b.constant(np.array([4, -1, 0], np.int64), name="idx")
    g = b.Gather(data, idx, axis=0)
    b.save(b.Convert(b.Add(g, g), elem="float32"), "y")
    d = rng.integers(-100, 100, (5, 3)).astype(np.int64)
    out = evaluate(m, {"data": d})["y"]
    np.testing.assert_array_equal(out, (2 * d[[4, -1, 0]]).astype(np.float32))


def test_evaluate_missing_input() -> None:
    """A missing input is an InputError (a GlowError) naming it."""
    m, _ = mlp_module(seeded_rng("missing"))
    with pytest.raises(GlowError, match="missing input 'x'"):
        evaluate(m, {})


def test_placeholder_and_constant_are_storage() -> None:
    """Storage nodes are kinds of their own with no operands."""
    ph = Placeholder("p", Type((2,)))
    c = Constant("c", np.zeros((2,), np.float32))
    assert ph.kind == "Placeholder" and c.kind == "Constant"
    assert ph.inputs == () and c.inputs == ()
    assert c.type == Type((2,))

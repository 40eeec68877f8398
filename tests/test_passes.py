"""Graph passes: each one's rewrite on a tiny graph (kinds before vs after) and that
``evaluate`` gives the same outputs before and after (the pass manager: test_pass_manager.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from graph_helpers import kinds_of, new_function, random_feeds, seeded_rng

from glow_core.graph import Module
from glow_core.graph.verifier import verify
from glow_core.lowering.evaluate import evaluate
from glow_core.passes import GRAPH_PASSES
from glow_core.types import ElemKind, Type


def _run_pass(m: Module, name: str, seed: str, *, then: tuple[str, ...] = ()) -> bool:
    """Run pass ``name`` (then ``then``), verify, and check evaluate agrees before and after."""
    feeds = random_feeds(m, seeded_rng(seed))
    before = evaluate(m, feeds)
    changed = GRAPH_PASSES[name](m.function)
    verify(m.function)
    for extra in then:
        GRAPH_PASSES[extra](m.function)
        verify(m.function)
    after = evaluate(m, feeds)
    assert set(after) == set(before)
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-6, atol=0, err_msg=key)
    return changed


# ---- dce ----------------------------------------------------------------------------


def test_dce_drops_dead_nodes_and_unused_constants() -> None:
    """Dead chains and constants nobody reads go; Saves, what they read and placeholders stay."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3, 4))
    unused_input = b.placeholder("unused", (2,))
    k_live = b.constant(seeded_rng("dce-k").standard_normal((3, 4)), name="k_live")
    b.constant(np.arange(5, dtype=np.float32) + 1, name="k_dead")
    k_dead_reader = b.constant(np.ones((3, 4), np.float32) * 2, name="k_read_by_dead")
    b.Sqrt(b.Exp(b.Mul(x, k_dead_reader)))  # a dead chain of three nodes
    b.Tanh(x)  # a dead single node
    b.save(b.Add(x, k_live), "y")
    assert kinds_of(fn) == Counter({"Mul": 1, "Exp": 1, "Sqrt": 1, "Tanh": 1, "Add": 1, "Save": 1})
    assert _run_pass(m, "dce", "dce") is True
    assert kinds_of(fn) == Counter({"Add": 1, "Save": 1})
    assert set(m.constants) == {"k_live"}
    assert "unused" in m.placeholders and unused_input.users == []
    assert GRAPH_PASSES["dce"](fn) is False, "a second run finds nothing"


# ---- cse ----------------------------------------------------------------------------


def test_cse_merges_duplicates_transitively() -> None:
    """Two Exp(x) become one, after which two Tanh of them become one too."""
    m, fn, b = new_function()
    x = b.placeholder("x", (4, 5))
    t1 = b.Tanh(b.Exp(x))
    t2 = b.Tanh(b.Exp(x))
    b.save(b.Add(t1, t2), "y")
    s1 = b.splat(1.5, x)
    s2 = b.splat(1.5, x)
    b.save(b.Mul(b.Add(x, s1), s2), "z")
    assert kinds_of(fn) == Counter({"Exp": 2, "Tanh": 2, "Add": 2, "Splat": 2, "Mul": 1, "Save": 2})
    assert _run_pass(m, "cse", "cse") is True
    assert kinds_of(fn) == Counter({"Exp": 1, "Tanh": 1, "Add": 2, "Splat": 1, "Mul": 1, "Save": 2})
    add = next(n for n in fn.nodes if n.kind == "Add" and n.inputs[0].kind == "Tanh")
    assert add.inputs[0] is add.inputs[1]
    assert GRAPH_PASSES["cse"](fn) is False


def test_cse_keeps_nodes_with_different_attrs() -> None:
    """Same kind and operands but different attributes (or operands) are not merged."""
    m, fn, b = new_function()
    sq = b.placeholder("sq", (3, 3))
    other = b.placeholder("other", (3, 3))
    b.save(b.Transpose(sq, shuffle=(1, 0)), "t1")
    b.save(b.Transpose(sq, shuffle=(0, 1)), "t2")
    b.save(b.Add(b.splat(1.0, sq), sq), "a1")
    b.save(b.Add(b.splat(2.0, sq), sq), "a2")
    b.save(b.Exp(sq), "e1")
    b.save(b.Exp(other), "e2")
    b.save(b.Sub(sq, other), "s1")
    b.save(b.Sub(other, sq), "s2")
    kinds = kinds_of(fn)
    assert _run_pass(m, "cse", "cse-attrs") is False
    assert kinds_of(fn) == kinds


def test_cse_keeps_signed_zero_splats_apart() -> None:
    """Splat(0.0) and Splat(-0.0) differ (x / them gives +inf vs -inf), so CSE must keep both."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    b.save(b.Div(x, b.splat(0.0, x)), "pos")
    b.save(b.Div(x, b.splat(-0.0, x)), "neg")
    feeds = {"x": np.abs(seeded_rng("signed-zero").standard_normal(3)).astype(np.float32) + 0.5}
    with np.errstate(divide="ignore"):
        before = evaluate(m, feeds)
        GRAPH_PASSES["cse"](fn)
        after = evaluate(m, feeds)
    assert np.all(before["neg"] == -np.inf)
    np.testing.assert_array_equal(after["neg"], before["neg"])


# ---- eliminate-noops ----------------------------------------------------------------


def test_eliminate_noops() -> None:
    """Same-shape Reshape/Broadcast, identity Transpose, full Slice, zero Pad, same-kind Convert
    and one-input Concat vanish; their non-trivial versions stay."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3, 3))
    y = b.Reshape(x, shape=(3, 3))
    y = b.Broadcast(y, shape=(3, 3))
    y = b.Transpose(y, shuffle=(0, 1))
    y = b.Slice(y, starts=(0, 0), ends=(3, 3))
    y = b.Pad(y, pads=(0, 0, 0, 0))
    y = b.Convert(y, elem="float32")
    y = b.Concat(y, axis=0)
    b.save(y, "noops")
    kept = b.Transpose(x, shuffle=(1, 0))  # same type, but not the identity
    kept = b.Slice(kept, starts=(1, 0), ends=(3, 3))
    kept = b.Pad(kept, pads=(1, 0, 0, 0))
    kept = b.Reshape(kept, shape=(9,))
    kept = b.Concat(kept, kept, axis=0)
    b.save(kept, "real")
    assert _run_pass(m, "eliminate-noops", "noops") is True
    assert kinds_of(fn) == Counter(
        {"Transpose": 1, "Slice": 1, "Pad": 1, "Reshape": 1, "Concat": 1, "Save": 2}
    )
    noops_save = next(s for s in fn.saves if s.inputs[1].name == "noops")
    assert noops_save.inputs[0] is x
    assert GRAPH_PASSES["eliminate-noops"](fn) is False


def test_eliminate_noops_keeps_reversing_slice() -> None:
    """Slice(x, 4:-1:-1) has x's type but reverses it: removing it changes the result."""
    m, _fn, b = new_function()
    x = b.placeholder("x", (5,))
    b.save(b.Slice(x, starts=(4,), ends=(-1,), steps=(-1,)), "y")
    _run_pass(m, "eliminate-noops", "reverse-slice")


# ---- forward-concat-slices -----------------------------------------------------------


def test_forward_concat_slices() -> None:
    """A unit-step Slice reading exactly one Concat operand reads that operand; slices across
    operands, of part of one, or strided stay; the Concat dies once nobody reads it."""
    m, fn, b = new_function()
    parts = [b.placeholder(f"p{i}", (n, 2, 3)) for i, n in enumerate((4, 1, 1))]
    packed = b.Concat(*parts, axis=0)
    middle = b.Slice(packed, starts=(4, 0, 0), ends=(5, 2, 3))
    last = b.Slice(packed, starts=(5, 0, 0), ends=(6, 2, 3))
    b.save(b.Add(middle, last), "states")
    b.save(b.Slice(packed, starts=(0, 0, 0), ends=(4, 2, 3)), "steps")
    assert _run_pass(m, "forward-concat-slices", "concat-slices", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Add": 1, "Save": 2})
    add = next(iter(fn.nodes_of("Add")))
    assert add.inputs == (parts[1], parts[2])

    m, fn, b = new_function()
    x, y = b.placeholder("x", (2, 4)), b.placeholder("y", (2, 4))
    packed = b.Concat(x, y, axis=1)
    b.save(b.Slice(packed, starts=(0, 2), ends=(2, 6)), "across")
    b.save(b.Slice(packed, starts=(0, 0), ends=(1, 4)), "part")
    b.save(b.Slice(packed, starts=(0, 0), ends=(2, 4), steps=(1, 2)), "strided")
    assert _run_pass(m, "forward-concat-slices", "concat-slices-kept") is False
    assert kinds_of(fn)["Slice"] == 3


# ---- merge-reshapes -----------------------------------------------------------------


def test_merge_reshapes() -> None:
    """Reshape(Reshape(x)) reads x directly; the inner one dies; a round trip vanishes entirely."""
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 3, 4))
    outer = b.Reshape(b.Reshape(b.Reshape(x, shape=(6, 4)), shape=(4, 6)), shape=(24,))
    b.save(outer, "flat")
    round_trip = b.Reshape(b.Reshape(x, shape=(4, 6)), shape=(2, 3, 4))
    b.save(b.Exp(round_trip), "e")
    assert kinds_of(fn)["Reshape"] == 5
    assert _run_pass(m, "merge-reshapes", "merge", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Reshape": 2, "Exp": 1, "Save": 2})
    assert all(n.inputs[0] is x for n in fn.nodes_of("Reshape"))
    assert _run_pass(m, "eliminate-noops", "merge-2", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Reshape": 1, "Exp": 1, "Save": 2})
    assert next(fn.nodes_of("Reshape")).shape == (24,)


# ---- fold-transpose-pairs -----------------------------------------------------------


def test_fold_transpose_pairs() -> None:
    """Transpose(Transpose(x, p), q) becomes one Transpose(x, p∘q)."""
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 3, 4))
    inner = b.Transpose(x, shuffle=(1, 2, 0))
    b.save(b.Transpose(inner, shuffle=(1, 0, 2)), "y")
    assert _run_pass(m, "fold-transpose-pairs", "transpose", then=("dce",)) is True
    (t,) = fn.nodes_of("Transpose")
    assert t.inputs[0] is x
    assert t.shuffle == (2, 1, 0)
    assert t.type == Type((4, 3, 2))
    assert kinds_of(fn) == Counter({"Transpose": 1, "Save": 1})


def test_fold_transpose_chain_of_three() -> None:
    """Three transposes fold into one (possibly over two runs)."""
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 3, 4, 5))
    y = b.Transpose(
        b.Transpose(b.Transpose(x, shuffle=(0, 2, 3, 1)), shuffle=(3, 1, 0, 2)), shuffle=(1, 0, 3, 2)
    )
    b.save(y, "y")
    _run_pass(m, "fold-transpose-pairs", "three", then=("fold-transpose-pairs", "dce"))
    (t,) = fn.nodes_of("Transpose")
    assert t.inputs[0] is x
    expected = np.transpose(
        np.transpose(np.transpose(np.empty((2, 3, 4, 5)), (0, 2, 3, 1)), (3, 1, 0, 2)), (1, 0, 3, 2)
    )
    assert t.type.shape == expected.shape


def test_transpose_pair_becoming_identity_vanishes() -> None:
    """A pair that composes to the identity leaves an identity Transpose, which eliminate-noops removes."""
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 3, 4))
    y = b.Transpose(b.Transpose(x, shuffle=(1, 2, 0)), shuffle=(2, 0, 1))
    b.save(b.Tanh(y), "y")
    assert _run_pass(m, "fold-transpose-pairs", "identity", then=("dce",)) is True
    (t,) = fn.nodes_of("Transpose")
    assert t.shuffle == (0, 1, 2)
    assert _run_pass(m, "eliminate-noops", "identity-2", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Tanh": 1, "Save": 1})
    assert next(fn.nodes_of("Tanh")).inputs[0] is x


# ---- simplify-arithmetic ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "neutral", "side"),
    [("Mul", 1.0, 1), ("Mul", 1.0, 0), ("Add", 0.0, 1), ("Add", 0.0, 0), ("Sub", 0.0, 1), ("Div", 1.0, 1)],
    ids=["x*1", "1*x", "x+0", "0+x", "x-0", "x/1"],
)
def test_simplify_arithmetic_removes_identities(kind: str, neutral: float, side: int) -> None:
    """x*1, 1*x, x+0, 0+x, x-0 and x/1 (with a splatted neutral) become x."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3, 4))
    e = b.Exp(x)
    s = b.splat(neutral, e)
    operands = (e, s) if side == 1 else (s, e)
    b.save(b.create(kind, *operands), "y")
    assert _run_pass(m, "simplify-arithmetic", f"simplify-{kind}-{side}", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Exp": 1, "Save": 1})
    assert fn.saves[0].inputs[0] is e


@pytest.mark.parametrize(
    ("kind", "value", "side"),
    [("Sub", 0.0, 0), ("Div", 1.0, 0), ("Mul", 0.0, 1), ("Add", 1.0, 1), ("Mul", 2.0, 0)],
    ids=["0-x", "1/x", "x*0", "x+1", "2*x"],
)
def test_simplify_arithmetic_keeps_non_identities(kind: str, value: float, side: int) -> None:
    """0-x and 1/x (neutral on the wrong side) and non-neutral constants are left alone."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3, 4))
    s = b.splat(value, x)
    operands = (x, s) if side == 1 else (s, x)
    b.save(b.create(kind, *operands), "y")
    kinds = kinds_of(fn)
    assert _run_pass(m, "simplify-arithmetic", f"keep-{kind}-{side}") is False
    assert kinds_of(fn) == kinds


# ---- fold-constants -----------------------------------------------------------------


def test_fold_constants_folds_a_chain() -> None:
    """(c1 + c2) * 2 -> Exp -> Reshape on constants becomes one Constant feeding Add(x, .)."""
    rng = seeded_rng("fold-chain")
    m, fn, b = new_function()
    x = b.placeholder("x", (6,))
    c1 = b.constant(rng.standard_normal((2, 3)), name="c1")
    c2 = b.constant(rng.standard_normal((2, 3)), name="c2")
    chain = b.Reshape(b.Exp(b.Mul(b.Add(c1, c2), b.splat(0.5, c1))), shape=(6,))
    b.save(b.Add(x, chain), "y")
    assert kinds_of(fn) == Counter({"Add": 2, "Mul": 1, "Splat": 1, "Exp": 1, "Reshape": 1, "Save": 1})
    assert _run_pass(m, "fold-constants", "fold-chain", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Add": 1, "Save": 1})
    add = next(fn.nodes_of("Add"))
    folded = add.inputs[1]
    assert folded.kind == "Constant" and folded.type == Type((6,))
    expected = np.exp((c1.value.astype(np.float64) + c2.value) * 0.5).reshape(6)
    np.testing.assert_allclose(folded.value, expected, rtol=1e-6)
    assert set(m.constants) == {folded.name}, "the sources were dropped by dce"


def test_fold_constants_does_not_grow_a_small_constant() -> None:
    """Broadcasting a 4-byte constant into a 4000-byte tensor stays a Broadcast; a tiny one folds."""
    m, fn, b = new_function()
    x = b.placeholder("x", (1000,))
    small = b.constant(np.array([1.5], np.float32), name="small")
    b.save(b.Add(x, b.Broadcast(small, shape=(1000,))), "big")
    y = b.placeholder("y", (4,))
    tiny = b.constant(np.array([2.5], np.float32), name="tiny")
    b.save(b.Mul(y, b.Broadcast(tiny, shape=(4,))), "small")
    assert _run_pass(m, "fold-constants", "fold-growth", then=("dce",)) is True
    (bc,) = fn.nodes_of("Broadcast")
    assert bc.inputs[0] is small and bc.type == Type((1000,))
    mul = next(fn.nodes_of("Mul"))
    assert mul.inputs[1].kind == "Constant" and mul.inputs[1].type == Type((4,))


def test_fold_constants_leaves_runtime_values() -> None:
    """Nodes reading a placeholder are not folded, and integer constants fold exactly."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    i = b.constant(np.array([7, -3, 5], np.int64), name="i")
    j = b.constant(np.array([2, 2, -2], np.int64), name="j")
    b.save(b.Convert(b.Div(i, j), elem="float32"), "q")
    b.save(b.Exp(x), "e")
    assert _run_pass(m, "fold-constants", "fold-int", then=("dce",)) is True
    assert kinds_of(fn) == Counter({"Exp": 1, "Save": 2})
    q = next(s for s in fn.saves if s.inputs[1].name == "q").inputs[0]
    np.testing.assert_array_equal(q.value, np.array([3.0, -1.0, -2.0], np.float32))
    assert q.type.elem is ElemKind.float32

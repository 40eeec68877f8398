"""Scheduling: a valid topological order of every node, never worse in peak live memory than
the naive orders on realistic graphs, strictly better where the order matters."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zoo_modules import zoo_names

from glow_core.graph import Builder, Function, Module, Node
from glow_core.graph.node import is_storage
from glow_core.lowering import lower_function
from glow_core.schedule import peak_live_bytes, result_bytes, schedule

try:
    from glow_core.frontends.onnx import load_onnx
except ImportError:  # the frontend is optional for these tests: builder graphs cover the same shapes
    load_onnx = None  # type: ignore[assignment]


def assert_valid_schedule(fn: Function, order: list[Node]) -> None:
    """Every node of ``fn`` exactly once, each after all of its (non-storage) operands."""
    assert len(order) == len(set(order)) == len(fn)
    assert set(order) == set(fn.nodes)
    position = {n: i for i, n in enumerate(order)}
    for n in order:
        for operand in n.inputs:
            if not is_storage(operand):
                assert position[operand] < position[n], (
                    f"{n.name} scheduled before its operand {operand.name}"
                )


def oracle_peak(order: list[Node]) -> int:
    """Independent peak: at step t, every result already made and still to be read (through
    views) at or after t is live; views and storage own no bytes.

    Each result is live over the steps from its own to its last reader's, so the live bytes
    of every step are one running sum over where those spans start and end (summing the live
    results afresh at each step took minutes on the lowered GRU's 27,000 nodes)."""

    def root(n: Node) -> Node:
        while n.spec.view:
            n = n.inputs[0]
        return n

    position = {n: i for i, n in enumerate(order)}
    last = {n: i for i, n in enumerate(order)}
    for n in order:
        for operand in n.inputs:
            r = root(operand)
            if r in last:
                last[r] = max(last[r], position[n])
    change = [0] * (len(order) + 1)  # change[t]: bytes becoming live at t minus those freed
    for n in order:
        change[position[n]] += result_bytes(n)
        change[last[n] + 1] -= result_bytes(n)
    peak = live = 0
    for delta in change[:-1]:
        live += delta
        peak = max(peak, live)
    return peak


def check_schedule(fn: Function) -> list[Node]:
    """The schedule is valid and no worse than the topological or the insertion order."""
    order = schedule(fn)
    assert_valid_schedule(fn, order)
    topo = fn.topological_order()
    best = peak_live_bytes(order)
    assert best == oracle_peak(order)
    assert best <= peak_live_bytes(topo)
    insertion = fn.nodes
    if _is_topological(insertion):
        assert best <= peak_live_bytes(insertion)
    return order


def _is_topological(order: list[Node]) -> bool:
    seen: set[Node] = set()
    for n in order:
        if any(not is_storage(i) and i not in seen for i in n.inputs):
            return False
        seen.add(n)
    return True


# ---- builder graphs ----------------------------------------------------------------


def _new() -> tuple[Module, Function, Builder]:
    m = Module("m")
    fn = m.create_function("main")
    return m, fn, fn.builder()


def chain() -> Function:
    """x -> Exp -> Tanh -> Reshape -> Relu -> Sqrt(Mul) -> save."""
    _, fn, b = _new()
    x = b.placeholder("x", (8, 16))
    y = b.Tanh(b.Exp(x))
    y = b.Relu(b.Reshape(y, shape=(128,)))
    b.save(b.Sqrt(b.Mul(y, y)), "y")
    return fn


def diamond() -> Function:
    """x -> a; a -> (b, c); b + c -> d."""
    _, fn, b = _new()
    x = b.placeholder("x", (32, 32))
    a = b.Exp(x)
    left = b.Tanh(a)
    right = b.Relu(a)
    b.save(b.Add(left, right), "y")
    return fn


def residual_block() -> Function:
    """Two residual blocks: y = relu(x + f(x)), f a conv-ish chain (MatMul, Add bias, Relu, MatMul)."""
    _, fn, b = _new()
    x = b.placeholder("x", (16, 64))
    w1 = b.constant(np.ones((64, 256), np.float32) * 0.01, name="w1")
    w2 = b.constant(np.ones((256, 64), np.float32) * 0.01, name="w2")
    h = x
    for _ in range(2):
        inner = b.Relu(b.MatMul(h, w1))
        h = b.Relu(b.Add(h, b.MatMul(inner, w2)))
    b.save(h, "y")
    return fn


def huge_and_small_branches(n_small: int = 6) -> Function:
    """Many small results, built first, joined with one huge branch that reduces to a small result."""
    _, fn, b = _new()
    smalls = []
    for i in range(n_small):
        xs = b.placeholder(f"s{i}", (4,))
        smalls.append(b.Exp(b.Tanh(xs)))
    big = b.placeholder("big", (256, 256))
    huge = b.Exp(b.Tanh(big))
    reduced = b.Reshape(b.ReduceSum(huge, axes=(0, 1)), shape=(1,))
    b.save(b.Concat(*smalls, reduced, axis=0), "y")
    return fn


def two_reductions() -> Function:
    """Two big temporaries each reduced to a scalar, built breadth-first in insertion order."""
    _, fn, b = _new()
    x1 = b.placeholder("x1", (1000,))
    x2 = b.placeholder("x2", (1000,))
    e1 = b.Exp(x1)
    e2 = b.Exp(x2)
    r1 = b.ReduceSum(e1, axes=(0,))
    r2 = b.ReduceSum(e2, axes=(0,))
    b.save(b.Add(r1, r2), "y")
    return fn


def dead_and_shared() -> Function:
    """A dead node and a node read by several later ones."""
    _, fn, b = _new()
    x = b.placeholder("x", (10, 10))
    shared = b.Exp(x)
    b.Tanh(shared)  # dead
    outs = [b.Mul(shared, b.Relu(shared)), b.Add(shared, shared)]
    b.save(b.Concat(*outs, axis=1), "y")
    return fn


BUILDER_GRAPHS: dict[str, Callable[[], Function]] = {
    "chain": chain,
    "diamond": diamond,
    "residual": residual_block,
    "huge-and-small": huge_and_small_branches,
    "two-reductions": two_reductions,
    "dead-and-shared": dead_and_shared,
}


@pytest.mark.parametrize("lowered", [False, True], ids=["graph", "lowered"])
@pytest.mark.parametrize("name", list(BUILDER_GRAPHS))
def test_builder_graph_schedules(name: str, lowered: bool) -> None:
    """Builder graphs (high-level and lowered) get a valid schedule no worse than the naive orders."""
    fn = BUILDER_GRAPHS[name]()
    if lowered:
        lower_function(fn)
    check_schedule(fn)


def test_schedule_strictly_better_than_naive() -> None:
    """Exp, Exp, ReduceSum, ReduceSum holds both big temporaries; the schedule finishes one first."""
    fn = two_reductions()
    order = check_schedule(fn)
    naive = fn.nodes
    assert peak_live_bytes(naive) == 4000 + 4000 + 4
    assert peak_live_bytes(fn.topological_order()) == 8004
    assert peak_live_bytes(order) == 4000 + 4 + 4  # the second Exp's result, one sum, the other sum
    kinds = [n.kind for n in order]
    assert kinds == ["Exp", "ReduceSum", "Exp", "ReduceSum", "Add", "Save"]


def test_huge_branch_runs_first() -> None:
    """With many small held results, the huge branch is scheduled before them, strictly lowering the peak."""
    fn = huge_and_small_branches()
    order = check_schedule(fn)
    assert peak_live_bytes(order) < peak_live_bytes(fn.nodes)
    first_exp = next(n for n in order if n.kind == "Exp")
    assert first_exp.inputs[0].inputs[0].name == "big"


def test_peak_live_bytes_small_cases() -> None:
    """Peak counts producer-to-last-reader lifetimes; views keep their source alive and own nothing."""
    _, fn, b = _new()
    x = b.placeholder("x", (10,))  # storage: never counted
    a = b.Exp(x)  # 40 bytes
    v = b.Reshape(a, shape=(2, 5))  # a view: 0 bytes, keeps a live
    c = b.Tanh(x)  # 40 bytes
    d = b.Add(b.Reshape(c, shape=(2, 5)), v)  # 40 bytes
    b.save(d, "y")
    order = fn.nodes
    assert result_bytes(v) == 0 and result_bytes(x) == 0
    assert peak_live_bytes(order) == oracle_peak(order) == 120
    assert peak_live_bytes([]) == 0


# ---- model zoo graphs --------------------------------------------------------------


@pytest.mark.skipif(load_onnx is None, reason="glow_core.frontends.onnx cannot be imported yet")
@pytest.mark.parametrize("lowered", [False, True], ids=["graph", "lowered"])
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_model_schedules(name: str, lowered: bool) -> None:
    """Model-zoo graphs loaded from ONNX get a valid schedule no worse than the naive orders."""
    from zoo_modules import zoo_module

    module = zoo_module(name)
    fn = module.function
    if lowered:
        lower_function(fn)
    check_schedule(fn)


# ---- random DAGs ------------------------------------------------------------------

SHAPES = [(2, 3), (3, 3), (4,), (1, 3)]


@st.composite
def random_dags(draw: st.DrawFn) -> Function:
    """Random DAGs over Add/Mul/Relu/Concat (plus Reshape views), some results saved, some dead."""
    _, fn, b = _new()
    values: list[Node] = [
        b.placeholder(f"in{i}", draw(st.sampled_from(SHAPES))) for i in range(draw(st.integers(1, 3)))
    ]
    ops: list[Node] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["Add", "Mul", "Relu", "Concat", "Reshape"]))
        first = draw(st.sampled_from(values))
        if kind in ("Add", "Mul"):
            partner = draw(st.sampled_from([v for v in values if v.type == first.type]))
            node = b.create(kind, first, partner)
        elif kind == "Relu":
            node = b.Relu(first)
        elif kind == "Reshape":
            node = b.Reshape(first, shape=(first.type.size,))
        else:
            same_tail = [v for v in values if v.type.shape[1:] == first.type.shape[1:]]
            others = draw(st.lists(st.sampled_from(same_tail), max_size=3))
            node = b.Concat(first, *others, axis=0)
        values.append(node)
        ops.append(node)
    saved = draw(st.lists(st.sampled_from(ops), min_size=1, max_size=4, unique=True))
    for i, n in enumerate(saved):
        b.save(n, f"out{i}")
    return fn


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_random_dags_get_valid_schedules(fn: Function) -> None:
    """Whatever the DAG (shared operands, dead nodes, views), the schedule is a valid topological order."""
    order = schedule(fn)
    assert_valid_schedule(fn, order)
    assert peak_live_bytes(order) == oracle_peak(order)
    topo = fn.topological_order()
    assert_valid_schedule(fn, topo)
    assert peak_live_bytes(topo) == oracle_peak(topo)


def shared_across_saves() -> Function:
    """add3 is saved and also read by an earlier-saved node, so it is live across another output's subtree."""
    _, fn, b = _new()
    x = b.placeholder("x", (2, 3))
    concat = b.Concat(x, x, axis=0)  # 48 bytes
    add1 = b.Add(concat, concat)  # 48 bytes
    add3 = b.Add(x, x)  # 24 bytes
    add5 = b.Add(add3, x)  # 24 bytes
    b.save(add5, "out0")
    b.save(add1, "out1")
    b.save(add3, "out2")
    return fn


def test_schedule_never_worse_than_topological_with_shared_outputs() -> None:
    """A value read by two Saves' subtrees must not make the schedule worse than the topological order."""
    fn = shared_across_saves()
    order = schedule(fn)
    assert_valid_schedule(fn, order)
    assert peak_live_bytes(fn.topological_order()) == 96
    assert peak_live_bytes(order) <= 96


def reference_schedule(fn: Function) -> list[Node]:
    """The scheduling rule written plainly, every fact recomputed where it is read: the
    scheduler works each node's operands and sizes out once, and must give this same order."""

    def operands(n: Node) -> list[Node]:
        return [i for i in n.dependencies if not is_storage(i)]

    topo = fn.topological_order()
    need: dict[Node, int] = {}
    for n in topo:
        held = peak = 0
        for i in sorted(operands(n), key=lambda i: need[i], reverse=True):
            peak = max(peak, held + need[i])
            held += result_bytes(i)
        need[n] = max(peak, held + result_bytes(n))
    walk: list[Node] = []
    done: set[Node] = set()
    for root in [n for n in topo if not n.users]:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if n in done:
                continue
            if expanded:
                done.add(n)
                walk.append(n)
                continue
            stack.append((n, True))
            stack.extend(
                (i, False) for i in sorted((i for i in operands(n) if i not in done), key=lambda i: need[i])
            )
    return walk if oracle_peak(walk) <= oracle_peak(topo) else topo


@settings(max_examples=80, deadline=None)
@given(random_dags())
def test_schedule_matches_the_plain_rule(fn: Function) -> None:
    """The memoized scheduler picks exactly the order of the rule recomputed per read."""
    assert schedule(fn) == reference_schedule(fn)


@pytest.mark.skipif(load_onnx is None, reason="glow_core.frontends.onnx cannot be imported yet")
def test_schedule_matches_the_plain_rule_on_a_lowered_recurrence() -> None:
    """The same on a lowered recurrence: chains of views, shared gate inputs, many nodes."""
    from zoo_modules import zoo_module

    fn = zoo_module("gru_text").function
    lower_function(fn)
    assert schedule(fn) == reference_schedule(fn)

"""Memory planning: three regions, no two live buffers overlap, and the plan is tight."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glow_core.errors import VerifyError
from glow_core.graph import Module
from glow_core.ir import check_plan, generate_ir, optimize_ir, plan_memory
from glow_core.ir.memory import ALIGNMENT, Interval, MemoryPlan
from glow_core.lowering import lower_function
from glow_core.schedule import schedule


def _random_graph(draw_ops: list[tuple[int, int, int]]) -> Module:
    """A DAG of element-wise ops over earlier values; sizes vary so placement matters."""
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    values = [b.placeholder("x", (64,))]
    for kind, a, size in draw_ops:
        lhs = values[a % len(values)]
        if kind == 0:
            v = b.Exp(lhs)
        elif kind == 1:
            v = b.Add(lhs, values[(a * 7 + 3) % len(values)])
        else:
            v = b.Tanh(b.Broadcast(b.Reshape(b.ReduceSum(lhs, axes=(0,)), shape=(1,)), shape=(64 * size,)))
            v = b.Slice(v, starts=(0,), ends=(64,))
        values.append(v)
    b.save(values[-1], "y")
    b.save(values[len(values) // 2], "z")
    return m


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(1, 9)), min_size=1, max_size=25))
def test_no_two_live_buffers_overlap(ops):
    m = _random_graph(ops)
    fn = m.function
    lower_function(fn)
    ir = generate_ir(fn, schedule(fn))
    optimize_ir(ir)
    plan = plan_memory(ir)
    check_plan(plan)
    assert plan.peak_live_bytes <= plan.arena_bytes <= plan.activation_bytes_total
    for iv in plan.activations.values():
        assert iv.offset % ALIGNMENT == 0


def test_check_plan_rejects_overlap():
    plan = MemoryPlan(activations={"a": Interval("a", 0, 128, 0, 5), "b": Interval("b", 64, 128, 3, 9)})
    with pytest.raises(VerifyError, match="overlap"):
        check_plan(plan)


def test_regions_hold_every_weight(rng):
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (3, 5))
    w = b.constant(rng.standard_normal((5, 7)).astype(np.float32), "w")
    b.save(b.MatMul(x, w), "y")
    ir = generate_ir(fn, schedule(fn))
    optimize_ir(ir)
    plan = plan_memory(ir)
    assert set(plan.constant_offsets) == {"w"}
    assert set(plan.placeholder_offsets) == {"x", "y"}
    assert plan.constant_bytes >= 5 * 7 * 4
    assert plan.arena_bytes == 0  # the MatMul writes the output placeholder directly


def test_sequential_chain_reuses_memory():
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    v = b.placeholder("x", (256,))
    for _ in range(10):
        v = b.Exp(b.Tanh(v))
    b.save(v, "y")
    ir = generate_ir(fn, schedule(fn))
    unoptimized = plan_memory(ir)
    assert unoptimized.arena_bytes <= 2 * 1024  # two 1 KiB buffers ping-pong
    optimize_ir(ir)
    plan = plan_memory(ir)
    assert plan.arena_bytes <= 1024 and plan.activation_bytes_total <= 1024

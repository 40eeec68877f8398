"""Predication: a node's bool predicate travels through every stage and gates its instructions."""

from __future__ import annotations

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend

import glow_core
from glow_core.errors import ShapeError, VerifyError
from glow_core.graph import Builder, Module
from glow_core.graph.node import PREDICATE
from glow_core.graph.printer import function_to_dot, function_to_text
from glow_core.graph.verifier import verify
from glow_core.ir import generate_ir, optimize_ir, verify_ir
from glow_core.ir.instructions import Role
from glow_core.ir.printer import ir_to_text
from glow_core.lowering import lower_function
from glow_core.passes.graph_passes import eliminate_common_subexpressions, eliminate_dead_code
from glow_core.schedule import schedule
from glow_core.types import ElemKind

SHAPE = (4, 6)


def _predicated_module() -> Module:
    """y = relu(x * 2) computed and saved only when p; z = x + 1 always."""
    m = Module("pred")
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", SHAPE)
    p = b.placeholder("p", (1,), ElemKind.bool)
    when = Builder(fn, predicate=p)
    when.save(when.relu(when.mul(x, 2.0)), "y")
    b.save(b.add(x, 1.0), "z")
    return m


def test_a_predicate_is_a_use_that_replace_all_uses_and_erase_keep_right():
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", SHAPE)
    flag = b.Compare(b.splat(0.0, x), x, predicate="lt")
    first = b.Reshape(b.Slice(flag, starts=(0, 0), ends=(1, 1)), shape=(1,))
    y = Builder(fn, predicate=first).Exp(x)
    b.save(y, "y")
    assert (y, PREDICATE) in first.users
    other = b.Reshape(b.Slice(flag, starts=(1, 1), ends=(2, 2)), shape=(1,))
    fn.replace_all_uses(first, other)
    assert y.predicate is other and not first.users
    verify(fn)
    assert eliminate_dead_code(fn)  # the old predicate chain is dead, the new one is kept
    assert other in fn and first not in fn


def test_the_predicate_must_be_one_bool_element():
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", SHAPE)
    with pytest.raises(ShapeError, match="one bool element"):
        Builder(fn, predicate=x).Exp(x)


def test_verifier_reports_a_predicate_missing_from_the_use_list():
    m = _predicated_module()
    fn = m.function
    node = next(n for n in fn.nodes if n.predicate is not None and n.kind != "Save")
    node.predicate.users.remove((node, PREDICATE))
    with pytest.raises(VerifyError, match=r"misses .* predicate"):
        verify(fn)


def test_cse_does_not_merge_nodes_with_different_predicates():
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", SHAPE)
    p = b.placeholder("p", (1,), ElemKind.bool)
    gated, plain = Builder(fn, predicate=p).Exp(x), b.Exp(x)
    b.save(b.add(gated, plain), "y")
    assert not eliminate_common_subexpressions(fn)
    twin = Builder(fn, predicate=p).Exp(x)
    b.save(twin, "w")
    assert eliminate_common_subexpressions(fn)
    assert twin not in fn and gated in fn


def test_lowering_predicates_every_node_it_builds_and_the_dumps_show_it():
    m = _predicated_module()
    fn = m.function
    lower_function(fn)
    p = m.placeholders["p"]
    gated = [n for n in fn.nodes if n.predicate is p]
    assert {n.kind for n in gated} >= {"Mul", "Max", "Save"}
    assert all(n.predicate is None for n in fn.nodes if n.kind == "Add")
    assert "if %p" in function_to_text(fn)
    assert 'label="if"' in function_to_dot(fn)


def test_irgen_gives_predicated_instructions_a_pred_operand_and_copies_stay():
    m = _predicated_module()
    fn = m.function
    lower_function(fn)
    ir = generate_ir(fn, schedule(fn))
    optimize_ir(ir)
    verify_ir(ir)
    gated = [i for i in ir.instrs if i.predicate is not None]
    assert {i.kind for i in gated} >= {"Mul", "Max", "Copy"}
    for instr in gated:
        assert instr.operands[-1][1] is Role.PRED and instr.predicate not in instr.sources
    # The predicated Save's copy survives copy elimination: its producer would write the
    # output even with the predicate false. The unpredicated one is eliminated.
    copies = [i for i in ir.instrs if i.kind == "Copy"]
    assert [c.dest.name for c in copies] == ["y"]
    assert "@pred %p" in ir_to_text(ir)


def test_a_computed_predicate_is_scheduled_before_and_live_until_its_reader():
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", SHAPE)
    flag = b.Compare(b.splat(0.0, b.ReduceSum(x, axes=(0, 1))), b.ReduceSum(x, axes=(0, 1)), predicate="lt")
    when = Builder(fn, predicate=flag)
    when.save(when.Exp(when.Exp(x)), "y")
    order = schedule(fn)
    assert order.index(flag) < min(order.index(n) for n in fn.nodes if n.predicate is flag)
    ir = generate_ir(fn, order)
    optimize_ir(ir)
    verify_ir(ir)  # a dealloc of the flag's buffer before its last @pred reader would fail here


@pytest.mark.parametrize("on", [True, False])
def test_the_interpreter_skips_predicated_off_instructions(on, rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    compiled = glow_core.compile(_predicated_module(), backend=InterpreterBackend())
    out = compiled.run({"x": x, "p": np.array([on])})
    np.testing.assert_allclose(out["z"], x.astype(np.float64) + 1.0, rtol=1e-6)
    if on:
        np.testing.assert_allclose(out["y"], np.maximum(x.astype(np.float64) * 2.0, 0.0), rtol=1e-6)
    else:
        assert (out["y"].view(np.uint8) == 0xFF).all()  # nothing wrote it: still poison

"""The interpreter runs on arenas at the planned offsets: a wrong plan gives wrong answers."""

from __future__ import annotations

import numpy as np
from glow_interpreter.backend import InterpreterBackend, InterpreterOptions
from glow_interpreter.executor import InterpretedFunction

from glow_core.graph import Module
from glow_core.ir import generate_ir, optimize_ir, plan_memory
from glow_core.ir.memory import Interval
from glow_core.lowering import lower_function
from glow_core.lowering.evaluate import evaluate
from glow_core.schedule import schedule


def _two_branch_module() -> Module:
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (4, 16))
    left = b.Exp(b.Tanh(x))
    right = b.Sqrt(b.Exp(x))
    b.save(b.Add(left, right), "y")
    return m


def _planned_ir(m: Module):
    fn = m.function
    lower_function(fn)
    ir = generate_ir(fn, schedule(fn))
    optimize_ir(ir)
    ir.memory_plan = plan_memory(ir)
    return ir


def test_correct_plan_matches_the_graph(rng):
    m = _two_branch_module()
    x = rng.standard_normal((4, 16)).astype(np.float32)
    got = InterpretedFunction(_planned_ir(m)).run({"x": x})["y"]
    np.testing.assert_allclose(got, evaluate(m, {"x": x})["y"], rtol=1e-6)


def test_overlapping_plan_gives_wrong_answers(rng):
    m = _two_branch_module()
    ir = _planned_ir(m)
    plan = ir.memory_plan
    # Put every buffer at offset 0: two live buffers now share bytes.
    plan.activations = {k: Interval(v.name, 0, v.size, v.start, v.end) for k, v in plan.activations.items()}
    assert len(plan.activations) >= 2
    x = rng.standard_normal((4, 16)).astype(np.float32)
    got = InterpretedFunction(ir).run({"x": x})["y"]
    assert not np.allclose(got, evaluate(m, {"x": x})["y"], rtol=1e-3)


def test_outputs_are_poisoned_before_a_run(rng):
    m = _two_branch_module()
    ir = _planned_ir(m)
    # Drop the instruction that writes the output: the poison must show.
    writer = next(i for i in ir.compute_instrs() if i.dest is ir.outputs[0])
    ir.instrs.remove(writer)
    got = InterpretedFunction(ir).run({"x": rng.standard_normal((4, 16)).astype(np.float32)})["y"]
    assert np.isnan(got).all()


def test_declares_every_primitive():
    from glow_core.spec import PRIMITIVES

    info = InterpreterBackend().info()
    assert set(info.supports) == set(PRIMITIVES)
    assert info.supports["MatMul"] == ["bfloat16", "float16", "float32", "float64"]
    assert InterpreterOptions().poison

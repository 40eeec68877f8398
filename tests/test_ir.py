"""IRGen, the IR passes (each shows what it removed), the IR verifier and the printer."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import VerifyError
from glow_core.graph import Module
from glow_core.ir import generate_ir, optimize_ir, plan_memory, verify_ir
from glow_core.ir.instructions import AllocActivation, DeallocActivation, Role, TensorView
from glow_core.ir.ir_passes import (
    eliminate_copies,
    eliminate_dead_stores,
    hoist_deallocs,
    share_buffers,
    sink_allocs,
)
from glow_core.ir.printer import ir_to_dot, ir_to_text
from glow_core.lowering import lower_function
from glow_core.lowering.evaluate import evaluate
from glow_core.schedule import schedule


def _mlp_module(rng: np.random.Generator) -> Module:
    m = Module("mlp")
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (2, 8))
    h = b.relu(
        b.fully_connected(x, b.constant(rng.standard_normal((8, 16))), b.constant(rng.standard_normal(16)))
    )
    y = b.fully_connected(h, b.constant(rng.standard_normal((16, 4))), b.constant(rng.standard_normal(4)))
    b.save(b.reshape(y, (8,)), "y")
    return m


def _ir(m: Module):
    fn = m.function
    lower_function(fn)
    return generate_ir(fn, schedule(fn))


def _kinds(ir) -> list[str]:
    return [i.kind for i in ir.instrs]


def test_irgen_makes_one_instruction_per_primitive_and_views_for_reshape(rng):
    ir = _ir(_mlp_module(rng))
    verify_ir(ir)
    assert _kinds(ir).count("MatMul") == 2
    assert _kinds(ir).count("Copy") == 1  # the Save
    views = [i for i in ir.instrs if isinstance(i, TensorView)]
    assert len(views) >= 1 and all(v.type.size == v.source.type.size for v in views)
    allocs = [i for i in ir.instrs if isinstance(i, AllocActivation)]
    deallocs = [i for i in ir.instrs if isinstance(i, DeallocActivation)]
    assert {d.alloc for d in deallocs} == set(allocs)
    for instr in ir.compute_instrs():
        if instr.spec is not None:
            assert instr.operands[0][1] is Role.OUT
            assert all(r is Role.IN for _, r in instr.operands[1:])


def test_eliminate_copies_writes_the_output_directly_even_through_a_view(rng):
    ir = _ir(_mlp_module(rng))
    assert eliminate_copies(ir)
    assert "Copy" not in _kinds(ir)
    out = ir.outputs[0]
    writer = [i for i in ir.compute_instrs() if i.dest.root is out]
    assert [w.kind for w in writer] == ["Add"]
    verify_ir(ir)


def test_share_buffers_reuses_a_dying_operand_for_elementwise_results(rng):
    ir = _ir(_mlp_module(rng))
    before = len(ir.allocs)
    assert share_buffers(ir)
    assert len(ir.allocs) < before
    shared = [i for i in ir.compute_instrs() if i.spec is not None and i.dest in i.sources]
    assert shared and all(i.spec.inplace for i in shared)
    verify_ir(ir)


def _shared_by_whole_use_lists(ir) -> list[tuple[str, str]]:
    """(dest, buffer it reuses) as share-buffers decides it with every use position kept
    (the quadratic form of the rule: an oracle for the pass that keeps first and last only)."""
    uses: dict = {}
    for index, instr in enumerate(ir.instrs):
        if not isinstance(instr, AllocActivation | DeallocActivation):
            for value, _ in instr.operands:
                uses.setdefault(value.root, []).append(index)
    alias: dict = {}
    merged = []
    for index, instr in enumerate(ir.instrs):
        if instr.spec is None or not instr.spec.inplace:
            continue
        dest = instr.dest
        if not isinstance(dest, AllocActivation) or min(uses[dest]) != index:
            continue
        for name in instr.spec.inplace:
            operand = instr.operands[1 + instr.spec.operands.index(name)][0]
            while id(operand) in alias:
                operand = alias[id(operand)]
            if (
                isinstance(operand, AllocActivation)
                and operand.type == dest.type
                and max(uses[operand]) == index
            ):
                alias[id(dest)] = operand
                uses[operand] = uses[operand] + uses.pop(dest)
                merged.append((dest.name, operand.name))
                break
    return merged


def test_share_buffers_on_a_long_inplace_chain_matches_the_whole_use_lists():
    """A chain of 200 element-wise ops merges into one buffer: the linear pass (first and last
    use per buffer) makes exactly the merges the rule makes with every use position."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (64,))
    y = x
    for i in range(200):
        y = b.Tanh(y) if i % 2 else b.Add(y, b.Exp(x))
    b.save(y, "y")
    ir = generate_ir(m.function, schedule(m.function))
    expected = _shared_by_whole_use_lists(ir)
    names = {i.name: i for i in ir.allocs}
    assert share_buffers(ir)
    survivors = {a.name for a in ir.allocs}
    assert len(expected) > 150
    assert all(dest not in survivors for dest, _ in expected)
    assert set(names) - survivors == {dest for dest, _ in expected}
    verify_ir(ir)


def test_dead_store_elimination_removes_unread_results(rng):
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (4,))
    b.Exp(x)  # computed, never read: DCE would remove it, here we test the IR pass alone
    b.save(b.Tanh(x), "y")
    ir = generate_ir(fn, schedule(fn))
    assert "Exp" in _kinds(ir)
    assert eliminate_dead_stores(ir)
    assert "Exp" not in _kinds(ir) and "Tanh" in _kinds(ir)
    assert not eliminate_dead_stores(ir)
    verify_ir(ir)


def test_sink_allocs_and_hoist_deallocs_tighten_lifetimes(rng):
    ir = _ir(_mlp_module(rng))
    allocs = ir.allocs
    # Spoil the placement: all allocs first, all deallocs last.
    deallocs = [i for i in ir.instrs if isinstance(i, DeallocActivation)]
    body = [i for i in ir.instrs if i not in allocs and i not in deallocs]
    ir.instrs = allocs + body + deallocs
    spoiled = plan_memory(ir).peak_live_bytes
    assert sink_allocs(ir) and hoist_deallocs(ir)
    verify_ir(ir)
    assert plan_memory(ir).peak_live_bytes < spoiled


def test_optimized_ir_computes_the_same_as_the_graph(rng, registry):
    import glow_core

    m = _mlp_module(rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    expected = evaluate(m, {"x": x})["y"]
    got = glow_core.compile(m, backend="interpreter", verify_each=True).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_verifier_catches_use_after_dealloc(rng):
    ir = _ir(_mlp_module(rng))
    optimize_ir(ir)
    first_dealloc = next(i for i in ir.instrs if isinstance(i, DeallocActivation))
    ir.instrs.remove(first_dealloc)
    ir.instrs.insert(ir.instrs.index(first_dealloc.alloc) + 1, first_dealloc)
    with pytest.raises(VerifyError, match="after its dealloc"):
        verify_ir(ir)


def test_text_and_dot_dumps(rng):
    ir = _ir(_mlp_module(rng))
    text = ir_to_text(ir)
    assert "declare {" in text and "code {" in text and "= constant : f32<" in text
    assert any(line.split()[1:2] == ["MatMul"] and " @out %" in line for line in text.splitlines())
    dot = ir_to_dot(ir)
    assert dot.startswith("digraph") and "@out" in dot


def test_peepholes_collapse_view_chains_and_drop_self_copies():
    from glow_core.ir.instructions import make_copy
    from glow_core.ir.ir_passes import apply_peepholes

    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (2, 3, 4))
    flat = b.Reshape(b.Exp(x), shape=(24,))
    b.save(b.Tanh(b.Reshape(flat, shape=(6, 4))), "y")  # merge-reshapes is not run: two views
    ir = generate_ir(fn, schedule(fn))
    views = [i for i in ir.instrs if isinstance(i, TensorView)]
    assert any(isinstance(v.source, TensorView) for v in views)
    exp_buffer = next(i for i in ir.instrs if isinstance(i, AllocActivation))
    ir.instrs.insert(ir.instrs.index(exp_buffer) + 2, make_copy("self", exp_buffer, exp_buffer))
    assert apply_peepholes(ir)
    assert not any(isinstance(v.source, TensorView) for v in ir.instrs if isinstance(v, TensorView))
    assert "Copy" not in [i.kind for i in ir.instrs if i.name == "self"]
    verify_ir(ir)
    assert not apply_peepholes(ir)


def _all_uses(ir) -> dict:
    """Every position that touches each root buffer (allocs and deallocs excluded): the
    plain rule the passes' first/last-use tables must agree with."""
    uses: dict = {}
    for index, instr in enumerate(ir.instrs):
        if not isinstance(instr, AllocActivation | DeallocActivation):
            for value, _ in instr.operands:
                uses.setdefault(value.root, []).append(index)
    return uses


def _deallocs_by_the_plain_rule(ir) -> list[tuple[str, str]]:
    """(kind, name) of every instruction with each dealloc right after its buffer's last use."""
    kept = [i for i in ir.instrs if not isinstance(i, DeallocActivation)]
    uses = _all_uses(type(ir)(ir.name, ir.weights, kept))
    out = []
    for index, instr in enumerate(kept):
        out.append((instr.kind, instr.name))
        for alloc_index, alloc in enumerate(kept):
            if isinstance(alloc, AllocActivation) and max(uses.get(alloc, [alloc_index])) == index:
                out.append(("DeallocActivation", f"dealloc_{alloc.name}"))
    return out


@pytest.mark.parametrize("name", ["small_cnn", "mobilenetv2_block", "transformer_encoder"])
def test_use_tables_and_deallocs_follow_the_plain_rule(name: str) -> None:
    """After every IR pass: first/last uses are the ends of the whole use lists, and each
    dealloc sits right after its buffer's last use, as the plain rule places them."""
    from zoo_modules import zoo_module

    from glow_core.ir.ir_passes import (
        DEFAULT_IR_PIPELINE,
        IR_PASSES,
        _last_uses,
        _use_spans,
        place_deallocs,
    )

    ir = _ir(zoo_module(name))
    for pass_name in ("irgen", *DEFAULT_IR_PIPELINE):
        if pass_name != "irgen":
            IR_PASSES[pass_name](ir)
        uses = _all_uses(ir)
        assert _use_spans(ir) == {v: (min(p), max(p)) for v, p in uses.items()}, pass_name
        assert _last_uses(ir) == {v: max(p) for v, p in uses.items()}, pass_name
        expected = _deallocs_by_the_plain_rule(ir)
        place_deallocs(ir)
        assert [(i.kind, i.name) for i in ir.instrs] == expected, pass_name


def test_irgen_and_ir_passes_pause_the_collector_and_restore_it(rng, monkeypatch) -> None:
    """The collector is off while IRGen and the passes run, and afterwards as it was before:
    back on if it was on, still off if the caller had paused it."""
    import gc

    import glow_core.ir.ir_passes as ir_passes
    import glow_core.ir.irgen as irgen

    seen: list[bool] = []
    original = ir_passes.place_deallocs

    def recording(ir) -> None:
        seen.append(gc.isenabled())
        original(ir)

    monkeypatch.setattr(irgen, "place_deallocs", recording)
    monkeypatch.setattr(ir_passes, "place_deallocs", recording)
    for initially_on in (True, False):
        if not initially_on:
            gc.disable()
        try:
            ir = _ir(_mlp_module(rng))  # IRGen places the deallocs
            optimize_ir(ir, ("share-buffers",))
            ir_passes.ir_step("hoist-deallocs").run(type("C", (), {"ir": ir})())
            assert gc.isenabled() is initially_on
        finally:
            gc.enable()
    assert seen == [False] * 6

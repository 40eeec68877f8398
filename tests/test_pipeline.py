"""The compile pipeline as data: every stage a named, timed, verified, dumpable step.

The old driver called lowering, fuse-activations, the post-lowering hook, IRGen and the IR
passes by hand; ``test_pipeline_compiles_like_the_stages_called_by_hand`` keeps that
sequence as the oracle, so the data pipeline provably compiles the same IR.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend

import glow_core
from glow_core.accuracy import relative_error
from glow_core.cli import main
from glow_core.errors import GlowError, VerifyError
from glow_core.graph.function import Function
from glow_core.ir import generate_ir, optimize_ir, plan_memory
from glow_core.ir.fingerprint import serialize_ir
from glow_core.ir.instructions import IRFunction
from glow_core.lowering import lower_function
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.passes import DEFAULT_GRAPH_PIPELINE, run_pipeline
from glow_core.passes.fuse_activations import fuse_activations
from glow_core.pipeline.data import Group, Level, Pipeline, Step
from glow_core.pipeline.runner import verify_each_default
from glow_core.pipeline.steps import DEFAULT_PIPELINE, describe
from glow_core.runtime.pipeline import compile_stages, load_model
from glow_core.schedule import schedule


class _Extended(InterpreterBackend):
    """An interpreter whose pipeline is edited by the ``pipeline`` hook."""

    def __init__(self, edit):
        super().__init__()
        self.edit = edit

    def pipeline(self, default: Pipeline) -> Pipeline:
        return self.edit(default)


def _module(rng: np.random.Generator):
    return load_model(MODELS["small_cnn"](seed=int(rng.integers(1 << 30))))


def test_verify_each_is_on_in_the_test_suite() -> None:
    """The root conftest switches the default on, so every compile in every test verifies."""
    assert verify_each_default() is True


def test_every_step_is_listed_and_timed(rng) -> None:
    """--list-steps names every leaf; a compile times every leaf and group that ran."""
    listing = describe(DEFAULT_PIPELINE)
    for name in DEFAULT_PIPELINE.names():
        assert name in listing
    stages = compile_stages(_module(rng), InterpreterBackend(), options=InterpreterBackend.Options())
    conditional = [path for path, item, _ in DEFAULT_PIPELINE.walk() if isinstance(item, Group) and item.when]
    ran = {
        path
        for path, _leaf in DEFAULT_PIPELINE.leaves()
        if not any(path.startswith(f"{c}/") for c in conditional)
    }
    assert ran <= set(stages.passes.path_seconds)
    assert {"import", "optimize", "lower", "check-support", "schedule", "irgen"} <= set(stages.seconds)
    assert {"optimize-ir", "plan-memory", "codegen"} <= set(stages.seconds)
    assert stages.compiled is not None and stages.level is Level.CODE


@pytest.mark.parametrize("name", ["small_cnn", "transformer_encoder"])
def test_pipeline_compiles_like_the_stages_called_by_hand(name: str, rng) -> None:
    """The old hand-called sequence, step by step, is the oracle: the IR is identical."""
    module = load_model(MODELS[name](seed=int(rng.integers(1 << 30))))
    backend = InterpreterBackend(keep=("Conv",))
    fn = module.clone().function
    run_pipeline(fn, DEFAULT_GRAPH_PIPELINE)
    fuse_activations(fn, backend.supports_fused_activation)
    lower_function(fn, backend.should_lower)
    run_pipeline(fn, DEFAULT_GRAPH_PIPELINE)
    ir = generate_ir(fn, schedule(fn))
    optimize_ir(ir)
    ir.memory_plan = plan_memory(ir)
    stages = compile_stages(module, backend, stop_before="codegen")
    assert serialize_ir(stages.ir) == serialize_ir(ir)


def test_a_backend_adds_its_own_step(rng) -> None:
    """A step inserted by the hook runs at its place, is timed and counted like the rest."""
    seen: list[Level] = []

    def count_nodes(c) -> bool:
        seen.append(c.level)
        return False

    step = Step("acme-count", count_nodes, Level.GRAPH, doc="Count what the backend receives.")
    backend = _Extended(lambda p: p.insert_after("lower/post-lowering", step))
    proto = MODELS["small_cnn"](seed=int(rng.integers(1 << 30)))
    compiled = glow_core.compile(proto, backend=backend)
    assert seen == [Level.GRAPH]
    stages = compile_stages(load_model(proto), backend)
    assert stages.passes.changes["acme-count"] == 0
    assert "lower/acme-count" in stages.passes.path_seconds
    inputs = random_inputs(proto, seed=int(rng.integers(1 << 30)))
    expected = glow_core.compile(proto, backend=InterpreterBackend()).run(inputs)
    np.testing.assert_array_equal(compiled.run(inputs)["output"], expected["output"])


def test_a_broken_step_is_caught_right_after_it_runs(rng) -> None:
    """verify_each checks the IR after an IR-level step too, naming the instruction."""

    def drop_first_alloc(c) -> bool:
        ir: IRFunction = c.ir
        ir.instrs.remove(ir.allocs[0])
        return True

    broken = Step("drop-an-alloc", drop_first_alloc, Level.IR)
    backend = _Extended(lambda p: p.insert_after("optimize-ir/peepholes", broken))
    with pytest.raises(VerifyError, match="before its alloc"):
        compile_stages(_module(rng), backend, verify_each=True)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.insert_after("irgen", "cse"), "'cse' needs graph but runs on ir"),
        (lambda p: p.without("check-support"), "required step 'check-support' is missing"),
        (lambda p: p.without("lower/lower-nodes"), "required step 'lower-nodes' is missing"),
        (
            lambda p: p.without("check-support").insert_before("lower", "check-support"),
            "'check-support' must run after 'lower-nodes'",
        ),
        (lambda p: p.insert_after("schedule", "no-such-step"), "unknown pipeline step(s) ['no-such-step']"),
        (
            lambda p: p.insert_after("lower", Group("late", "irgen", when="post-lowering")),
            "'late' may run or not",
        ),
    ],
)
def test_orders_that_break_the_contract_are_refused(edit, message: str) -> None:
    """Refused before any step runs: the model file, which does not exist, is never read."""
    with pytest.raises(GlowError, match=re.escape(message)):
        compile_stages("no-such-model.onnx", _Extended(edit))


def test_editing_a_path_that_does_not_exist_names_the_paths() -> None:
    with pytest.raises(GlowError, match=r"matches 0 entries.*lower/optimize-lowered/cse"):
        DEFAULT_PIPELINE.insert_after("lower/cse", "dce")


def test_dump_after_a_path_a_group_or_an_ir_step(rng) -> None:
    """A path picks one run of a pass that runs several times; an IR step dumps parseable IR."""
    module = _module(rng)
    wanted = ("optimize/fuse-activations", "lower/optimize-lowered/cse", "lower", "share-buffers")
    dumps = {w: compile_stages(module, InterpreterBackend(), dump_after=w).passes.dumps[w] for w in wanted}
    assert "Conv " in dumps["optimize/fuse-activations"]
    assert "Convolution " in dumps["lower/optimize-lowered/cse"]
    assert dumps["lower"] == compile_stages(module, InterpreterBackend(), keep_text=True).texts["lowered"]
    assert "code {" in dumps["share-buffers"]
    assert glow_core.parse_ir(dumps["share-buffers"]).instrs
    with pytest.raises(GlowError, match="no step or group 'optimise'"):
        compile_stages(module, InterpreterBackend(), dump_after="optimise")


def test_glow_dump_lists_the_steps_and_dumps_after_one(registry, capsys) -> None:
    assert main(["dump", "--list-steps"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("import ") and "  optimize-lowered\n" in listing and "codegen " in listing
    assert main(["dump", "zoo:small_cnn", "--after", "lower/lower-nodes"]) == 0
    assert "Convolution " in capsys.readouterr().out
    assert main(["dump", "zoo:small_cnn", "--after", "plan-memory"]) == 0
    assert "arena" in capsys.readouterr().out


def test_graph_only_pipelines_run_under_the_same_runner(rng) -> None:
    """run_pipeline refuses an IR pass in a graph pipeline: it is not a graph pass."""
    fn: Function = _module(rng).function
    with pytest.raises(GlowError, match="unknown pipeline step"):
        run_pipeline(fn, Pipeline("dce", "share-buffers"))


@pytest.mark.parametrize(("columns", "collects"), [(4, False), (1 << 20, True)])
def test_codegen_runs_a_full_gc_only_for_weights_worth_it(columns, collects, monkeypatch, rng) -> None:
    """A compile that owns its model drops the graph before codegen; a full gc run then frees the
    graph's weights at once, but costs time in proportion to the whole process, so it runs only
    from ``COLLECT_FROM_BYTES`` of constants. Either way the compiled function is right."""
    import gc

    from graph_helpers import new_function

    from glow_core.pipeline import steps

    runs: list[int] = []
    collect = gc.collect
    monkeypatch.setattr(steps.gc, "collect", lambda *a: runs.append(1) or collect(*a))
    m, _fn, b = new_function()
    x = b.placeholder("x", (2, 4))
    w = b.constant(rng.standard_normal((4, columns)).astype(np.float32), "w")
    b.save(b.matmul(x, w), "y")
    assert (4 * columns * 4 >= steps.COLLECT_FROM_BYTES) is collects
    weights = w.value.copy()
    del w
    feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32)}
    compiled = glow_core.compile(m, backend=InterpreterBackend())
    assert bool(runs) is collects
    got = compiled.run(feeds)["y"]
    assert relative_error(got, feeds["x"].astype(np.float64) @ weights) < 1e-5


# ---- the support check -----------------------------------------------------------------


def _support_function() -> Function:
    """Nodes whose support is read in each way: by the result's kind, by a declared
    operand's (ArgMax), a view (Reshape), one the interpreter lacks in int8 (Erf), a Save."""
    m = glow_core.Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (2, 3), glow_core.ElemKind.int32)
    f = b.Convert(x, elem="float32")
    b.save(b.Erf(b.reshape(f, (3, 2))), "erf")
    b.save(b.ArgMax(f, axis=1), "argmax")
    b.save(b.Erf(b.Convert(x, elem="int8")), "erf_int8")
    return fn


class _CountingInfo(InterpreterBackend):
    """An interpreter that counts how often its info is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def info(self):
        self.asked += 1
        return super().info()


def test_the_support_check_answers_as_is_op_supported_reading_info_once():
    fn = _support_function()
    backend = _CountingInfo()
    supported = backend.support_check()
    assert backend.asked == 1
    answers = [supported(n) for n in fn.nodes]
    assert backend.asked == 1  # not once per node
    assert answers == [backend.is_op_supported(n) for n in fn.nodes]
    assert True in answers and False in answers  # both answers are exercised (Erf[int8])


def test_a_backend_that_overrides_is_op_supported_is_asked_itself():
    class NoErf(InterpreterBackend):
        def is_op_supported(self, node):
            return node.kind != "Erf" and super().is_op_supported(node)

    fn = _support_function()
    supported = NoErf().support_check()
    assert [supported(n) for n in fn.nodes] == [NoErf().is_op_supported(n) for n in fn.nodes]
    assert not any(supported(n) for n in fn.nodes if n.kind == "Erf")


def test_a_fresh_support_check_sees_a_changed_declaration(monkeypatch):
    fn = _support_function()
    backend = InterpreterBackend()
    info = backend.info()
    assert all(backend.support_check()(n) for n in fn.nodes if n.kind == "ArgMax")
    withdrawn = info.model_copy(
        update={"supports": {k: v for k, v in info.supports.items() if k != "ArgMax"}}
    )
    monkeypatch.setattr(backend, "info", lambda: withdrawn)
    assert not any(backend.support_check()(n) for n in fn.nodes if n.kind == "ArgMax")


def test_an_object_acting_as_a_backend_is_asked_through_is_op_supported():
    """A wrapper that overrides ``is_op_supported`` and forwards the rest (not a Backend
    subclass) is asked itself by the compile's support check, not the backend it wraps."""
    from glow_core.pipeline.steps import check_support

    class NoErf:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def is_op_supported(self, node) -> bool:
            return node.kind != "Erf"

    fn = _support_function()
    with pytest.raises(GlowError, match=r"cannot run 2 node\(s\): Erf"):
        check_support(fn, NoErf(InterpreterBackend()))


def test_a_compile_runs_with_the_collector_paused_and_restores_it(monkeypatch) -> None:
    """Every step of a compile runs with the cyclic collector off (the objects it builds all
    stay alive: collections would free nothing), and afterwards it is as it was: back on
    if it was on, still off if the caller had paused it."""
    import gc

    import glow_core.pipeline.steps as steps

    seen: list[bool] = []
    original = steps.lower_function

    def recording(*args, **kwargs) -> bool:
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(steps, "lower_function", recording)
    model = MODELS["mlp"]()
    for initially_on in (True, False):
        if not initially_on:
            gc.disable()
        try:
            glow_core.compile(model, backend="interpreter")
            assert gc.isenabled() is initially_on
        finally:
            gc.enable()
    assert seen == [False, False]

"""The compile steps and the default pipeline: every arrow of the design as a named step.

From the model to the backend's code, in one Pipeline: import, the graph optimizations,
fused activations, lowering, the backend's post-lowering rewrite, the support check,
scheduling, IRGen, the IR optimizations, memory planning and code generation. Graph and IR
passes are steps under their registered names; the steps below are the ones that need the
backend or change the level. A backend extends or reorders the pipeline in
``Backend.pipeline`` (``docs/pipeline.md``); ``resolve_step`` finds any step by name.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx

from glow_core.backend import Backend, selecting_kind
from glow_core.errors import GlowError, UnsupportedOpError
from glow_core.graph.function import Function, Module
from glow_core.ir.ir_passes import DEFAULT_IR_PIPELINE, IR_PASSES, ir_step
from glow_core.ir.irgen import generate_ir
from glow_core.ir.memory import plan_memory
from glow_core.lowering import lower_function
from glow_core.passes import DEFAULT_GRAPH_PIPELINE, GRAPH_PASSES
from glow_core.passes.fuse_activations import fuse_activations
from glow_core.passes.manager import graph_step
from glow_core.pipeline.data import Group, Level, Pipeline, Step, StepFn, doc_line, item_name, register_once
from glow_core.pipeline.runner import Compilation
from glow_core.schedule import schedule

ModelLike = str | os.PathLike | bytes | onnx.ModelProto | Module

COMPILE_STEPS: dict[str, Step] = {}
"""The built-in steps by name (graph and IR passes are found in their own registries)."""


def compile_step(
    name: str,
    needs: Level = Level.GRAPH,
    gives: Level | None = None,
    *,
    required: bool = False,
    after: tuple[str, ...] = (),
) -> Callable[[StepFn], StepFn]:
    """Register the decorated ``(Compilation) -> changed`` function as a compile step."""

    def register(fn: StepFn) -> StepFn:
        step = Step(name, fn, needs, gives, doc=doc_line(fn), required=required, after=tuple(after))
        register_once(COMPILE_STEPS, name, step, "compile step")
        return fn

    return register


def load_model(
    model: ModelLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    base_dir: str | os.PathLike | None = None,
) -> Module:
    """A Module from an ONNX file/bytes/ModelProto (a Module passes through); ``base_dir``
    is where external data files are read from (see ``load_onnx``)."""
    if isinstance(model, Module):
        return model
    from glow_core.frontends.onnx import load_onnx

    return load_onnx(model, input_shapes, base_dir=base_dir)


@compile_step("import", Level.SOURCE, Level.GRAPH, required=True)
def import_model(c: Compilation) -> bool:
    """The model as a graph (a private copy: the compile edits it, the caller's stays).

    A model loaded here is private already: copying it would leave the loaded graph, whose
    nodes are reference cycles, holding every original weight until the next gc run, so
    the weights fold-batchnorm replaces would stay resident beside their folded copies.
    """
    loaded = load_model(c.source, c.input_shapes, base_dir=c.base_dir)
    c.module = loaded.clone() if loaded is c.source else loaded
    c.function = c.module.function
    return True


@compile_step("fuse-activations")
def fuse_backend_activations(c: Compilation) -> bool:
    """Fold Relu/Clip into the Conv/FullyConnected the backend keeps with a fused kernel."""
    assert c.function is not None and c.backend is not None
    return fuse_activations(c.function, c.backend.supports_fused_activation)


@compile_step("quantize")
def quantize(c: Compilation) -> bool:
    """With ``precision=Quantize(...)``: float layers become int8 ones where the backend
    declares the integer primitives (on the graph ``glow_core.profile`` names values from)."""
    from glow_core.quantization.mode import Quantize
    from glow_core.quantization.stage import quantize_pass

    if not isinstance(c.precision_mode, Quantize):
        return False
    assert c.function is not None and c.backend is not None
    return quantize_pass(c.precision_mode, c.backend, c.precision)(c.function)


@compile_step("recognize-nodes", after=("fuse-activations",))
def recognize_kept_nodes(c: Compilation) -> bool:
    """Attention and GELU patterns become one node, where the backend keeps that node."""
    from glow_core.passes.recognize_nodes import recognize_nodes

    assert c.function is not None and c.backend is not None
    backend = c.backend
    return recognize_nodes(c.function, lambda n: not backend.should_lower(n))


@compile_step("convert-precision", after=("lower-nodes",))
def convert_precision(c: Compilation) -> bool:
    """With ``precision="fp16"``/``"bf16"``: float32 compute in that kind, where the backend
    claims it (inputs and outputs stay float32)."""
    from glow_core.quantization.stage import precision_pass

    assert c.function is not None and c.backend is not None
    narrow = precision_pass(c.precision_mode, c.backend, c.precision)
    return False if narrow is None else narrow(c.function)


@compile_step("lower-nodes", required=True)
def lower_nodes(c: Compilation) -> bool:
    """Replace high-level nodes by their primitives, except those the backend keeps."""
    assert c.function is not None and c.backend is not None
    return lower_function(c.function, c.backend.should_lower)


@compile_step("post-lowering", after=("lower-nodes",))
def post_lowering(c: Compilation) -> bool:
    """The backend's own graph rewrite after lowering (``Backend.transform_post_lowering``)."""
    assert c.function is not None and c.backend is not None
    return bool(c.backend.transform_post_lowering(c.function))


@compile_step("check-support", required=True, after=("lower-nodes", "post-lowering"))
def check_support_step(c: Compilation) -> bool:
    """Refuse every node the backend cannot run, all named in one error, before any code."""
    assert c.function is not None and c.backend is not None
    check_support(c.function, c.backend)
    return False


@compile_step("schedule", Level.GRAPH, Level.SCHEDULED, required=True)
def schedule_nodes(c: Compilation) -> bool:
    """A node order that keeps peak live memory low (the graph is fixed from here on)."""
    assert c.function is not None
    c.order = schedule(c.function)
    return True


@compile_step("irgen", Level.SCHEDULED, Level.IR, required=True)
def irgen(c: Compilation) -> bool:
    """One instruction (or view, or copy) per scheduled node, over allocated buffers."""
    assert c.function is not None
    c.ir = generate_ir(c.function, c.order)
    return True


@compile_step("plan-memory", Level.IR, Level.PLANNED, required=True)
def plan_memory_step(c: Compilation) -> bool:
    """Static offsets for constants, placeholders and the activation arena."""
    assert c.ir is not None
    c.ir.memory_plan = c.plan = plan_memory(c.ir)
    return True


COLLECT_FROM_BYTES = 4 << 20
"""Constant bytes from which codegen runs a full gc after dropping the graph. A full run costs
time in proportion to every object the process holds (49 ms a compile in the conformance
worker, 87% of a small case's compile); below this size the graph's copies are small beside
the process and go at the interpreter's next gc run."""


def _constant_bytes(constants: Sequence[Any]) -> int:
    return sum(getattr(w.value, "nbytes", 0) for w in constants)


@compile_step("codegen", Level.PLANNED, Level.CODE, required=True)
def codegen(c: Compilation) -> bool:
    """The backend's code for the planned IR: a CompiledFunction ready to run."""
    assert c.ir is not None and c.backend is not None and c.options is not None
    if c.consume:
        # Nothing reads the graph past IRGen; its constants share their arrays with the IR's,
        # which the backend may now release one by one as it copies them. The graph's nodes
        # form reference cycles, so where the weights are large (``COLLECT_FROM_BYTES``) they
        # are collected here, not at some later gc run.
        c.module, c.function, c.order = None, None, []
        c.ir.release_constants = True
        if _constant_bytes(c.ir.constants) >= COLLECT_FROM_BYTES:
            gc.collect()
    c.compiled = c.backend.compile(c.ir, c.options)
    return True


def check_support(fn: Function, backend: Backend) -> None:
    """Refuse at compile time every node the backend cannot run, all named in one error."""
    # A Backend's declarations are read once, not per node (``support_check``); an object that
    # only acts as one (a wrapper overriding ``is_op_supported``, forwarding the rest) is
    # asked through ``is_op_supported`` itself, the hook the plugin contract names.
    supported = backend.support_check() if isinstance(backend, Backend) else backend.is_op_supported
    refused = [n for n in fn.nodes if n.kind != "Save" and not supported(n)]
    if refused:
        listed = ", ".join(f"{n.kind}[{selecting_kind(n).name}] {n.name!r}" for n in refused[:10])
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        raise UnsupportedOpError(
            f"backend {backend.info().name!r} cannot run {len(refused)} node(s): {listed}{more}; "
            "pick another backend (`glow backends`) or one that declares these kinds"
        )


def resolve_step(name: str) -> Step:
    """The step registered under ``name``: a compile step, a graph pass or an IR pass."""
    found = [registry for registry in (COMPILE_STEPS, GRAPH_PASSES, IR_PASSES) if name in registry]
    if len(found) > 1:
        raise GlowError(f"{name!r} names a step in several registries (compile steps, graph and IR passes)")
    if not found:
        raise KeyError(name)
    if found[0] is COMPILE_STEPS:
        return COMPILE_STEPS[name]
    return graph_step(name) if found[0] is GRAPH_PASSES else ir_step(name)


REQUIRED_STEPS = tuple(name for name, step in COMPILE_STEPS.items() if step.required)

DEFAULT_PIPELINE = Pipeline(
    "import",
    # Target independent first, then fold activations into the layers the backend keeps
    # (BatchNorm is folded by now, nothing is lowered yet).
    # With a Quantize mode, int8 layers replace float ones first (the graph profiles name).
    Group("optimize", *DEFAULT_GRAPH_PIPELINE.steps, "quantize", "fuse-activations", "recognize-nodes"),
    Group(
        "lower",
        "lower-nodes",
        # Lowering exposes new work (constant subgraphs, reshape chains, duplicates).
        Group("optimize-lowered", *DEFAULT_GRAPH_PIPELINE.steps),
        "post-lowering",
        # Again only when the backend's rewrite changed something.
        Group("optimize-post-lowering", *DEFAULT_GRAPH_PIPELINE.steps, when="post-lowering"),
        "convert-precision",  # fp16/bf16 modes only
        Group("optimize-precision", *DEFAULT_GRAPH_PIPELINE.steps, when="convert-precision"),
    ),
    "check-support",  # nothing falls back silently: an unsupported node stops the compile here
    "schedule",
    "irgen",
    Group("optimize-ir", *DEFAULT_IR_PIPELINE),
    "plan-memory",
    "codegen",
)

STAGES: dict[str, str] = {
    "graph": "import",
    "optimized": "optimize",
    "lowered": "lower",
    "ir": "optimize-ir",
    "memory": "plan-memory",
}
"""``glow dump --stage NAME``: the pipeline entry each stage is the state after."""


def describe(pipeline: Pipeline) -> str:
    """The pipeline as an indented list: each step with its levels and one line of why."""
    lines = []
    for _path, item, depth in pipeline.walk():
        indent = "  " * depth
        if isinstance(item, Group):
            when = f" (only when {item.when!r} changed something)" if item.when else ""
            lines.append(f"{indent}{item.name}{when}")
            continue
        if not isinstance(item, str | Step):
            lines.append(f"{indent}repeat until nothing changes (at most {item.limit} rounds):")
            continue
        step = item if isinstance(item, Step) else resolve_step(item)
        levels = step.needs.value if step.gives is None else f"{step.needs.value} -> {step.gives.value}"
        lines.append(f"{indent}{step.name:<{max(1, 32 - len(indent))}} [{levels}] {step.doc}")
    return "\n".join(lines) + "\n"


def stage_labels(pipeline: Pipeline) -> dict[str, str]:
    """Top-level entry name -> stage label, for the entries ``STAGES`` names."""
    top = {item_name(item) for item in pipeline.steps}
    return {entry: stage for stage, entry in STAGES.items() if entry in top}


def new_compilation(source: Any, backend: Backend, **fields: Any) -> Compilation:
    """A compilation at the source level, ready for ``run_steps``."""
    return Compilation(level=Level.SOURCE, source=source, backend=backend, **fields)

"""The compile pipeline: one function per arrow of the design, run in one direction.

``compile_stages`` keeps what every stage produced (and how long it took) so the CLI can
dump any stage and report figures; ``compile`` is the user-facing entry point.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from glow_core import progress
from glow_core.backend import Backend, BackendOptions, selecting_kind
from glow_core.errors import UnsupportedOpError
from glow_core.graph.function import Function, Module
from glow_core.graph.node import Node
from glow_core.graph.printer import function_to_text
from glow_core.graph.verifier import verify
from glow_core.ir import IRFunction, MemoryPlan, check_plan, generate_ir, optimize_ir, plan_memory, verify_ir
from glow_core.ir.printer import ir_to_text
from glow_core.limits import MemoryLimits, memory_limits
from glow_core.lowering import lower_function
from glow_core.passes import DEFAULT_GRAPH_PIPELINE, PassReport, run_pass, run_pipeline
from glow_core.passes.fuse_activations import fuse_activations
from glow_core.plugins import get_backend
from glow_core.runtime.compiled import CompiledFunction
from glow_core.schedule import schedule

ModelLike = str | os.PathLike | bytes | onnx.ModelProto | Module
STAGES = ("graph", "optimized", "lowered", "ir", "memory")

_COMPILING = threading.RLock()
"""One ``compile`` at a time in a process: code generators keep process-wide state (llvmlite
parses into LLVM's global context), and compiling is mostly Python holding the GIL anyway,
so threads that compile (Sessions specializing) lose little by taking turns."""


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


@dataclass
class Stages:
    """Everything the pipeline produced for one function, stage by stage."""

    backend: Backend
    texts: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    node_counts: dict[str, int] = field(default_factory=dict)
    passes: PassReport = field(default_factory=PassReport)
    function: Function | None = None
    order: list[Node] = field(default_factory=list)
    ir: IRFunction | None = None
    plan: MemoryPlan | None = None


class _Timer:
    def __init__(self, stages: Stages, name: str):
        self.stages, self.name = stages, name

    def __enter__(self) -> None:
        progress.step(self.name)
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.stages.seconds[self.name] = time.perf_counter() - self.start


def compile_stages(
    module: Module,
    backend: Backend,
    *,
    verify_each: bool = False,
    keep_text: bool = False,
    dump_after: str | None = None,
) -> Stages:
    """Run every stage up to (not including) code generation on a copy of ``module``."""
    stages = graph_stages(
        module, backend, verify_each=verify_each, keep_text=keep_text, dump_after=dump_after
    )
    fn = stages.function
    assert fn is not None
    check_support(fn, backend)
    with _Timer(stages, "schedule"):
        stages.order = schedule(fn)
    with _Timer(stages, "irgen"):
        ir = generate_ir(fn, stages.order)
        optimize_ir(ir)
        if verify_each:
            verify_ir(ir)
    with _Timer(stages, "plan-memory"):
        ir.memory_plan = plan_memory(ir)
        if verify_each:
            check_plan(ir.memory_plan)
    stages.ir, stages.plan = ir, ir.memory_plan
    if keep_text:
        from glow_core.ir.printer import memory_to_text

        stages.texts["ir"] = ir_to_text(ir)
        stages.texts["memory"] = memory_to_text(ir, ir.memory_plan)
    return stages


def graph_stages(
    module: Module,
    backend: Backend,
    *,
    verify_each: bool = False,
    keep_text: bool = False,
    dump_after: str | None = None,
) -> Stages:
    """The graph stages on a copy of ``module``: optimize, lower for ``backend``, optimize.

    No support check: tools that ask what a backend lacks (``glow-sdk check``) read the
    lowered function's kinds themselves.
    """
    module = module.clone()
    fn = module.function
    stages = Stages(backend=backend, function=fn)

    def snapshot(stage: str) -> None:
        stages.node_counts[stage] = len(fn)
        if verify_each:
            verify(fn)
        if keep_text:
            stages.texts[stage] = function_to_text(fn)

    snapshot("graph")
    with _Timer(stages, "optimize"):
        run_pipeline(
            fn, DEFAULT_GRAPH_PIPELINE, verify_each=verify_each, dump_after=dump_after, report=stages.passes
        )
        # Backend-driven, so not in the data pipeline: BatchNorm is folded, nothing is lowered yet.
        run_pass(
            fn,
            "fuse-activations",
            lambda f: fuse_activations(f, backend.supports_fused_activation),
            verify_each=verify_each,
            dump_after=dump_after,
            report=stages.passes,
        )
    snapshot("optimized")
    with _Timer(stages, "lower"):
        lower_function(fn, backend.should_lower)
        run_pipeline(
            fn, DEFAULT_GRAPH_PIPELINE, verify_each=verify_each, dump_after=dump_after, report=stages.passes
        )
        if backend.transform_post_lowering(fn):
            run_pipeline(fn, DEFAULT_GRAPH_PIPELINE, verify_each=verify_each, report=stages.passes)
    snapshot("lowered")
    return stages


def check_support(fn: Function, backend: Backend) -> None:
    """Refuse at compile time every node the backend cannot run, all named in one error."""
    refused = [n for n in fn.nodes if n.kind != "Save" and not backend.is_op_supported(n)]
    if refused:
        listed = ", ".join(f"{n.kind}[{selecting_kind(n).name}] {n.name!r}" for n in refused[:10])
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        raise UnsupportedOpError(
            f"backend {backend.info().name!r} cannot run {len(refused)} node(s): {listed}{more}; "
            "pick another backend (`glow backends`) or one that declares these kinds"
        )


def choose_backend(
    backend: str | Backend | None, options: dict[str, Any] | BackendOptions | None
) -> tuple[Backend, BackendOptions]:
    """The backend by name (None: the best installed) and its options, validated."""
    chosen = backend if isinstance(backend, Backend) else get_backend(backend)
    return chosen, chosen.parse_options(options)


def compile(
    model: ModelLike,
    backend: str | Backend | Sequence[str | Backend] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    options: dict[str, Any] | BackendOptions | None = None,
    *,
    verify_each: bool = False,
    base_dir: str | os.PathLike | None = None,
    limits: MemoryLimits | None = None,
    partition: Mapping[str, str | int] | None = None,
) -> CompiledFunction:
    """Compile ``model`` for ``backend`` (None: the best installed) into a runnable function.

    ``backend`` may be a list in preference order (``["opencl", "cpu"]``): the model is
    then split across those backends by support, device memory and cost, each partition
    compiled by its backend, and the result runs them as a DAG (docs/partitioning.md);
    ``partition`` assigns nodes by hand (name or pattern -> device) and ``options`` may be
    keyed by backend name. The function takes exactly the input shapes it was compiled
    for; ``glow_core.load`` gives a Session that compiles again (cached) for other shapes
    and load-time values. ``base_dir`` is the folder of the model's external data files
    (see ``load_onnx``); ``limits`` replaces the memory budget in force
    (``glow_core.limits``) for this call.
    """
    if is_backend_list(backend) or partition is not None:
        # Backends are resolved before the compile lock: choosing the default runs a self-test.
        if is_backend_list(backend):
            backends = list(backend)  # type: ignore[arg-type]
        else:
            backends = [backend if backend is not None else get_backend()]
        with memory_limits(limits), _COMPILING:
            from glow_core.runtime.partitioned import compile_partitioned

            module = load_model(model, input_shapes, base_dir=base_dir)
            return compile_partitioned(module, backends, options, by_hand=partition, verify_each=verify_each)
    chosen, parsed = choose_backend(backend, options)  # type: ignore[arg-type]
    with memory_limits(limits), _COMPILING:
        progress.step("load model")
        module = load_model(model, input_shapes, base_dir=base_dir)
        stages = compile_stages(module, chosen, verify_each=verify_each)
        assert stages.ir is not None
        progress.step(f"codegen ({chosen.info().name})")
        return chosen.compile(stages.ir, parsed)


def is_backend_list(backend: object) -> bool:
    """Whether ``backend`` names several backends (a list or tuple, not one name)."""
    return isinstance(backend, list | tuple)

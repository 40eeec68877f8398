"""Compiling a model: the default pipeline (``glow_core.pipeline.steps``) run for a backend.

``compile_stages`` keeps what every step produced (and how long it took) so the CLI can
dump any stage or step and report figures; ``compile`` is the user-facing entry point.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from glow_core.backend import Backend, BackendOptions
from glow_core.collector import collector_paused
from glow_core.errors import BackendError
from glow_core.graph.function import Module
from glow_core.limits import MemoryLimits, memory_limits
from glow_core.pipeline.data import Pipeline
from glow_core.pipeline.runner import Compilation, run_steps
from glow_core.pipeline.steps import (
    DEFAULT_PIPELINE,
    REQUIRED_STEPS,
    STAGES,
    ModelLike,
    check_support,
    load_model,
    new_compilation,
    resolve_step,
    stage_labels,
)
from glow_core.plugins import get_backend
from glow_core.quantization.mode import Precision, check_precision
from glow_core.quantization.stage import PrecisionOutcome
from glow_core.runtime.compiled import CompiledFunction

__all__ = [
    "STAGES",
    "ModelLike",
    "Stages",
    "backend_pipeline",
    "check_support",
    "choose_backend",
    "compile",
    "compile_stages",
    "graph_stages",
    "is_backend_list",
    "load_model",
]

Stages = Compilation
"""What the pipeline produced for one function, step by step (the name callers know)."""

_COMPILING = threading.RLock()
"""One ``compile`` at a time in a process: code generators keep process-wide state (llvmlite
parses into LLVM's global context), and compiling is mostly Python holding the GIL anyway,
so threads that compile (Sessions specializing) lose little by taking turns."""


def backend_pipeline(backend: Backend) -> Pipeline:
    """The pipeline ``backend`` compiles with: the default, as its ``pipeline`` hook edits it."""
    return backend.pipeline(DEFAULT_PIPELINE)


def compile_stages(
    model: ModelLike,
    backend: Backend,
    *,
    options: BackendOptions | None = None,
    verify_each: bool | None = None,
    keep_text: bool = False,
    dump_after: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: str | os.PathLike | None = None,
    stop_before: str | None = None,
    precision: Precision = None,
    consume: bool = False,
) -> Stages:
    """Run ``backend``'s pipeline on ``model`` (a Module is copied first, never changed).

    Without ``options`` the run stops before code generation (dumps and reports need no
    code); ``stop_before`` ends it before another top-level step. ``verify_each=None``
    means the process default (on in tests). ``consume``: the caller keeps only the
    compiled function, so the graph and the IR's weights are let go during code generation
    (``Compilation.consume``).
    """
    pipeline = backend_pipeline(backend)
    state = new_compilation(
        model,
        backend,
        options=options,
        input_shapes=input_shapes,
        base_dir=base_dir,
        precision_mode=check_precision(precision),
        precision=PrecisionOutcome(),
        consume=consume,
    )
    # The graph's nodes, the IR and the generated code's builders all stay alive until the
    # compile ends, so the collections their allocations trigger free next to nothing, yet
    # each full one walks every object: on gru_text's 28k nodes nine of them took 2-3 s of
    # a 12 s compile (docs/performance.md). Code generation collects what it lets go itself.
    with collector_paused():
        run_steps(
            pipeline,
            state,
            resolve_step,
            verify_each=verify_each,
            dump_after=dump_after,
            stages=stage_labels(pipeline),
            keep_text=keep_text,
            stop_before=stop_before or (None if options is not None else "codegen"),
            required=REQUIRED_STEPS,
        )
    return state


def graph_stages(
    module: Module,
    backend: Backend,
    *,
    verify_each: bool | None = None,
    keep_text: bool = False,
    dump_after: str | None = None,
    precision: Precision = None,
) -> Stages:
    """The graph stages on a copy of ``module``: optimize, (quantize,) lower for ``backend``,
    optimize (, convert precision). ``precision``: see ``glow_core.quantization``.

    No support check: tools that ask what a backend lacks (``glow-sdk check``) read the
    lowered function's kinds themselves.
    """
    return compile_stages(
        module,
        backend,
        verify_each=verify_each,
        keep_text=keep_text,
        dump_after=dump_after,
        stop_before="check-support",
        precision=precision,
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
    verify_each: bool | None = None,
    base_dir: str | os.PathLike | None = None,
    limits: MemoryLimits | None = None,
    partition: Mapping[str, str | int] | None = None,
    precision: Precision = None,
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
    (``glow_core.limits``) for this call. ``precision``: ``"fp16"``/``"bf16"`` runs float32
    compute in that kind, ``glow_core.Quantize(profile, ...)`` in int8 (docs/quantization.md).
    """
    precision = check_precision(precision)
    if is_backend_list(backend) or partition is not None:
        # Backends are resolved before the compile lock: choosing the default runs a self-test.
        if is_backend_list(backend):
            backends = list(backend)  # type: ignore[arg-type]
        else:
            backends = [backend if backend is not None else get_backend()]
        with memory_limits(limits), _COMPILING:
            from glow_core.runtime.partitioned import compile_partitioned

            module = load_model(model, input_shapes, base_dir=base_dir)
            if precision is not None:
                raise BackendError(
                    "precision modes are not yet supported with several backends: compile for one"
                )
            return compile_partitioned(module, backends, options, by_hand=partition, verify_each=verify_each)
    chosen, parsed = choose_backend(backend, options)  # type: ignore[arg-type]
    with memory_limits(limits), _COMPILING:
        stages = compile_stages(
            model,
            chosen,
            options=parsed,
            verify_each=verify_each,
            input_shapes=input_shapes,
            base_dir=base_dir,
            precision=precision,
            consume=True,
        )
        assert stages.compiled is not None
        return stages.compiled


def is_backend_list(backend: object) -> bool:
    """Whether ``backend`` names several backends (a list or tuple, not one name)."""
    return isinstance(backend, list | tuple)

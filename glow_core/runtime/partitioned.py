"""A partitioned model: each partition compiled by its backend, run as a DAG.

``compile_partitioned`` optimizes the graph once (target independent), asks the
partitioner for a plan, turns each partition into a module of its own (boundary tensors
become its placeholders) and compiles it through the ordinary pipeline of its backend
(fusion, lowering, scheduling, IR, memory plan, codegen), so a partition is an ordinary
CompiledFunction.

``PartitionedFunction`` runs them in dependency order and hands boundary tensors over as
numpy arrays on the host. A partition runs on the calling thread when it is the only
one ready (a chain costs no thread hop); when several are ready they run concurrently on
a thread pool. Everything a run changes lives in that call's locals, so one
PartitionedFunction may be called from several threads (as far as its partitions'
CompiledFunctions may).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.errors import BackendError
from glow_core.graph.function import SAVE, Module
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.partition import Assignment, PartitionPlan, partition_function, resolve_devices
from glow_core.partition.devices import BackendSpec, OptionsSpec
from glow_core.partition.plan import Partition
from glow_core.passes import DEFAULT_GRAPH_PIPELINE, run_pipeline
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.pipeline import Stages, compile_stages
from glow_core.runtime.trace import TraceEvent, TraceRecorder
from glow_core.types import Type


def optimized_module(module: Module) -> Module:
    """A copy of ``module`` after the target-independent graph pipeline: what the
    partitioner splits (each partition is optimized again for its backend)."""
    copy = module.clone()
    run_pipeline(copy.function, DEFAULT_GRAPH_PIPELINE)
    return copy


def plan_partitions(
    module: Module,
    backends: Sequence[BackendSpec],
    options: OptionsSpec = None,
    *,
    by_hand: Assignment | None = None,
    merge_islands: bool = True,
    alternate: int | None = None,
) -> PartitionPlan:
    """The partition plan of ``module`` (not optimized yet) over ``backends``; ``alternate``
    forces that many stretches taking turns between the first and the last backend."""
    devices = resolve_devices(backends, options)
    return partition_function(
        optimized_module(module).function,
        devices,
        by_hand=by_hand,
        merge_islands=merge_islands,
        alternate=alternate,
    )


def partition_module(plan: PartitionPlan, partition: Partition) -> Module:
    """The nodes of ``partition`` as a module of their own: what they read from outside
    becomes input placeholders (named as the plan names them), what others read or the
    model returns becomes outputs."""
    source = plan.function
    module = Module(f"{source.module.name}_p{partition.index}")
    fn = module.create_function(f"{source.name}_p{partition.index}")
    mapping: dict[Node, Node] = {}
    members = set(partition.nodes)
    outputs: dict[str, Placeholder] = {}
    for n in partition.nodes:
        for value in n.dependencies:
            if value in mapping or value in members:
                continue
            if isinstance(value, Constant):
                mapping[value] = const = Constant(module.unique_name(value.name), value.value, value.type)
                module.constants[const.name] = const
            elif not (isinstance(value, Placeholder) and value.is_output):
                mapping[value] = module.create_placeholder(value.name, value.type)
        if n.kind == "Save":
            target = n.inputs[1]
            outputs[target.name] = module.create_placeholder(target.name, target.type, is_output=True)
        elif n.name in plan.boundaries:
            outputs[n.name] = module.create_placeholder(n.name, n.type, is_output=True)
    for n in partition.nodes:
        predicate = None if n.predicate is None else mapping[n.predicate]
        if n.kind == "Save":
            value, target = mapping[n.inputs[0]], outputs[n.inputs[1].name]
            fn.add(Node(SAVE, [value, target], {}, target.type, module.unique_name(n.name), predicate))
            continue
        name = module.unique_name(n.name)
        clone = Node(n.spec, [mapping[i] for i in n.inputs], dict(n.attrs), n.type, name, predicate)
        mapping[n] = fn.add(clone)
        if n.name in plan.boundaries:
            target = outputs[n.name]
            fn.add(Node(SAVE, [clone, target], {}, target.type, module.unique_name(f"save_{n.name}"), None))
    return module


@dataclass(frozen=True)
class Step:
    """One partition, compiled: what it reads and which steps must finish first."""

    partition: Partition
    compiled: CompiledFunction
    stages: Stages
    after: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"p{self.partition.index} {self.partition.device.label}"


class PartitionedFunction(CompiledFunction):
    """Partitions compiled by their backends, run as a DAG with ``run({name: array})``."""

    concurrent_runs = True
    """A run keeps its tensors in its own locals and each partition's ``run`` is thread-safe
    by the CompiledFunction contract, so runs from several threads overlap."""

    def __init__(self, plan: PartitionPlan, steps: Sequence[Step], name: str):
        # Not CompiledFunction.__init__: there is no single IR function; the signature is the
        # model's inputs (those some partition reads) and outputs.
        self.name = name
        self.plan = plan
        self.steps = tuple(steps)
        fn = plan.function
        read = {r for s in self.steps for r in s.compiled.input_types}
        self.input_types: dict[str, Type] = {p.name: p.type for p in fn.inputs if p.name in read}
        self.output_types: dict[str, Type] = {p.name: p.type for p in fn.outputs}
        self._readers: list[list[int]] = [[] for _ in self.steps]
        for index, step in enumerate(self.steps):
            for before in step.after:
                self._readers[before].append(index)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def summary(self) -> str:
        return self.plan.summary()

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._run(inputs, None)

    def run_traced(self, inputs: Mapping[str, np.ndarray], recorder: TraceRecorder) -> dict[str, np.ndarray]:
        """``run``, recording each partition run, transfer and profiled kernel in ``recorder``."""
        return self._run(self.check_inputs(inputs), recorder)

    def close(self) -> None:
        """Stop the thread pool (it also stops with the process); a later run starts it again."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=min(len(self.steps), 8), thread_name_prefix="glow-partition"
                )
            return self._pool

    def _run(self, inputs: dict[str, np.ndarray], recorder: TraceRecorder | None) -> dict[str, np.ndarray]:
        values: dict[str, np.ndarray] = dict(inputs)
        ready_at: dict[str, float] = {}
        waiting = [len(step.after) for step in self.steps]
        ready = [i for i, count in enumerate(waiting) if count == 0]
        running: dict[Future, int] = {}

        def finish(index: int, result: _StepResult) -> None:
            values.update(result.outputs)
            if recorder is not None:
                self._record(recorder, self.steps[index], result, ready_at)
                ready_at.update(dict.fromkeys(result.outputs, result.end))
            for reader in self._readers[index]:
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    ready.append(reader)

        try:
            while ready or running:
                if len(ready) == 1 and not running:
                    index = ready.pop()
                    finish(index, _run_step(self.steps[index], values, recorder is not None))
                    continue
                pool = self._executor()
                while ready:
                    index = ready.pop(0)
                    step = self.steps[index]
                    feed = {n: values[n] for n in step.compiled.input_types}
                    running[pool.submit(_run_step, step, feed, recorder is not None)] = index
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    finish(running.pop(future), future.result())
        finally:
            if running:
                wait(running)  # never leave a partition running after an error
        return {name: values[name] for name in self.output_types}

    def _record(
        self, recorder: TraceRecorder, step: Step, result: _StepResult, ready_at: dict[str, float]
    ) -> None:
        track = step.partition.device.label
        for name in step.compiled.input_types:
            if name in self.plan.boundaries and name in ready_at:
                nbytes = self.plan.boundaries[name].nbytes
                recorder.add(
                    TraceEvent(
                        track,
                        f"transfer {name}",
                        "transfer",
                        ready_at[name],
                        result.start - ready_at[name],
                        {"bytes": nbytes},
                    )
                )
        partition = step.partition
        recorder.add(
            TraceEvent(
                track,
                f"partition {partition.index}",
                "partition",
                result.start,
                result.end - result.start,
                {
                    "nodes": partition.operator_count,
                    "flops": partition.flops,
                    "backend": partition.device.name,
                },
            )
        )
        cursor = result.start
        for kernel in result.kernels:
            recorder.add(
                TraceEvent(track, kernel.name, "kernel", cursor, kernel.seconds, {"kind": kernel.kind})
            )
            cursor += kernel.seconds


@dataclass(frozen=True)
class _Kernel:
    name: str
    kind: str
    seconds: float


@dataclass(frozen=True)
class _StepResult:
    outputs: dict[str, np.ndarray]
    start: float
    end: float
    kernels: tuple[_Kernel, ...] = ()


def _run_step(step: Step, values: Mapping[str, np.ndarray], kernels: bool) -> _StepResult:
    compiled = step.compiled
    feed = {name: values[name] for name in compiled.input_types}
    start = time.perf_counter()
    outputs = compiled.run(feed)
    end = time.perf_counter()
    check_step_outputs(step, outputs)
    timed: tuple[_Kernel, ...] = ()
    if kernels:
        # Backends that time their kernels per run (glow-cpu with profile=True) keep the last
        # run's rows; read right after this run, on the thread that ran it.
        rows: Any = getattr(compiled, "last_profile", None) or ()
        timed = tuple(_Kernel(r.name, r.kind, r.seconds) for r in rows)
    return _StepResult(outputs, start, end, timed)


def check_step_outputs(step: Step, outputs: Mapping[str, Any]) -> None:
    """Refuse a partition's result that lacks an output or has one of the wrong type.

    A one-backend run returns whatever the backend gives; between partitions, a missing or
    misshapen boundary tensor would surface in the next partition as a confusing input
    error (or a KeyError), far from the backend at fault. Checked here, it names the
    partition, its device and the tensor.
    """
    where = f"partition {step.partition.index} on {step.partition.device.label!r}"
    contract = "a CompiledFunction returns a fresh array for every output of its function"
    missing = [name for name in step.compiled.output_types if name not in outputs]
    if missing:
        raise BackendError(f"{where} returned no {', '.join(map(repr, missing))}: {contract}")
    for name, expected in step.compiled.output_types.items():
        value = outputs[name]
        is_array = isinstance(value, np.ndarray)
        if not is_array or value.dtype != expected.dtype or value.shape != expected.shape:
            got = f"{value.dtype}{list(value.shape)}" if is_array else type(value).__name__
            raise BackendError(f"{where} returned {got} for {name!r}, expected {expected}: {contract}")


def compile_plan(
    plan: PartitionPlan, *, verify_each: bool | None = None, name: str | None = None
) -> PartitionedFunction:
    """Compile every partition of ``plan`` with its device's backend and options."""
    steps = []
    for partition in plan.partitions:
        device = partition.device
        stages = compile_stages(
            partition_module(plan, partition), device.backend, options=device.options, verify_each=verify_each
        )
        compiled = stages.compiled
        assert compiled is not None
        steps.append(Step(partition, compiled, stages, tuple(sorted(partition.after))))
    return PartitionedFunction(plan, steps, name or plan.function.name)


def compile_partitioned(
    module: Module,
    backends: Sequence[BackendSpec],
    options: OptionsSpec = None,
    *,
    by_hand: Assignment | None = None,
    merge_islands: bool = True,
    alternate: int | None = None,
    verify_each: bool | None = None,
) -> PartitionedFunction:
    """``module`` split across ``backends`` (in preference order) and compiled."""
    plan = plan_partitions(
        module, backends, options, by_hand=by_hand, merge_islands=merge_islands, alternate=alternate
    )
    return compile_plan(plan, verify_each=verify_each, name=module.function.name)

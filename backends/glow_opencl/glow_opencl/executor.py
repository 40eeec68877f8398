"""A compiled function on an OpenCL device: three device buffers and a fixed list of launches.

The memory plan's three regions become three buffers: constants (uploaded once, here),
placeholders (inputs and outputs) and the activation arena. A run enqueues, on the device's
in-order queue and without waiting in between: the output poison fill, the input uploads,
every kernel, and the output downloads; it then waits on the download events only. A
predicated launch is the exception: the host reads its one-byte flag (waiting for the work
queued before it) and enqueues the kernel only when the flag is true, so skipping costs one
synchronization per predicated instruction and nothing elsewhere.

Runs from several threads overlap: each borrows a ``DeviceState`` (its own buffers,
kernel objects and queue); only the constants buffer and the built program are shared.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from glow_core.ir.instructions import IRFunction
from glow_core.ir.memory import MemoryPlan
from glow_core.runtime.arena import POISON_BYTE
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.state_pool import StatePool
from glow_opencl.codegen import ACTIVATIONS, CONSTANTS, PLACEHOLDERS, Program
from glow_opencl.runtime import Runtime

_POISON = np.uint8(POISON_BYTE)  # the core's poison, as the fill call takes it
_MIN_BUFFER = 64  # OpenCL refuses zero-sized buffers


Launch = tuple[cl.Kernel, tuple[int, ...], tuple[int, ...] | None, tuple[str, int] | None]
"""A kernel with its arguments set, its global and local sizes, and its predicate's place."""


class OpenCLFunction(CompiledFunction):
    """A compiled IR function whose run is a fixed sequence of OpenCL commands.

    The constants buffer is uploaded once and shared. What a run writes (the placeholders
    and activations buffers), the kernels whose arguments point at them (OpenCL kernel
    arguments are state of the kernel object, not of a launch) and the in-order queue the
    run waits on form a ``DeviceState``; a run borrows one, so runs from several threads
    overlap (``concurrent_runs``), each with its own buffers and queue.
    """

    concurrent_runs = True

    def __init__(self, ir: IRFunction, runtime: Runtime, program: Program, poison: bool = True):
        super().__init__(ir)
        plan: MemoryPlan = ir.memory_plan
        self.plan, self.runtime, self.program, self.poison = plan, runtime, program, poison
        flags = cl.mem_flags
        blob = _constant_blob(ir, plan, program)
        self.constants = cl.Buffer(runtime.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=blob)
        self.built = runtime.build(program.source)
        self.input_offsets = {w.name: plan.placeholder_offsets[w.name] for w in ir.inputs}
        self.output_offsets = {w.name: plan.placeholder_offsets[w.name] for w in ir.outputs}
        self.states: StatePool[DeviceState] = StatePool(lambda: DeviceState(self))
        self.states.add(DeviceState(self))

    @property
    def kernel_count(self) -> int:
        """Kernel launches per run (after fusion)."""
        return len(self.program.launches)

    def kernel_times(self, inputs: dict[str, np.ndarray], runs: int) -> str:
        """Device time of every kernel from OpenCL profiling events (``profile.profile``)."""
        from glow_opencl.profile import profile  # imports this module

        return profile(self, inputs, runs).table()

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.states.borrow() as state:
            return self.execute_on(state, inputs)

    def execute_on(self, state: DeviceState, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run in ``state``'s buffers and queue (which the caller has borrowed)."""
        queue, placeholders = state.queue, state.buffers[PLACEHOLDERS]
        if self.poison:
            for name, offset in self.output_offsets.items():
                size = self.output_types[name].nbytes
                if size:
                    cl.enqueue_fill_buffer(queue, placeholders, _POISON, offset, size)
        # Upload events are kept: dropping a pyopencl NannyEvent would wait for its transfer.
        uploads = [
            cl.enqueue_copy(
                queue, placeholders, array, dst_offset=self.input_offsets[name], is_blocking=False
            )
            for name, array in inputs.items()
            if array.nbytes
        ]
        flag = np.zeros(1, np.uint8)
        for kernel, global_size, local_size, predicate in state.launches:
            if predicate is not None:
                region, offset = predicate
                cl.enqueue_copy(queue, flag, state.buffers[region], src_offset=offset, is_blocking=True)
                if not flag[0]:
                    continue
            cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size)
        outputs, downloads = {}, []
        for name, offset in self.output_offsets.items():
            t = self.output_types[name]
            outputs[name] = np.empty(t.shape, t.dtype)
            if t.nbytes:
                downloads.append(
                    cl.enqueue_copy(queue, outputs[name], placeholders, src_offset=offset, is_blocking=False)
                )
        if downloads:
            cl.wait_for_events(downloads)
        del uploads  # complete: the queue is in order and the downloads came after them
        return outputs


class DeviceState:
    """One run's device memory: placeholders and activations buffers, the program's kernels
    with their arguments pointing there (and at the shared constants), and its own queue."""

    def __init__(self, fn: OpenCLFunction):
        ctx, plan = fn.runtime.context, fn.plan
        self.queue = cl.CommandQueue(ctx, fn.runtime.ref.device)
        self.buffers = {
            CONSTANTS: fn.constants,
            PLACEHOLDERS: cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(plan.placeholder_bytes, _MIN_BUFFER)),
            ACTIVATIONS: cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(plan.arena_bytes, _MIN_BUFFER)),
        }
        self.launches: list[Launch] = []
        for launch in fn.program.launches:
            kernel = cl.Kernel(fn.built, launch.kernel)
            args = []
            for region, offset in launch.args:
                args += [self.buffers[region], np.int32(offset)]
            kernel.set_args(*args)
            self.launches.append((kernel, launch.global_size, launch.local_size, launch.predicate))


def _constant_blob(ir: IRFunction, plan: MemoryPlan, program: Program) -> np.ndarray:
    """Every constant at its planned offset, then the derived ones, in one host array."""
    blob = np.zeros(max(program.constant_bytes, _MIN_BUFFER), np.uint8)
    placed = [(plan.constant_offsets[w.name], np.asarray(w.value, dtype=w.type.dtype)) for w in ir.constants]
    for offset, value in placed + program.derived:
        data = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        blob[offset : offset + data.size] = data
    return blob

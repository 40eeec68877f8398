"""Per-kernel device time of a compiled function, from OpenCL profiling events.

A run's queue has profiling off (it costs a timestamp per command on some drivers), so a
profile replays the function's launches, unchanged, on a second queue of the same context
created with ``PROFILING_ENABLE``. The device time of each launch (``CL_PROFILING_COMMAND_END
- START``) says where the time goes; wall time minus the summed device time is what the
host, the driver's scheduling and the launches themselves cost.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from glow_opencl.codegen import PLACEHOLDERS
from glow_opencl.executor import OpenCLFunction


@dataclass(frozen=True)
class KernelTime:
    """One launch: its kernel's family (the name before the hash), the instructions it runs,
    and its median device time in milliseconds over the profiled runs."""

    family: str
    instrs: tuple[str, ...]
    ms: float


@dataclass(frozen=True)
class Profile:
    """Launches with their device times, the median wall time of replaying the launches alone,
    and the median wall time of a whole ``run()``."""

    kernels: list[KernelTime]
    replay_ms: float
    run_ms: float

    @property
    def device_ms(self) -> float:
        return sum(k.ms for k in self.kernels)

    def table(self, top: int = 12) -> str:
        """Markdown: time per kernel family, the slowest launches, and where the rest goes."""
        families: dict[str, list[float]] = {}
        for k in self.kernels:
            families.setdefault(k.family, []).append(k.ms)
        total = self.device_ms or 1.0
        rows = [
            "| kernel family | launches | device ms | share |",
            "|---|--:|--:|--:|",
        ]
        for family, times in sorted(families.items(), key=lambda kv: -sum(kv[1])):
            rows.append(f"| {family} | {len(times)} | {sum(times):.3f} | {sum(times) / total:.1%} |")
        rows += ["", "| launch (instructions) | family | device ms |", "|---|---|--:|"]
        for k in sorted(self.kernels, key=lambda k: -k.ms)[:top]:
            rows.append(f"| {' + '.join(k.instrs)} | {k.family} | {k.ms:.3f} |")
        gaps = self.replay_ms - self.device_ms
        rows += [
            "",
            f"{len(self.kernels)} launches: kernels {self.device_ms:.2f} ms; launches alone "
            f"{self.replay_ms:.2f} ms ({gaps:.2f} ms between kernels, "
            f"{gaps / max(len(self.kernels), 1) * 1e3:.0f} us per launch); run() {self.run_ms:.2f} ms "
            f"({self.run_ms - self.replay_ms:.2f} ms of transfers, poison fill and host work).",
        ]
        return "\n".join(rows)


def profile(fn: OpenCLFunction, inputs: dict[str, np.ndarray], runs: int = 5) -> Profile:
    """Medians over ``runs`` rounds, each a run then a replay of its launches on a profiling
    queue (alternated, so a neighbour's load on a shared machine hits both alike), all in one
    borrowed ``DeviceState`` (concurrent runs of ``fn`` keep to the others)."""
    queue = cl.CommandQueue(fn.runtime.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    arrays = fn.check_inputs(inputs)
    samples: list[list[float]] = [[] for _ in fn.program.launches]
    run_walls, replay_walls = [], []
    # One state for every round: runs on other threads meanwhile use others, not these buffers.
    with fn.states.borrow() as state:
        for round_ in range(runs + 1):  # the first round warms up (PoCL compiles per work-group size)
            start = time.perf_counter()
            fn.execute_on(state, arrays)
            run_wall = time.perf_counter() - start
            placeholders = state.buffers[PLACEHOLDERS]
            for name, data in arrays.items():
                if data.nbytes:
                    cl.enqueue_copy(queue, placeholders, data, dst_offset=fn.input_offsets[name])
            queue.finish()
            start = time.perf_counter()
            # Predicated launches are replayed too: the profile times every kernel the program has.
            events = [cl.enqueue_nd_range_kernel(queue, k, g, local) for k, g, local, _ in state.launches]
            queue.finish()
            if round_ == 0:
                continue
            replay_walls.append(time.perf_counter() - start)
            run_walls.append(run_wall)
            for times, event in zip(samples, events, strict=True):
                times.append((event.profile.end - event.profile.start) * 1e-6)
    kernels = [
        KernelTime(launch.kernel.rsplit("_", 1)[0], tuple(launch.instrs), statistics.median(times))
        for launch, times in zip(fn.program.launches, samples, strict=True)
    ]
    return Profile(kernels, statistics.median(replay_walls) * 1e3, statistics.median(run_walls) * 1e3)

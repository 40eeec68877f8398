"""A compiled function: three arenas and one native entry point called through ctypes.

The arenas are numpy byte arrays sized from the memory plan (plus what the kernels added:
packed weights after the constants, scratch after the activations), 64-byte aligned, the
large ones on huge pages (``glow_core.huge_pages``).
Constants and packed weights are written once (``constant_region``; the backend fills it
once LLVM is done and hands it over); an inference copies the inputs in,
poisons the outputs (every byte 0xFF, so an element no kernel wrote reads as NaN), makes
one foreign call, and copies the outputs out.

Threads: the placeholders and activations (with the kernels' scratch) are per run
(``CpuRegions`` from a ``StatePool``), the constants shared. Single-threaded code keeps no
other mutable state, so its runs overlap, each on the Python thread that called it (ctypes
releases the GIL). Two kinds of code keep state in their own globals and so run one call at
a time (``concurrent_runs`` False: the base class's lock): pooled code (``threads > 1``),
whose worker pool, claim counters and barrier are module globals that one generation of
workers uses for one call; and profiled code, whose cycle counts are a global array.
"""

from __future__ import annotations

import ctypes
import functools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from glow_core import progress
from glow_core.errors import BackendError
from glow_core.heap import trim_heap
from glow_core.huge_pages import zeroed_bytes
from glow_core.ir.instructions import IRFunction, Value, WeightKind, WeightVar
from glow_core.ir.memory import align
from glow_core.runtime.arena import POISON_BYTE
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.state_pool import StatePool
from glow_core.types import Type
from glow_cpu.body import ENTRY, TICKS
from glow_cpu.codegen import constant_root, constant_value
from glow_cpu.emit import Layout, Packed
from glow_cpu.jit import LoadedObject
from glow_cpu.packing import pack_into, packed_nbytes
from glow_cpu.workers import SHUTDOWN

_ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_SHUTDOWN_TYPE = ctypes.CFUNCTYPE(None)
Placed = dict[str, tuple[int, Type]]
"""Placeholder name -> its byte offset in the placeholders region and its type."""


@dataclass
class ProfileRow:
    """Time of one instruction in the last profiled run."""

    name: str
    kind: str
    seconds: float


class CpuFunction(CompiledFunction):
    """An IR function compiled to native code for this CPU."""

    def __init__(
        self,
        ir: IRFunction,
        loaded: LoadedObject,
        layout: Layout,
        steps: list[tuple[str, str]],
        threads: int,
        profile: bool,
        constants: np.ndarray | None = None,
    ):
        """``constants`` is the filled constant region (``constant_region(ir, layout)``) if
        the caller made it already: the backend fills it before MCJIT's symbol lookups
        here, which run LLVM's code again (``jit.llvm_in_use``)."""
        super().__init__(ir)
        plan = ir.memory_plan
        self.loaded = loaded  # keeps the code alive
        self.steps = steps
        self.threads = threads
        self.constants = constant_region(ir, layout) if constants is None else constants
        self.constants.flags.writeable = False  # shared by every run (the code only reads it)
        self._constants_address = self.constants.ctypes.data
        # What a state needs, without the IR (whose weights would stay alive with it).
        sizes = (plan.placeholder_bytes, activation_bytes(ir, layout, threads))
        inputs = {w.name: (plan.placeholder_offsets[w.name], w.type) for w in ir.inputs}
        outputs = {w.name: (plan.placeholder_offsets[w.name], w.type) for w in ir.outputs}
        self.states: StatePool[CpuRegions] = StatePool(lambda: CpuRegions(sizes, inputs, outputs))
        self.states.add(CpuRegions(sizes, inputs, outputs))
        self._entry = _ENTRY_TYPE(loaded.function(ENTRY))
        self._shutdown = _worker_shutdown(self, loaded)
        self._ticks = None
        if profile:
            address = loaded.global_address(TICKS)
            self._ticks = np.ctypeslib.as_array((ctypes.c_int64 * (len(steps) + 1)).from_address(address))
        # Pooled code (it has a shutdown) and profiled code keep run state in globals.
        self.concurrent_runs = self._shutdown is None and self._ticks is None
        self.last_profile: list[ProfileRow] = []
        self.compile_seconds = 0.0  # set by the backend: time in CpuBackend.compile
        self.cache_hit = False  # set by the backend: the object came from the disk cache
        self.kernel_count = 0  # set by the backend: distinct kernels the steps call

    def close(self) -> None:
        """Stop this function's worker threads now (they also stop when it is collected, or
        at exit); a later run starts them again. Waits for a run in flight: pooled code runs
        under the function's lock, and its workers must not stop mid-run."""
        if self._shutdown is not None:
            with self.serialized():
                self._shutdown()

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.states.borrow() as regions:
            for out in regions.outputs.values():
                out.reshape(-1).view(np.uint8).fill(POISON_BYTE)
            for name, value in inputs.items():
                regions.inputs[name][...] = value
            start = time.perf_counter()
            self._entry(self._constants_address, *regions.addresses)
            elapsed = time.perf_counter() - start
            if self._ticks is not None:  # profiled code runs one call at a time (see above)
                self.last_profile = self._profile(elapsed)
            return {name: view.copy() for name, view in regions.outputs.items()}

    def _profile(self, elapsed: float) -> list[ProfileRow]:
        """Cycle counts between instructions, scaled so they add up to the measured call."""
        ticks = self._ticks.astype(np.float64)
        deltas = np.diff(ticks)
        total = max(float(ticks[-1] - ticks[0]), 1.0)
        return [
            ProfileRow(name, kind, float(d) / total * elapsed)
            for (name, kind), d in zip(self.steps, deltas, strict=True)
        ]

    def kernel_times(self, inputs: dict[str, np.ndarray], runs: int) -> str:
        """``median_profile`` as the per-kind and per-instruction tables."""
        return _profile_table(self.median_profile(inputs, runs), None)

    def median_profile(self, inputs: dict[str, np.ndarray], runs: int) -> list[ProfileRow]:
        """Per-instruction medians of ``runs`` profiled runs after one warm-up, for checked
        inputs (the function must have been compiled with the ``profile`` option, which
        reads the cycle counter after each kernel)."""
        if self._ticks is None:
            raise BackendError(
                f"{self.name}: compiled without profiling; compile with options={{'profile': True}} "
                "(glow run --profile does)"
            )
        samples: dict[tuple[str, str], list[float]] = {}
        with self.serialized():  # no other thread's run between a run and its last_profile
            self.execute(inputs)
            for done in range(runs):
                progress.advance(done, runs, "runs")
                self.execute(inputs)
                for row in self.last_profile:
                    samples.setdefault((row.name, row.kind), []).append(row.seconds)
        return [ProfileRow(name, kind, float(np.median(s))) for (name, kind), s in samples.items()]

    def profile_table(self, top: int | None = None) -> str:
        """The last profiled run per instruction kind and per instruction, slowest first."""
        return _profile_table(self.last_profile, top)


class CpuRegions:
    """One run's placeholders and activations (with the kernels' scratch after them), 64-byte
    aligned as the code expects, and the views the run copies inputs into and outputs from."""

    def __init__(self, sizes: tuple[int, int], inputs: Placed, outputs: Placed):
        self.placeholders = zeroed_bytes(sizes[0])
        self.activations = zeroed_bytes(sizes[1])
        self.inputs = {name: self._view(offset, type) for name, (offset, type) in inputs.items()}
        self.outputs = {name: self._view(offset, type) for name, (offset, type) in outputs.items()}
        self.addresses = (self.placeholders.ctypes.data, self.activations.ctypes.data)

    def _view(self, offset: int, type: Type) -> np.ndarray:
        return self.placeholders[offset : offset + type.nbytes].view(type.dtype).reshape(type.shape)


def _profile_table(profile: list[ProfileRow], top: int | None) -> str:
    """Per instruction kind, then per instruction (the ``top`` slowest), in Markdown."""
    rows = sorted(profile, key=lambda r: -r.seconds)
    total = sum(r.seconds for r in rows) or 1.0
    by_kind: dict[str, float] = {}
    for r in rows:
        by_kind[r.kind] = by_kind.get(r.kind, 0.0) + r.seconds
    lines = ["| kind | ms | share |", "|---|--:|--:|"]
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {kind} | {seconds * 1e3:.3f} | {seconds / total:.1%} |")
    lines += ["", "| instruction | kind | ms | share |", "|---|---|--:|--:|"]
    for r in rows[:top]:
        lines.append(f"| {r.name} | {r.kind} | {r.seconds * 1e3:.3f} | {r.seconds / total:.1%} |")
    return "\n".join(lines)


def activation_bytes(ir: IRFunction, layout: Layout, threads: int) -> int:
    """Bytes of the activation region: the planned arena, then the kernels' scratch (shared,
    and one private part per thread)."""
    scratch = layout.shared_scratch + layout.private_scratch * threads
    return align(ir.memory_plan.arena_bytes) + scratch


def constant_region(ir: IRFunction, layout: Layout) -> np.ndarray:
    """The constant region the code reads, 64-byte aligned: the packed copies the kernels
    asked for (``Layout.packed``), then each constant a kernel reads as it is, at its
    ``Layout.constant_offsets`` (one read only through its packed copy is not stored).

    Packers write straight into the region where they can (``packing.WRITERS``). With
    ``ir.release_constants`` each constant's value is dropped from the IR after its last
    copy into the region, and the freed heap handed back to the system now and then, so the
    process never holds a weight twice: the region fills as the weights go."""
    arena = zeroed_bytes(layout.region_bytes)
    _fill_constants(ir, arena, layout)
    return arena


_TRIM_EVERY = 16 << 20
"""Bytes of released weights after which the heap's free pages go back to the system."""


def _fill_constants(ir: IRFunction, arena: np.ndarray, layout: Layout) -> None:
    by_name = {w.name: w for w in ir.weights if w.kind is WeightKind.CONSTANT}
    jobs: list[tuple[str, Callable[[], None]]] = []
    for name, offset in layout.constant_offsets.items():
        jobs.append((name, functools.partial(_copy_as_is, by_name[name], arena, offset)))
    for p in layout.packed:
        operand = ir.instrs[p.instr].operands[p.operand][0]
        root = constant_root(operand)
        assert root is not None, f"packed operand {p.operand} of instruction {p.instr} is not a constant"
        end = p.offset + packed_nbytes(p.packer, operand.type.shape, p.params)
        jobs.append((root[0].name, functools.partial(_pack, operand, p, arena[p.offset : end])))
    uses: dict[str, int] = {}
    for name, _ in jobs:
        uses[name] = uses.get(name, 0) + 1
    released = 0
    for name, job in jobs:
        job()
        uses[name] -= 1
        if ir.release_constants and uses[name] == 0 and by_name[name].value is not None:
            released += by_name[name].type.nbytes
            by_name[name].value = None
            if released >= _TRIM_EVERY:
                released = 0
                trim_heap()
    if ir.release_constants:
        trim_heap()


def _copy_as_is(weight: WeightVar, arena: np.ndarray, offset: int) -> None:
    data = np.ascontiguousarray(weight.value, dtype=weight.type.dtype).reshape(-1).view(np.uint8)
    arena[offset : offset + data.size] = data


def _pack(operand: Value, packed: Packed, out: np.ndarray) -> None:
    pack_into(packed.packer, constant_value(operand), packed.params, out)


def _worker_shutdown(owner: CpuFunction, loaded: LoadedObject):
    """The code's ``glow_shutdown`` (None on one thread: no workers), also registered to run
    when ``owner`` is collected or at exit. That finalizer holds ``loaded``, so the object
    code stays mapped until the workers have returned from it."""
    try:
        shutdown = _SHUTDOWN_TYPE(loaded.function(SHUTDOWN))
    except KeyError:
        return None
    weakref.finalize(owner, _join_workers, shutdown, loaded)
    return shutdown


def _join_workers(shutdown, loaded: LoadedObject) -> None:
    shutdown()
    del loaded  # the code may be unmapped from here on

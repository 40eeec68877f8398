"""The CPU backend: support derived from the emitter table, LLVM code cached on disk."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import time
from pathlib import Path

import platformdirs
from pydantic import Field

from glow_core.backend import Backend, BackendInfo, BackendOptions
from glow_core.ir.instructions import IRFunction
from glow_core.ir.printer import ir_to_text, memory_to_text
from glow_core.spec import PRIMITIVES
from glow_cpu import __version__
from glow_cpu.codegen import PROGRAM_PARALLEL_WORK, build_program
from glow_cpu.emit import Layout, Packed
from glow_cpu.jit import LoadedObject, ObjectCache, compile_object, host_target
from glow_cpu.kernels import EMIT
from glow_cpu.runtime import CpuFunction

CACHE_ENV = "GLOW_CPU_CACHE_DIR"


class CpuOptions(BackendOptions):
    """Options of the CPU backend."""

    threads: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=256)
    """Threads one inference runs on (default: every CPU); results do not depend on it."""
    profile: bool = False
    """Time every instruction (cycle counter read in the generated code); see
    ``CpuFunction.profile_table()`` after a run."""
    parallel_work: int = Field(default=PROGRAM_PARALLEL_WORK, ge=0)
    """A function with less parallel work than this (about one 16-lane FMA per unit; the
    default is about 60 us on one core) runs on one thread; 0 shares every kernel (tests)."""
    cache: bool = True
    """Keep object code on disk, keyed by a hash of the IR, plan, target and options."""
    cache_dir: str | None = None
    """Where the object cache lives; default: $GLOW_CPU_CACHE_DIR, else the user cache dir
    (``platformdirs.user_cache_dir("glow-cpu")``)."""


class CpuBackend(Backend):
    """LLVM kernels specialized to every instruction's shapes, one native entry point."""

    name = "cpu"
    Options = CpuOptions

    def info(self) -> BackendInfo:
        return BackendInfo(
            name=self.name,
            version=__version__,
            device="cpu",
            supports=supported(),
            priority=30,
            options_schema=CpuOptions.model_json_schema(),
        )

    def compile(self, ir: IRFunction, options: CpuOptions) -> CpuFunction:  # type: ignore[override]
        start = time.perf_counter()
        target = host_target()
        key = cache_key(ir, options, target.fingerprint)
        cache = ObjectCache(cache_directory(options)) if options.cache else None
        hit = cache.get(key) if cache else None
        if hit is not None:
            obj, meta = hit
            layout, steps = _layout_from_json(meta["layout"]), [tuple(s) for s in meta["steps"]]
        else:
            program = build_program(ir, options.threads, options.profile, options.parallel_work)
            obj = compile_object(program.llvm_ir, target)
            layout, steps = program.layout, program.steps
            if cache:
                cache.put(key, obj, {"layout": dataclasses.asdict(layout), "steps": steps})
        fn = CpuFunction(ir, LoadedObject(obj, target), layout, steps, options.threads, options.profile)
        fn.compile_seconds = time.perf_counter() - start
        fn.cache_hit = hit is not None
        return fn


def supported() -> dict[str, list[str]]:
    """Result element kinds per primitive, read from the emitter table (and the declarations,
    so nothing is claimed that glow does not define)."""
    return {
        kind: sorted(elem.name for elem in emitter.kinds & PRIMITIVES[kind].kinds)
        for kind, emitter in EMIT.items()
        if kind in PRIMITIVES
    }


def cache_directory(options: CpuOptions) -> Path:
    return Path(options.cache_dir or os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("glow-cpu"))


@functools.cache
def _source_digest() -> str:
    """A hash of this package's code: a changed kernel never runs stale cached objects."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(ir: IRFunction, options: CpuOptions, target: str) -> str:
    """Content hash of everything the object code depends on (not the weights' values:
    packed weights are recomputed at load time)."""
    views = [(i.name, getattr(i, "offset", 0)) for i in ir.instrs if i.kind == "TensorView"]
    parts = [
        ir_to_text(ir),
        memory_to_text(ir, ir.memory_plan),
        repr(views),
        f"threads={options.threads} profile={options.profile} parallel_work={options.parallel_work}",
        target,
        __version__,
        _source_digest(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _layout_from_json(data: dict) -> Layout:
    packed = [Packed(**p) for p in data.pop("packed")]
    return Layout(**data, packed=packed)

"""The CPU backend: support derived from the emitter table, LLVM code cached on disk."""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import itertools
import os
import time
from collections.abc import Mapping
from pathlib import Path

import llvmlite.binding as llvm
import platformdirs
from pydantic import Field

import glow_core
from glow_core.backend import Backend, BackendInfo, BackendOptions
from glow_core.bundles.code import BundleCode, BundleRequest
from glow_core.collector import collector_paused
from glow_core.cpus import usable_cpus
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.heap import trim_heap
from glow_core.ir.fingerprint import ir_fingerprint
from glow_core.ir.instructions import IRFunction
from glow_core.spec import NODES, PRIMITIVES
from glow_core.types import ElemKind
from glow_cpu import __version__
from glow_cpu.codegen import PROGRAM_PARALLEL_WORK, build_program
from glow_cpu.emit import Layout, Packed
from glow_cpu.jit import (
    CACHE_ENV,
    HostTarget,
    LoadedObject,
    ModuleCompiler,
    ObjectCache,
    host_target,
    llvm_in_use,
)
from glow_cpu.kernels import EMIT, expand_depthwise, int8_dot, recurrent, softmax, winograd
from glow_cpu.kernels.int8_dot import Int8Dot
from glow_cpu.kernels.int8_shape import keeps
from glow_cpu.registers import register_file, vnni_bits
from glow_cpu.reshape_sinking import sink_reshapes
from glow_cpu.runtime import CpuFunction, constant_region


class CpuOptions(BackendOptions):
    """Options of the CPU backend."""

    threads: int = Field(default_factory=usable_cpus, ge=1, le=256)
    """Threads one inference runs on (default: every CPU this process may use,
    ``glow_core.cpus.usable_cpus``); results do not depend on it."""
    parts_per_thread: int = Field(default=1, ge=1, le=64)
    """Each parallel kernel phase is cut into ``threads * parts_per_thread`` parts that the
    threads claim as they come free, so one slow part (uneven work, a descheduled thread)
    keeps the others busy with the rest; more parts mean more, smaller claims. For a given
    (threads, parts_per_thread) the cut is fixed, so results never depend on timing
    (docs/backends/cpu.md)."""
    profile: bool = False
    """Time every instruction (cycle counter read in the generated code); see
    ``CpuFunction.profile_table()`` after a run."""
    parallel_work: int = Field(default=PROGRAM_PARALLEL_WORK, ge=0)
    """A function with less parallel work than this (about one 16-lane FMA per unit; the
    default is about 60 us on one core) runs on one thread; 0 shares every kernel (tests)."""
    cache: bool = True
    """Keep object code on disk, keyed by an exact hash of the IR, plan, target, options and
    versions (docs/cache.md); a cache that cannot be used is skipped with one warning."""
    cache_dir: str | None = None
    """Where the object cache lives; default: $GLOW_CPU_CACHE_DIR, else the user cache dir
    (``platformdirs.user_cache_dir("glow-cpu")``)."""
    winograd: bool = True
    """3x3 stride-1 convolutions may use Winograd's F(2x2)/F(4x4) (per layer, docs/winograd.md)."""
    fuse_depthwise: bool = True
    """An inverted residual's 1x1 expansion and the 3x3 depthwise convolution reading it may
    run as one kernel, so the expanded tensor never reaches memory (on planes at least 112
    wide, ``kernels/expand_depthwise.py``)."""
    int8_dot: Int8Dot = "auto"
    """The int8 convolution and dense layers' multiply-add: ``quads`` (byte quads, one
    ``vpdpbusd`` on AVX-512 VNNI / AVX-VNNI, plain IR that computes the same elsewhere),
    ``pairs`` (int16 pairs, ``vpmaddwd``), or ``auto``: quads where the target has VNNI
    (docs/quantization.md)."""
    compile_threads: int = Field(default_factory=usable_cpus, ge=1, le=256)
    """Threads LLVM compiles the program's modules on (one per distinct kernel, and the body;
    default: every CPU this process may use). The object code is the same for any count
    (docs/performance.md)."""
    cache_max_bytes: int | None = Field(default=None, ge=1)
    """Bound on the object cache's size; the least recently used entries go first. Default:
    $GLOW_CPU_CACHE_SIZE (``500M``, ``2G``), else ``glow_core.cache.DEFAULT_MAX_BYTES``."""


class CpuBackend(Backend):
    """LLVM kernels specialized to every instruction's shapes, one native entry point."""

    name = "cpu"
    Options = CpuOptions

    def info(self) -> BackendInfo:
        # Built once per state of the emitter table (the options' JSON schema alone takes
        # pydantic 10 ms). Keyed on the table's entries and their choices: support is read
        # from it, and a table changed at run time (a plugin, a test withdrawing a kind, a
        # choice added to a kind) must show.
        table = tuple((kind, id(emitters), len(emitters.choices)) for kind, emitters in EMIT.items())
        return _info(self.name, table)

    def should_lower(self, node: Node) -> bool:
        """Integer layers with constant weights run whole on the int8 kernels; Gelu is one
        element-wise operation (``mathfn.gelu``), so it fuses into the MatMul before it; a
        float32 LayerNorm is one kernel (``kernels/layernorm.py``), and so is a float32
        Softmax over the last axis (``kernels/softmax.py``); a float32 LSTM, GRU or RNN with
        constant weights runs its steps in a loop of one kernel (``kernels/recurrent.py``)
        instead of being unrolled, so its compile time does not grow with the sequence."""
        if node.kind == "Gelu":
            return False
        if node.kind == "LayerNorm" and all(i.type.elem is ElemKind.float32 for i in node.inputs):
            return False
        if node.kind == "Softmax" and node.inputs[0].type.elem is ElemKind.float32:
            return not softmax.fused(node.inputs[0].type.shape, node.attrs["axis"])
        if node.kind in recurrent.KINDS:
            return not recurrent.kept(node)
        constant = [isinstance(i, Constant) for i in node.inputs]
        return not keeps(node.kind, [i.type for i in node.inputs], constant)

    def transform_post_lowering(self, fn: Function) -> bool:
        """Reshapes sunk below element-wise work (``reshape_sinking``): a transformer's bias and
        GELU then fuse into its dense layers' MatMul."""
        return sink_reshapes(fn)

    def bundle(  # type: ignore[override]
        self, functions: Mapping[str, IRFunction], options: CpuOptions, request: BundleRequest
    ) -> BundleCode:
        """One PIC object for this machine (or ``request.triple``), an entry point per function."""
        from glow_cpu.bundle import bundle_code

        return bundle_code(functions, options, request)

    def disk_cache(self) -> ObjectCache | None:
        """The object cache that compiles with default options use (``glow cache``)."""
        return object_cache(CpuOptions())

    def compile(self, ir: IRFunction, options: CpuOptions) -> CpuFunction:  # type: ignore[override]
        start = time.perf_counter()
        target = host_target()
        cache, key = _cache_entry(ir, options, target.fingerprint)
        with llvm_in_use():
            hit = _cached(cache, key) if cache else None
            if hit is not None:
                objects, layout, steps, kernels = hit
            else:
                objects, layout, steps, kernels = _compile_cold(ir, options, target)
                if cache:
                    meta = {"layout": dataclasses.asdict(layout), "steps": steps, "kernels": kernels}
                    meta["object_sizes"] = [len(o) for o in objects]
                    cache.put(key, b"".join(objects), meta)
            loaded = LoadedObject(objects, target)
            del objects
        # LLVM's pages are back (``llvm_in_use``) before the weights are packed: the packed
        # region (152 MB for ResNet-50, Winograd's filters 4x their 3x3 ones) never shares
        # the process with LLVM's code and working memory (docs/performance.md, round four).
        trim_heap()
        constants = constant_region(ir, layout)
        with llvm_in_use():  # MCJIT looks the entry points up: LLVM's code runs again
            fn = CpuFunction(ir, loaded, layout, steps, options.threads, options.profile, constants)
        fn.compile_seconds = time.perf_counter() - start
        fn.cache_hit = hit is not None
        fn.kernel_count = kernels
        return fn


def _compile_cold(
    ir: IRFunction, options: CpuOptions, target: HostTarget
) -> tuple[list[bytes], Layout, list[tuple[str, str]], int]:
    """Emit and compile ``ir``: the objects, layout, steps and kernel count.

    The body's module is handed to the pool as soon as it is emitted, and the IR builder's
    objects are collected while the pool finishes.
    """
    registers = register_file(target.triple, target.features, target.cpu)
    # LLVM compiles each kernel's module while the next ones are emitted.
    compiler = ModuleCompiler(target, options.compile_threads)
    dot = int8_dot.choose(options.int8_dot, vnni_bits(target.triple, target.features, target.cpu))
    with (
        compiler,
        winograd.enabled(options.winograd),
        expand_depthwise.enabled(options.fuse_depthwise),
        int8_dot.chosen(dot),
    ):

        def submit(name: str, llvm_ir: str) -> None:
            """Hand the kernel's module to the pool, then free the previous kernels' IR.

            The LLVM IR builder's objects are reference cycles, so only the collector frees
            them; it is paused during the emission (``collector_paused``), and a collection
            of its youngest generation here walks just the objects made since the last one:
            a kernel's IR, garbage once its text exists (``codegen._step``). Collected once
            at the end instead, every kernel's IR was held together beside LLVM's threads
            (ResNet-50: about 30 MB at the compile's peak; docs/performance.md, round four)."""
            compiler.submit(name, llvm_ir)
            gc.collect(0)

        # The IR builder's objects (hundreds of thousands, in reference cycles) stay alive
        # until the program is emitted: ResNet-50's emission spent 40% of its time in
        # collections that freed nothing (docs/performance.md).
        with collector_paused():
            program = build_program(
                ir,
                options.threads,
                options.profile,
                options.parallel_work,
                registers,
                parts_per_thread=options.parts_per_thread,
                submit=submit,
            )
            modules, layout = program.modules, program.layout
            steps, kernels = program.steps, program.kernels
            del program
            for name, text in modules:  # the body's, at least
                compiler.submit(name, text)
            # The body's IR is the garbage left. Its module was made before the first kernel,
            # so the kernels' collections moved it to the next generation, which is collected
            # too (it holds only what survived them: declarations, steps). The trim hands the
            # freed pages to LLVM's threads rather than keeping them in this thread's heap.
            gc.collect(1)
            trim_heap()
        objects = compiler.objects(modules)
    del modules  # the modules' text (megabytes) is not needed past this point
    # LLVM's threads each keep what they freed in their own malloc arena: the free pages go
    # back to the system (ResNet-50 with 2 compile threads: 729 -> 668 MB).
    trim_heap()
    return objects, layout, steps, kernels


@functools.lru_cache(maxsize=4)
def _info(name: str, table: tuple[tuple[str, int, int], ...]) -> BackendInfo:
    """The backend's facts for the emitter table ``table`` identifies (kind, emitters, choices)."""
    return BackendInfo(
        name=name,
        version=__version__,
        device="cpu",
        supports=supported(),
        priority=30,
        options_schema=CpuOptions.model_json_schema(),
    )


def supported() -> dict[str, list[str]]:
    """Result element kinds per primitive (and per high-level node with a kernel of its
    own), read from the emitter table and the declarations, so nothing is claimed that glow
    does not define."""
    declared = {**NODES, **PRIMITIVES}
    return {
        kind: sorted(elem.name for elem in emitter.kinds & declared[kind].kinds)
        for kind, emitter in EMIT.items()
        if kind in declared
    }


def cache_directory(options: CpuOptions) -> Path:
    return Path(options.cache_dir or os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("glow-cpu"))


def object_cache(options: CpuOptions) -> ObjectCache:
    """The object cache ``options`` name: its directory and size bound."""
    return ObjectCache(cache_directory(options), options.cache_max_bytes)


@functools.cache
def _source_digest() -> str:
    """A hash of this package's code: a changed kernel never runs stale cached objects."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.relative_to(Path(__file__).parent).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


_OPTIONS_NOT_IN_KEY = frozenset({"cache", "cache_dir", "cache_max_bytes", "compile_threads"})
"""Options that decide where code is kept or how fast it is made, not what it is; every
other option is keyed."""


def cache_key(ir: IRFunction, options: CpuOptions, target: str) -> str:
    """Content hash of everything the object code depends on.

    ``ir`` is serialized exactly (``glow_core.ir.fingerprint``: every attribute, type, view
    and the memory plan); constants are keyed by kind, type and presence but not by value:
    the emitters only ask whether an operand is a constant, and the weights they re-lay out
    (``Kernel.pack``) are recomputed from the IR at load time. An emitter that bakes a
    constant's value into the code must have that constant keyed here (``constant_values``).
    """
    extra = {
        "options": options.model_dump(exclude=set(_OPTIONS_NOT_IN_KEY)),
        "target": target,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "glow-core": glow_core.__version__,
        "glow-cpu": __version__,
        "glow-cpu source": _source_digest(),
    }
    return ir_fingerprint(ir, extra)[:32]


def _cache_entry(ir: IRFunction, options: CpuOptions, target: str) -> tuple[ObjectCache | None, str]:
    """The cache and this function's key in it; no cache when it is off or ``ir`` holds a
    value that cannot be keyed exactly (a glow bug, so it is said, but no reason to fail)."""
    if not options.cache:
        return None, ""
    cache = object_cache(options)
    try:
        return cache, cache_key(ir, options, target)
    except TypeError as err:
        cache.warn("used for this function", err)
        return None, ""


def _cached(cache: ObjectCache, key: str) -> tuple[list[bytes], Layout, list[tuple[str, str]], int] | None:
    """The objects, layout and steps stored under ``key`` (the objects one after the other in
    the entry's object file, their sizes in its metadata); an entry whose metadata does not
    decode is discarded (and so rebuilt by the caller)."""
    hit = cache.get(key)
    if hit is None:
        return None
    obj, meta = hit
    try:
        layout = _layout_from_json(meta["layout"])
        steps = [(str(name), str(kind)) for name, kind in meta["steps"]]
        kernels = int(meta["kernels"])
        objects = _split(obj, [int(size) for size in meta["object_sizes"]])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        cache.discard(key, f"its metadata does not decode ({type(err).__name__}: {err})")
        return None
    return objects, layout, steps, kernels


def _split(joined: bytes, sizes: list[int]) -> list[bytes]:
    """The objects ``joined`` holds back to back, by their ``sizes`` (which must add up)."""
    if any(size <= 0 for size in sizes) or sum(sizes) != len(joined):
        raise ValueError(f"object sizes {sum(sizes)} bytes in all, the entry holds {len(joined)}")
    starts = [0, *itertools.accumulate(sizes)]
    return [joined[a:b] for a, b in itertools.pairwise(starts)]


def _layout_from_json(data: dict) -> Layout:
    packed = [Packed(**p) for p in data.pop("packed")]
    return Layout(**data, packed=packed)

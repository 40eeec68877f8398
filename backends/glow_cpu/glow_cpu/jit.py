"""Host target, the O3 pipeline, object code, MCJIT loading and the on-disk object cache.

One path for cold and warm compiles: a module is optimized and turned into object code with
``TargetMachine.emit_object``; that object (fresh or read from the cache) is what MCJIT
loads. So a cache hit skips LLVM entirely, and what runs is always exactly what is cached.

A program is several modules (one per kernel, and the body), compiled independently on a
pool of threads (``compile_objects``): each module is parsed into an LLVM context of its own
and each thread has its own target machine, so nothing LLVM keeps per context or per
machine is shared, and llvmlite's calls release the GIL. What stays process-wide is LLVM's
command-line option that ``_code_generation_options`` sets, counted so that concurrent
compiles keep it set while any of them generates code; the global context (MCJIT loading,
the single-module paths below) is still used under ``_LOCK``. A module's object code does
not depend on the thread that built it, so the objects are the same for any thread count.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import hashlib
import heapq
import json
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import llvmlite.utils

# CacheWarning is re-exported: glow_cpu.jit.CacheWarning is what users filter on.
from glow_core.cache import CacheWarning as CacheWarning
from glow_core.cache import DiskCache, size_limit
from glow_core.errors import BackendError
from glow_core.heap import release_file_pages, trim_heap
from glow_cpu import llvm_unlocked as unlocked
from glow_cpu.body import ENTRY

# Symbols the generated code may call: threads (pthread_*), the scalar libm behind the
# llvm.log/llvm.pow intrinsics, and the mem* calls LLVM's idiom recognizer emits.
_EXTERNAL_SYMBOLS = (
    "pthread_create",
    "pthread_join",
    "pthread_mutex_lock",
    "pthread_mutex_unlock",
    "pthread_cond_wait",
    "pthread_cond_broadcast",
    "getpid",
    "sched_yield",
    "logf",
    "powf",
    "expf",
    "sinf",
    "cosf",
    "atanf",
    "floorf",
    # float64 math (computed in double, see kernels/mathfn.py)
    "exp",
    "log",
    "pow",
    "sin",
    "cos",
    "atan",
    "tanh",
    "erf",
    "floor",
    "memset",
    "memcpy",
    "memmove",
)
_LOCK = threading.Lock()
"""Held while LLVM's global context is used (parsing there, MCJIT loading)."""
_OPTION_LOCK = threading.Lock()
_GENERATING = 0  # code generations in flight under ``_code_generation_options``
_USERS_LOCK = threading.Lock()
_USERS = 0  # compiles inside ``llvm_in_use``
_IMPORTED_PAGES = True  # what the import made resident is still there (``llvm_in_use``)


class KernelCompileError(BackendError):
    """LLVM refused one module of a program (a glow bug): says which kernel and why."""


@dataclass(frozen=True)
class HostTarget:
    """The target machine for this CPU and the facts that key the cache."""

    machine: llvm.TargetMachine
    triple: str
    cpu: str
    features: str

    @property
    def fingerprint(self) -> str:
        return f"{self.triple}|{self.cpu}|{self.features}|llvmlite {llvmlite.__version__}"


@functools.cache
def host_target() -> HostTarget:
    """The host CPU with all its features; 512-bit vectors preferred (see docs/performance.md).

    LLVM tunes some AVX-512 CPUs to prefer 256-bit vectors; ``-prefer-256-bit`` lifts that
    for the auto-vectorizer, as the ``prefer-vector-width`` function attribute does.
    """
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    _register_external_symbols()
    triple = llvm.get_process_triple()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    features = ",".join(f for f in features.split(",") if f and "prefer-256-bit" not in f)
    features += ",-prefer-256-bit"
    return HostTarget(_machine(triple, cpu, features), triple, cpu, features)


def _machine(triple: str, cpu: str, features: str, opt: int = 3) -> llvm.TargetMachine:
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=opt, reloc="static", codemodel="jitdefault"
    )


QUICK_MODULE_BYTES = 4 * 1024**2
"""A module whose text is larger than this is compiled without optimization (LLVM's O0
pipeline and fast instruction selection). The only modules this large are the bodies of
unrolled recurrences: calls of the kernels, claim loops and barriers, no arithmetic worth
optimizing, while O3's time grows faster than their size. ``gru_text`` at batch 3 on two
threads has a 17.5 MB body: O3 took 68 s and its code generation 29 s of CPU, O1 52 s and
26 s, O0 0.1 s and 3.6 s (docs/performance.md). Kernels' modules stay far below it (the
largest, a Winograd layer's, is about 0.3 MB)."""


@dataclass(frozen=True)
class Level:
    """How one module is compiled: LLVM's module pipeline at ``pipeline`` (0-3), its loop and
    SLP vectorizers and unrolling on or off, code generation at ``machine`` (0-3; an AOT
    bundle links its modules into one object, which keeps the target's level)."""

    pipeline: int
    vectors: bool
    machine: int


FULL = Level(3, True, 3)
"""The kernels: O3 with the vectorizers (element-wise loops become vector code)."""
DISPATCH = Level(1, False, 0)
"""A program's body (the module defining the entry point): calls of the kernels with their
operands' addresses, the claim loops and the barriers, no arithmetic worth optimizing. O1
keeps its values in registers and its loops tight; O3 and its code generation cost 0.29,
0.43 and 0.60 CPU s on ResNet-50's, MobileNetV2's and ``gru_text``'s bodies, this 0.16,
0.14 and 0.21, and ``gru_text``'s loop body (13610 calls) ran within 0-2% of O3's at 1
and 2 threads (at O0 it was 2.2-2.4% slower; docs/performance.md)."""
QUICK = Level(0, False, 0)
"""A module past ``QUICK_MODULE_BYTES``: LLVM's O0 pipeline and fast instruction selection."""


def module_level(llvm_ir: str) -> Level:
    """How ``llvm_ir`` is compiled: ``QUICK`` past ``QUICK_MODULE_BYTES``, ``DISPATCH`` for
    the module that defines the entry point (the body), ``FULL`` otherwise. Read from the
    text alone, so a module gives the same object whoever compiles it (JIT, cache, bundle)."""
    if len(llvm_ir) > QUICK_MODULE_BYTES:
        return QUICK
    if f'define void @"{ENTRY}"(' in llvm_ir:
        return DISPATCH
    return FULL


def _register_external_symbols() -> None:
    libs = [ctypes.CDLL(None)]
    for name in ("m", "pthread"):
        path = ctypes.util.find_library(name)
        if path:
            libs.append(ctypes.CDLL(path))
    for symbol in _EXTERNAL_SYMBOLS:
        for lib in libs:
            try:
                address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
            except AttributeError:
                continue
            llvm.add_symbol(symbol, address)
            break


def optimize(module: llvm.ModuleRef, target: HostTarget, level: Level = FULL) -> None:
    """LLVM's module pipeline (new pass manager) at ``level``."""
    builder = _pipeline_builder(target.machine, level)
    builder.getModulePassManager().run(module, builder)


def _pipeline_builder(machine: llvm.TargetMachine, level: Level = FULL) -> Any:
    """The pass builder for ``machine`` at ``level``, the one place its options are set."""
    options = llvm.create_pipeline_tuning_options(speed_level=level.pipeline)
    options.loop_vectorization = level.vectors
    options.slp_vectorization = level.vectors
    options.loop_unrolling = level.vectors
    return llvm.create_pass_builder(machine, options)


def _optimized(llvm_ir: str, target: HostTarget) -> llvm.ModuleRef:
    """Parse, verify and optimize one module's text for ``target`` (caller holds _LOCK) at
    its ``module_level``'s pipeline, as the JIT does. An AOT bundle links its modules into
    one object, so there code generation stays at the machine's level for all of them; the
    O3 pipeline skipped was most of an unrolled body's cost (68 of 97 s)."""
    module = llvm.parse_assembly(llvm_ir)
    module.triple = target.triple
    module.data_layout = str(target.machine.target_data)
    module.verify()
    optimize(module, target, module_level(llvm_ir))
    return module


@contextlib.contextmanager
def _code_generation_options() -> Iterator[None]:
    """LLVM's pre-register-allocation machine scheduler off while glow-cpu's code is emitted.

    It hoists the broadcast loads of a register tile ahead of the FMAs that consume them
    (to hide their latency), which with 24 accumulators live runs out of the 32 vector
    registers: the blocked convolution's tile spilled accumulators to the stack every
    iteration (64@56 3x3: 60 GFLOP/s, 100 without the scheduler; docs/performance.md).
    The tiles are already written in issue order. LLVM options are process-wide: the first
    of concurrent code generations turns it off and the last one out restores the default
    for anyone else in the process."""
    global _GENERATING
    with _OPTION_LOCK:
        if _GENERATING == 0:
            llvm.set_option("", "-enable-misched=false")
        _GENERATING += 1
    try:
        yield
    finally:
        with _OPTION_LOCK:
            _GENERATING -= 1
            if _GENERATING == 0:
                llvm.set_option("", "-enable-misched=true")


def llvm_library() -> Path:
    """The shared library llvmlite loads LLVM from (where ``llvmlite.binding.ffi`` finds it)."""
    return Path(llvm.__file__).parent / llvmlite.utils.get_library_name()


@contextlib.contextmanager
def llvm_in_use() -> Iterator[None]:
    """A use of LLVM by a compile. The first use in the process and the last one out of any
    hand LLVM's clean code pages back (``glow_core.heap.release_file_pages``).

    ``import llvmlite.binding`` makes about 85 MB of LLVM's library resident (its static
    initializers are spread over it), most of which code generation never runs; and nothing
    after a compile runs any of it (the generated code calls libc and libm only). Handed
    back, those pages stop counting in the process's resident set until LLVM runs again,
    when what it touches faults back from the page cache. So another thread's compile in
    flight stays correct whoever releases; counting the uses only spares it the faults
    (docs/performance.md, "Footprint, round four")."""
    global _USERS, _IMPORTED_PAGES
    with _USERS_LOCK:
        _USERS += 1
        first, _IMPORTED_PAGES = _IMPORTED_PAGES, False
    if first:
        release_file_pages(llvm_library())
    try:
        yield
    finally:
        with _USERS_LOCK:
            _USERS -= 1
            last = _USERS == 0
        if last:
            release_file_pages(llvm_library())


_THREAD_MACHINES = threading.local()


def _thread_machine(target: HostTarget, opt: int = 3) -> llvm.TargetMachine:
    """This thread's own target machine for ``target`` at code generation level ``opt`` (a
    TargetMachine is not shared by concurrent code generations); made with the same options,
    so the code is the same."""
    machines = _THREAD_MACHINES.__dict__.setdefault("machines", {})
    machine = machines.get((target.fingerprint, opt))
    if machine is None:
        machine = _machine(target.triple, target.cpu, target.features, opt)
        machines[target.fingerprint, opt] = machine
    return machine


def _compile_module(llvm_ir: str, name: str, target: HostTarget) -> bytes:
    """Object code for one module's text, in a context of its own and this thread's target
    machine, the heavy steps outside llvmlite's lock (``llvm_unlocked``; callers keep
    ``_code_generation_options`` in force)."""
    level = module_level(llvm_ir)
    machine = _thread_machine(target, level.machine)
    try:
        module = unlocked.parse(llvm_ir, llvm.create_context())
        module.triple = target.triple
        module.data_layout = str(machine.target_data)
        unlocked.verify(module)
    except RuntimeError as err:
        raise KernelCompileError(
            f"LLVM refused the generated module of {name}: {str(err).strip()}. This is a glow-cpu "
            "bug; please report it with the model, or compile for another backend meanwhile"
        ) from None
    builder = _pipeline_builder(machine, level)
    unlocked.run_pipeline(builder.getModulePassManager(), module, builder)
    return unlocked.emit_object(machine, module)


def _compiled_and_trimmed(llvm_ir: str, name: str, target: HostTarget) -> bytes:
    """``_compile_module``, then the heap's free pages back to the system: LLVM frees a
    module's working memory into the compiling thread's own malloc arena, which keeps it, so
    without a trim each thread holds its largest module's high-water mark for the rest of
    the compile (ResNet-50 with 2 threads: the compile's peak about 10 MB lower; docs/performance.md,
    "Footprint, round four")."""
    try:
        return _compile_module(llvm_ir, name, target)
    finally:
        trim_heap()


class ModuleCompiler:
    """Compiles a program's modules on a pool of ``threads`` threads as they are handed over.

    ``submit`` queues a module while the caller goes on emitting the next one (Python holds
    the GIL while it emits; LLVM's calls release it), ``objects`` returns the object code of
    the modules a program finally consists of, in its order (compiling any not submitted;
    a submitted module the program does not use is dropped). A thread that comes free takes
    the largest module waiting (its text's length standing for its LLVM time), so the big
    convolution modules do not end up last, alone on one core, after emission is over:
    the pool's tail is short. One module's failure is a ``KernelCompileError`` naming it;
    leaving the ``with`` block cancels what has not started and waits for what has, so no
    thread outlives the compile. With one thread, modules compile on the calling thread,
    in ``objects``.
    """

    def __init__(self, target: HostTarget, threads: int):
        self.target = target
        self.pool = None if threads <= 1 else ThreadPoolExecutor(threads, thread_name_prefix="glow-llvm")
        self.futures: dict[tuple[str, str], Future[bytes]] = {}
        self.waiting: list[tuple[int, int, str, str]] = []  # heap: (-length, order, name, text)
        self.waiting_lock = threading.Lock()
        self.options = _code_generation_options()

    def __enter__(self) -> ModuleCompiler:
        self.options.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
        finally:
            self.options.__exit__(None, None, None)

    def submit(self, name: str, llvm_ir: str) -> None:
        """Queue module ``name`` for the pool (with one thread, nothing yet)."""
        if self.pool is None or (name, llvm_ir) in self.futures:
            return
        self.futures[name, llvm_ir] = Future()
        with self.waiting_lock:
            heapq.heappush(self.waiting, (-len(llvm_ir), len(self.futures), name, llvm_ir))
        self.pool.submit(self._compile_largest)

    def _compile_largest(self) -> None:
        """One pool task per submitted module: compile the largest one still waiting."""
        with self.waiting_lock:
            _, _, name, text = heapq.heappop(self.waiting)
        future = self.futures[name, text]
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(_compiled_and_trimmed(text, name, self.target))
        except BaseException as err:  # handed to whoever waits for this module
            future.set_exception(err)

    def objects(self, modules: Sequence[tuple[str, str]]) -> list[bytes]:
        """The object code of every ``(name, module text)``, in that order."""
        for name, text in modules:
            self.submit(name, text)
        if self.pool is None:
            return [_compiled_and_trimmed(text, name, self.target) for name, text in modules]
        return [self.futures[module].result() for module in modules]


def compile_objects(modules: Sequence[tuple[str, str]], target: HostTarget, threads: int) -> list[bytes]:
    """Object code for each ``(name, module text)``, in that order, built on up to ``threads``
    threads (``ModuleCompiler``)."""
    with ModuleCompiler(target, min(threads, len(modules))) as compiler:
        return compiler.objects(modules)


def compile_object(llvm_ir: str, target: HostTarget) -> bytes:
    """Object code for one module's text."""
    with _LOCK, _code_generation_options():
        return target.machine.emit_object(_optimized(llvm_ir, target))


def optimized_program(modules: Sequence[tuple[str, str]], target: HostTarget) -> llvm.ModuleRef:
    """A program's modules (``codegen.Program.modules``, the body last), each optimized on
    its own as ``compile_objects`` does, then linked into one (AOT bundles)."""
    with _LOCK:
        linked = _optimized(modules[-1][1], target)
        for _, text in modules[:-1]:
            linked.link_in(_optimized(text, target))
        return linked


def module_object(module: llvm.ModuleRef, target: HostTarget) -> bytes:
    """Object code for an already optimized module, with the code generation options of
    ``compile_object`` (so the same module gives the same machine code)."""
    with _LOCK, _code_generation_options():
        return target.machine.emit_object(module)


def assembly(llvm_ir: str, target: HostTarget) -> str:
    """The optimized module as x86 assembly (to check for zmm registers)."""
    with _LOCK, _code_generation_options():
        return target.machine.emit_assembly(_optimized(llvm_ir, target))


class LoadedObject:
    """Object code (one object, or a program's objects, which call each other) loaded by
    MCJIT; symbol addresses stay valid while this object lives."""

    def __init__(self, objects: bytes | Sequence[bytes], target: HostTarget):
        if isinstance(objects, bytes):
            objects = [objects]
        with _LOCK:
            empty = llvm.parse_assembly("")
            empty.triple = target.triple
            # The engine takes ownership of its target machine: each gets its own.
            machine = _machine(target.triple, target.cpu, target.features)
            self.engine = llvm.create_mcjit_compiler(empty, machine)
            for obj in objects:
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()

    def function(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(f"no function {name!r} in the compiled object")
        return address

    def global_address(self, name: str) -> int:
        address = self.engine.get_global_value_address(name)
        if not address:
            raise KeyError(f"no global {name!r} in the compiled object")
        return address


CACHE_ENV = "GLOW_CPU_CACHE_DIR"
"""Environment variable naming the object cache directory (when ``cache_dir`` is not given)."""

CACHE_SIZE_ENV = "GLOW_CPU_CACHE_SIZE"
"""Environment variable bounding the object cache (``500M``, ``2G``; when ``cache_max_bytes``
is not given; default ``glow_core.cache.DEFAULT_MAX_BYTES``)."""

_OBJECT, _META = ".o", ".json"


class ObjectCache(DiskCache):
    """Object code and its metadata on disk, keyed by a content hash, bounded in size.

    Each entry is ``KEY.o`` and ``KEY.json``; the object is written first and the metadata
    (which holds the object's checksum) last, so an entry whose metadata is there is whole.
    ``glow_core.cache.DiskCache`` does the writing, the size bound (least recently used
    entries go first) and the warnings: a directory that cannot be read or written gives one
    ``CacheWarning`` per directory per process and every compile goes on without it. An entry
    that is malformed (not JSON, the wrong shape, a truncated object) is deleted and rebuilt.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int | None = None):
        super().__init__(
            directory,
            name="glow-cpu object cache",
            max_bytes=size_limit(max_bytes, CACHE_SIZE_ENV),
            hint=f"Point the cpu option cache_dir or ${CACHE_ENV} at a writable directory, "
            "or pass cache=False.",
        )

    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """The object code and metadata stored under ``key``, or None (a miss, an unreadable
        cache, or a malformed entry, which is discarded)."""
        files = self.read(key, (_META, _OBJECT))
        if files is None:
            return None
        meta = _checked_meta(files[_META], files[_OBJECT])
        if meta is None:
            self.discard(key, "its metadata is malformed or its object does not match its checksum")
            return None
        return files[_OBJECT], meta

    def put(self, key: str, obj: bytes, meta: dict[str, Any]) -> None:
        """Store ``obj`` and ``meta`` under ``key``; a cache that cannot be written is skipped."""
        meta = {**meta, "object_sha256": hashlib.sha256(obj).hexdigest()}
        self.write(key, {_OBJECT: obj, _META: json.dumps(meta).encode()})


def _checked_meta(meta_bytes: bytes, obj: bytes) -> dict[str, Any] | None:
    """The metadata as a dict if it parses and its checksum is ``obj``'s, else None."""
    try:
        meta = json.loads(meta_bytes)
    except ValueError:  # not UTF-8 or not JSON
        return None
    if not isinstance(meta, dict) or meta.get("object_sha256") != hashlib.sha256(obj).hexdigest():
        return None
    return meta

"""AOT bundles: every function's program in one position-independent object.

Each function is built and optimized exactly as the JIT builds it (``build_program``,
``optimized_program``: every kernel's module on its own), so a bundle for this machine
runs the same machine code as ``glow_core.compile`` and gives bit-identical results. Then
every symbol but the entry point (and the worker pool's shutdown) is made internal, the
entry is renamed to the caller's C name, and the modules are linked into one, which LLVM's
linker does without clashes: internal symbols of the same name are renamed. The object is emitted for a PIC
target machine, so it links into executables and shared libraries alike.

With embedded weights, one more module holds them, a constant array ``NAME_weights``
(``.rodata``), linked in like the others.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping

import llvmlite.binding as llvm
import numpy as np

from glow_core.bundles.code import BundleCode, BundleRequest, EntryCode, join_weights
from glow_core.errors import BundleError
from glow_core.ir.instructions import IRFunction
from glow_core.ir.memory import ALIGNMENT
from glow_cpu.body import ENTRY
from glow_cpu.codegen import build_program
from glow_cpu.jit import HostTarget, host_target, module_object, optimized_program
from glow_cpu.kernels import expand_depthwise, int8_dot, winograd
from glow_cpu.registers import register_file, vnni_bits
from glow_cpu.runtime import activation_bytes, constant_region
from glow_cpu.workers import SHUTDOWN

_UNKNOWN_CPU = "is not a recognized processor"  # LLVM's warning for a CPU it does not know


def bundle_code(functions: Mapping[str, IRFunction], options, request: BundleRequest) -> BundleCode:
    """One object with an entry point per function (keyed by its C name); see the module."""
    if options.profile:
        raise BundleError("the profile option times JIT runs from Python; bundle without it")
    # A bundle runs on one thread unless asked: the caller's process owns the cores.
    threads = options.threads if "threads" in options.model_fields_set else 1
    target = object_target(request.triple, request.cpu)
    if threads > 1 and not target.triple.startswith("x86_64"):
        raise BundleError(
            f"threads={threads}: the worker pool's spin loop is written for x86-64 only; "
            f"bundle for {target.triple} on one thread (leave the threads option out)"
        )
    modules, entries = [], []
    for name, ir in functions.items():
        registers = register_file(target.triple, target.features, target.cpu)
        dot = int8_dot.choose(options.int8_dot, vnni_bits(target.triple, target.features, target.cpu))
        with (
            winograd.enabled(options.winograd),
            expand_depthwise.enabled(options.fuse_depthwise),
            int8_dot.chosen(dot),
        ):
            program = build_program(
                ir,
                threads,
                False,
                options.parallel_work,
                registers,
                parts_per_thread=options.parts_per_thread,
            )
        module = optimized_program(program.modules, target)
        shutdown = f"{name}_shutdown" if _defines(module, SHUTDOWN) else None
        _export(module, {ENTRY: name, **({SHUTDOWN: shutdown} if shutdown else {})})
        modules.append(module)
        entries.append(
            EntryCode(
                name=name,
                constants=constant_region(ir, program.layout).tobytes(),
                mutable_bytes=ir.memory_plan.placeholder_bytes,
                activation_bytes=activation_bytes(ir, program.layout, threads),
                threads=threads if shutdown else 1,
                shutdown=shutdown,
            )
        )
    weights, offsets = join_weights([e.constants for e in entries])
    if request.embed_weights:
        modules.append(_weights_module(request, weights, target))
    linked = modules[0]
    for module in modules[1:]:
        linked.link_in(module)
    linked.verify()
    obj = module_object(linked, target)
    threaded = any(e.shutdown for e in entries)
    return BundleCode(
        object=obj,
        triple=target.triple,
        cpu=target.cpu,
        features=target.features,
        entries=tuple(entries),
        weights=weights,
        constant_offsets=offsets,
        libraries=("m", "pthread") if threaded else ("m",),
    )


def object_target(triple: str | None, cpu: str | None) -> HostTarget:
    """A PIC target machine: this machine's (the JIT's CPU and features) by default, else
    ``triple`` with ``cpu`` (default ``generic``) and that CPU's own features."""
    host = host_target()
    if triple is None and cpu is None:
        return HostTarget(
            _pic_machine(host.triple, host.cpu, host.features), host.triple, host.cpu, host.features
        )
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    triple = triple or host.triple
    cpu = cpu or "generic"
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError as err:
        raise BundleError(
            f"unknown target triple {triple!r} ({err}); give an LLVM triple such as "
            "x86_64-linux-gnu or aarch64-linux-gnu"
        ) from None
    with _stderr_text() as said:
        machine = _pic_machine(triple, cpu, "")
        machine.emit_object(_empty_module(triple, machine))  # LLVM checks the CPU name here
        warnings = said()
    if _UNKNOWN_CPU in warnings:
        raise BundleError(
            f"unknown CPU {cpu!r} for {triple}; give a CPU name LLVM knows for that target "
            "(llc -march=... -mcpu=help lists them), or leave --cpu out for a generic one"
        )
    return HostTarget(machine, triple, cpu, "")


def _pic_machine(triple: str, cpu: str, features: str) -> llvm.TargetMachine:
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default"
    )


def _empty_module(triple: str, machine: llvm.TargetMachine) -> llvm.ModuleRef:
    module = llvm.parse_assembly("")
    module.triple = triple
    module.data_layout = str(machine.target_data)
    return module


def _defines(module: llvm.ModuleRef, name: str) -> bool:
    return any(f.name == name and not f.is_declaration for f in module.functions)


def _export(module: llvm.ModuleRef, exported: dict[str, str]) -> None:
    """Make every definition internal except ``exported`` (old name -> C name), renamed."""
    for value in [*module.functions, *module.global_variables]:
        if value.is_declaration:
            continue
        if value.name in exported:
            value.name = exported[value.name]
        else:
            value.linkage = llvm.Linkage.internal


def _weights_module(request: BundleRequest, weights: bytes, target: HostTarget) -> llvm.ModuleRef:
    """A module whose only global is ``NAME_weights``: the weights as a constant byte array
    (LLVM puts it in ``.rodata``), 64-byte aligned as the code expects of the constants."""
    symbol = f"{request.name}_weights"
    if weights:
        # Every byte as \XX, built with numpy: a Python loop over 100 MB would take minutes.
        table = np.array([list(f"\\{b:02X}".encode()) for b in range(256)], np.uint8)
        escaped = table[np.frombuffer(weights, np.uint8)].tobytes().decode("ascii")
        value = f'[{len(weights)} x i8] c"{escaped}"'
    else:
        value = "[1 x i8] zeroinitializer"  # C has no empty arrays either
    text = f'target triple = "{target.triple}"\n@{symbol} = constant {value}, align {ALIGNMENT}\n'
    module = llvm.parse_assembly(text)
    module.data_layout = str(target.machine.target_data)
    return module


@contextlib.contextmanager
def _stderr_text() -> Iterator[Callable[[], str]]:
    """What native code writes to file descriptor 2 meanwhile (LLVM warns there)."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield lambda: _read(sink)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _read(sink) -> str:
    sink.seek(0)
    return sink.read().decode(errors="replace")

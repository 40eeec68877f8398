"""The four heavy llvmlite calls of a module's compilation, callable from several threads.

llvmlite wraps every call into LLVM in one process-wide lock (``llvmlite.binding.ffi``),
so threads that compile modules through it take turns, even though LLVM itself compiles
modules in different contexts with different target machines concurrently (that is how
its own parallel code generation works). ``jit.compile_objects`` gives every module its
own context and every thread its own target machine, and calls the expensive steps here:
parsing, verifying, running the optimization pipeline and emitting object code, through
the very ctypes functions llvmlite wraps (same argument types; ctypes releases the GIL),
without its lock. Everything else (creating contexts, pass builders, freeing) still goes
through llvmlite's locked API.

Only objects the calling thread owns may be passed. If llvmlite no longer exposes the
wrapped function (``_cfn``), the locked one is used: slower with threads, never wrong.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
from llvmlite.binding import ffi


def _raw(name: str) -> Callable[..., Any]:
    """The ctypes function llvmlite's locked wrapper ``ffi.lib.NAME`` calls, else the wrapper."""
    wrapper = getattr(ffi.lib, name)
    return getattr(wrapper, "_cfn", wrapper)


def parse(llvm_ir: str, context: llvm.ContextRef) -> llvm.ModuleRef:
    """``llvm.parse_assembly(llvm_ir, context)`` outside the lock."""
    with ffi.OutputString() as error:
        handle = _raw("LLVMPY_ParseAssembly")(context, ctypes.c_char_p(llvm_ir.encode()), error)
        if error:
            raise RuntimeError(f"LLVM IR parsing error\n{error}")
    return llvm.ModuleRef(handle, context)


def verify(module: llvm.ModuleRef) -> None:
    """``module.verify()`` outside the lock."""
    with ffi.OutputString() as message:
        if _raw("LLVMPY_VerifyModule")(module, message):
            raise RuntimeError(str(message))


def run_pipeline(manager: Any, module: llvm.ModuleRef, builder: Any) -> None:
    """``manager.run(module, builder)`` (a new-pass-manager module pipeline) outside the lock."""
    _raw("LLVMPY_RunNewModulePassManager")(manager, module, builder)


def emit_object(machine: llvm.TargetMachine, module: llvm.ModuleRef) -> bytes:
    """``machine.emit_object(module)`` outside the lock."""
    with ffi.OutputString() as error:
        buffer = _raw("LLVMPY_TargetMachineEmitToMemory")(machine, module, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)

"""The OpenCL backend: its declared facts, its options, and compile = codegen + build + buffers.

This module imports nothing that imports pyopencl: the plugin registry loads every installed
backend's class to learn its name, and a process that compiles for cpu only should not pay
for pyopencl's import (about 0.1 s of a cold compile). The modules that need pyopencl are
imported by the methods that use them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Literal

from glow_core.backend import Backend, BackendInfo, BackendOptions
from glow_core.graph.node import Constant, Node
from glow_core.ir.instructions import IRFunction
from glow_opencl import __version__

if TYPE_CHECKING:
    from glow_opencl.executor import OpenCLFunction

PRIORITY = 20
"""Above the interpreter (10) when a device is listed; 0 when none is, so that picking the
best installed backend never lands on one that can only refuse to compile."""


class OpenCLOptions(BackendOptions):
    """OpenCL options."""

    device: str | None = None
    """Which device: 'P:D' (platform:device index, as `clinfo -l` lists them), 'P', or a
    case-insensitive substring of the platform or device name. Unset: $GLOW_OPENCL_DEVICE,
    else the first device that builds a kernel, GPUs first."""

    poison: bool = True
    """Fill outputs with 0xFF bytes (NaN) on the device before each run, so an element no
    kernel wrote shows instead of passing silently."""

    fuse: bool = True
    """Fuse runs of element-wise instructions into one kernel (off only to measure it)."""

    gemm: Literal["auto", "tiled", "vector"] = "auto"
    """GEMM and convolution kernels: "tiled" (local-memory tiles, for GPUs), "vector" (SIMD
    register blocks, for CPUs), "auto" (by the device type)."""


class OpenCLBackend(Backend):
    """Shape-specialized OpenCL C kernels, one program per compiled function, run with pyopencl."""

    name = "opencl"
    Options = OpenCLOptions

    def info(self) -> BackendInfo:
        """Facts about the default device (read, never built on: cheap, and it never raises)."""
        from glow_opencl.runtime import resolve_spec

        return _info(resolve_spec(None))

    def should_lower(self, node: Node) -> bool:
        """Integer layers with constant weights run whole on the int8 kernels (``int8.py``)."""
        from glow_opencl.int8 import keeps

        constant = [isinstance(i, Constant) for i in node.inputs]
        return not keeps(node.kind, [i.type for i in node.inputs], constant)

    def compile(self, ir: IRFunction, options: OpenCLOptions) -> OpenCLFunction:  # type: ignore[override]
        from glow_opencl.codegen import generate
        from glow_opencl.executor import OpenCLFunction
        from glow_opencl.runtime import select_device

        runtime = select_device(options.device)
        target = runtime.target
        if options.gemm != "auto":
            target = dataclasses.replace(target, gemm=options.gemm)
        program = generate(ir, target, fuse=options.fuse)
        return OpenCLFunction(ir, runtime, program, options.poison)


@functools.lru_cache(maxsize=8)
def _info(spec: str | None) -> BackendInfo:
    # Cached: the core asks for info() once per node when it checks support.
    from glow_opencl.codegen import supported_kinds
    from glow_opencl.runtime import BASE_KINDS, default_target

    target = default_target(spec)
    return BackendInfo(
        name=OpenCLBackend.name,
        version=__version__,
        device=target.kind if target else "none",
        supports=supported_kinds(target.kinds if target else BASE_KINDS),
        memory_bytes=target.global_mem_size if target else None,
        priority=PRIORITY if target else 0,
        options_schema=OpenCLOptions.model_json_schema(),
    )

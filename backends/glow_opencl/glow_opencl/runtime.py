"""OpenCL devices: discovery, selection, one context and queue per device, built programs.

A device is chosen by a spec string (option ``device``, else the environment variable
``GLOW_OPENCL_DEVICE``): ``"P:D"`` (platform and device index), ``"P"`` (any device of
platform P) or a case-insensitive substring of the platform or device name. Without a spec,
GPUs come first, then accelerators, then CPUs.

A device only counts once it has built and run a trivial kernel: an installed ICD can list a
device whose compiler cannot target this host (an old PoCL reports "unknown target CPU"), and
that must cost a note and a skip, not a crash mid-compile.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from glow_core.errors import BackendError
from glow_core.types import ElemKind
from glow_opencl.source import BYTE_KINDS, C_KINDS

ENV_VAR = "GLOW_OPENCL_DEVICE"
INSTALL_HINT = (
    "install an OpenCL runtime: on Debian/Ubuntu `apt-get install pocl-opencl-icd` (a CPU device), "
    "or your GPU vendor's OpenCL ICD; `clinfo` lists what the ICD loader sees"
)
_PROBE_SOURCE = "__kernel void glow_probe(__global int* x) { x[get_global_id(0)] = 7; }"
_TYPE_ORDER = {"gpu": 0, "accelerator": 1, "cpu": 2}
BASE_KINDS = (C_KINDS - {ElemKind.float16, ElemKind.float64}) | BYTE_KINDS
"""Element kinds every OpenCL device holds: float, the 8- to 64-bit integers, bool, and the
one-byte storage kinds (moved only). half is claimed with cl_khr_fp16 only, double with
cl_khr_fp64 only."""

log = logging.getLogger("glow_opencl")


@dataclass(frozen=True)
class Target:
    """What code generation reads: the device's facts and the GEMM kernel shape chosen for it."""

    name: str
    kind: str  # gpu, accelerator or cpu
    fp16: bool
    max_work_group_size: int
    local_mem_size: int
    global_mem_size: int
    vector_width: int  # the device's preferred float vector width
    gemm: str = "tiled"  # "tiled" (local memory, for GPUs) or "vector" (SIMD registers, for CPUs)
    fp64: bool = False  # cl_khr_fp64: double-precision kernels

    @property
    def kinds(self) -> frozenset[ElemKind]:
        """Element kinds this device runs: float16 only with cl_khr_fp16, float64 only with
        cl_khr_fp64."""
        optional = {ElemKind.float16: self.fp16, ElemKind.float64: self.fp64}
        return BASE_KINDS | {kind for kind, present in optional.items() if present}


@dataclass(frozen=True)
class DeviceRef:
    """One device of one platform, named by its indices as ``clinfo`` lists them."""

    platform_index: int
    device_index: int
    platform: cl.Platform = field(compare=False)
    device: cl.Device = field(compare=False)

    @property
    def label(self) -> str:
        where = f"[{self.platform_index}:{self.device_index}]"
        return f"{where} {self.platform.name.strip()} / {self.device.name.strip()}"

    @property
    def kind(self) -> str:
        t = self.device.type
        if t & cl.device_type.GPU:
            return "gpu"
        if t & cl.device_type.ACCELERATOR:
            return "accelerator"
        return "cpu"

    def target(self) -> Target:
        d = self.device
        extensions = d.extensions.split()
        return Target(
            name=d.name.strip(),
            kind=self.kind,
            fp16="cl_khr_fp16" in extensions,
            max_work_group_size=int(d.max_work_group_size),
            local_mem_size=int(d.local_mem_size),
            global_mem_size=int(d.global_mem_size),
            vector_width=int(d.preferred_vector_width_float),
            gemm="vector" if self.kind == "cpu" else "tiled",
            fp64="cl_khr_fp64" in extensions,
        )


def list_devices() -> list[DeviceRef]:
    """Every device of every platform the ICD loader sees; BackendError when there is none."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:
        raise BackendError(f"no OpenCL platform found ({_first_line(err)}); {INSTALL_HINT}") from None
    refs = []
    for p_index, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except cl.Error as err:
            log.warning("OpenCL platform %d (%s) lists no device: %s", p_index, platform.name, err)
            continue
        refs.extend(DeviceRef(p_index, d_index, platform, d) for d_index, d in enumerate(devices))
    if not refs:
        raise BackendError(f"OpenCL platforms exist but list no device; {INSTALL_HINT}")
    return refs


def _matches(ref: DeviceRef, spec: str) -> bool:
    spec = spec.strip()
    head, sep, tail = spec.partition(":")
    if head.isdigit() and (not sep or tail.isdigit()):
        same_platform = ref.platform_index == int(head)
        return same_platform and (not sep or ref.device_index == int(tail))
    text = f"{ref.platform.name} {ref.device.name}".lower()
    return spec.lower() in text


def candidates(spec: str | None) -> list[DeviceRef]:
    """Devices matching ``spec`` (all when None), GPUs first; BackendError when none match."""
    refs = list_devices()
    if spec:
        matching = [r for r in refs if _matches(r, spec)]
        if not matching:
            listed = "; ".join(r.label for r in refs)
            raise BackendError(
                f"OpenCL device {spec!r} matches no device; available: {listed}. "
                f"Give 'P:D' (platform:device index), 'P', or a name substring "
                f"(option `device` or ${ENV_VAR})"
            )
        refs = matching
    return sorted(refs, key=lambda r: (_TYPE_ORDER[r.kind], r.platform_index, r.device_index))


def resolve_spec(spec: str | None) -> str | None:
    """The option when given, else the environment variable, else None (automatic)."""
    return spec if spec else (os.environ.get(ENV_VAR) or None)


class Runtime:
    """A context and an in-order queue on one device, plus the programs built there."""

    def __init__(self, ref: DeviceRef):
        self.ref = ref
        self.context = cl.Context([ref.device])
        self.queue = cl.CommandQueue(self.context)
        self.target = ref.target()
        self.build_options = exact_math_options(ref.device)
        self._programs: dict[str, cl.Program] = {}

    def build(self, source: str, options: tuple[str, ...] = ()) -> cl.Program:
        """The built program for ``source``: once per process (and pyopencl caches binaries on disk)."""
        options = (*self.build_options, *options)
        key = hashlib.sha256((" ".join(options) + "\n" + source).encode()).hexdigest()
        program = self._programs.get(key)
        if program is None:
            with warnings.catch_warnings():
                # A non-empty build log (PoCL's "1 warning generated") is not an error.
                warnings.simplefilter("ignore", cl.CompilerWarning)
                try:
                    program = cl.Program(self.context, source).build(options=list(options))
                except cl.Error as err:
                    raise BackendError(
                        f"OpenCL build failed on {self.ref.label}: {str(err)[:2000]}"
                    ) from None
            self._programs[key] = program
        return program

    def probe(self) -> None:
        """Build and run a trivial kernel; raises cl.Error when this device cannot."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program = cl.Program(self.context, _PROBE_SOURCE).build()
        out = np.zeros(4, np.int32)
        buf = cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, out.nbytes)
        program.glow_probe(self.queue, (4,), None, buf)
        cl.enqueue_copy(self.queue, out, buf)
        if not (out == 7).all():
            raise cl.RuntimeError("the probe kernel ran but wrote wrong values")


CORRECTLY_ROUNDED = "-cl-fp32-correctly-rounded-divide-sqrt"


def exact_math_options(device: cl.Device) -> tuple[str, ...]:
    """Build options that make float division and sqrt correctly rounded where the device can.

    OpenCL lets a device's float ``/`` and ``sqrt`` be off by up to 2.5 and 3 ulp unless the
    program asks otherwise, and GPUs take that licence (NVIDIA's did: -2.5 / (5/255) came out
    just above -127.5 and quantized to 26 instead of 25, failing ONNX's DynamicQuantizeLinear
    test). The reference divides in IEEE arithmetic, so every program asks for it when the
    device reports the capability (CPU devices such as PoCL already round correctly).
    """
    try:
        config = device.single_fp_config
    except cl.Error:  # a driver that cannot say: leave the default
        return ()
    return (CORRECTLY_ROUNDED,) if config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT else ()


_RUNTIMES: dict[tuple[int, int], Runtime] = {}
_FAILED: dict[tuple[int, int], str] = {}


def _working_runtime(ref: DeviceRef) -> Runtime | str:
    """The device's runtime, or why it does not work (cached for the process either way)."""
    key = (ref.platform_index, ref.device_index)
    if key in _RUNTIMES:
        return _RUNTIMES[key]
    if key in _FAILED:
        return _FAILED[key]
    try:
        runtime = Runtime(ref)
        runtime.probe()
    except Exception as err:  # a broken driver raises anything from cl.Error to RuntimeError
        _FAILED[key] = f"{type(err).__name__}: {_first_line(err)}"
        log.warning("skipping OpenCL device %s: %s", ref.label, _FAILED[key])
        return _FAILED[key]
    _RUNTIMES[key] = runtime
    return runtime


def select_device(spec: str | None = None) -> Runtime:
    """The first device matching ``spec`` (or $GLOW_OPENCL_DEVICE) that builds and runs a kernel."""
    spec = resolve_spec(spec)
    tried = []
    for ref in candidates(spec):
        found = _working_runtime(ref)
        if isinstance(found, Runtime):
            return found
        tried.append(f"{ref.label}: {found}")
    raise BackendError(
        "no OpenCL device could build a trivial kernel; tried: " + "; ".join(tried) + f". {INSTALL_HINT}"
    )


@functools.lru_cache(maxsize=8)
def default_target(spec: str | None) -> Target | None:
    """Facts of the device ``select_device(spec)`` would try first, without building anything.

    ``info()`` reads this at plugin load, so it must be cheap and never raise: None when no
    device is listed at all.
    """
    try:
        return candidates(spec)[0].target()
    except Exception as err:
        log.info("no OpenCL device for BackendInfo: %s", _first_line(err))
        return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0][:300]

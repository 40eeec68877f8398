"""Memory budgets: how large one tensor and one compiled function's memory may be.

A malformed or hostile model can ask for any size with a few bytes (``ConstantOfShape``
of ``[2**40]``, a Tile repeat of ``2**31``, a declared input of ``2**40`` elements).
Every place that would allocate on a model's say-so checks the budget first, with the
size computed in Python integers (no int64 wrap-around), and refuses with a
``MemoryLimitError`` naming what was asked and how to raise the limit:

- each tensor: a declared input, an initializer, a graph node's result, a constant folded
  at load time (ONNX frontend) or by the graph optimizer, a buffer of the memory plan:
  at most ``max_tensor_bytes``;
- each memory plan (constants + inputs/outputs + activation arena, what a compiled
  function holds): at most ``max_arena_bytes``.

Defaults: ``max_arena_bytes`` is a quarter of the memory the process may use: the machine's
physical memory, or its address-space limit (``ulimit -v``, a sandbox's RLIMIT_AS) if lower
(compiling holds the constants twice, in the module and in the backend's blob, and a run
copies its outputs out, so a plan of a quarter peaks near half of it); ``max_tensor_bytes`` is
4 GiB, or half the arena budget when that is smaller (a folded constant that is also an
output is held twice in a plan). The environment variables
``GLOW_MAX_TENSOR_BYTES`` and ``GLOW_MAX_ARENA_BYTES`` (bytes, or with a unit: ``512MiB``,
``8GiB``) replace the defaults; ``compile(..., limits=MemoryLimits(...))``,
``load_onnx(..., limits=...)`` or ``with memory_limits(MemoryLimits(...)):`` replace them
for one call (the active budget is a context variable, so threads do not share it).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from glow_core.errors import GlowError, MemoryLimitError

TENSOR_ENV = "GLOW_MAX_TENSOR_BYTES"
ARENA_ENV = "GLOW_MAX_ARENA_BYTES"
DEFAULT_TENSOR_BYTES = 4 << 30
_FALLBACK_MEMORY = 16 << 30  # when the machine does not say how much memory it has
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str, what: str) -> int:
    """``"4096"``, ``"512MiB"``, ``"8G"``, ``"1.5GB"`` as a byte count (binary units)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text, re.IGNORECASE)
    if match is None:
        raise GlowError(f"{what} = {text!r} is not a size; give bytes, or a number with KiB, MiB, GiB, TiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_bytes(n: int) -> str:
    """A byte count for people: ``4.00 GiB (4294967296 bytes)``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit} ({n} bytes)"
    return f"{n} bytes"


def physical_memory() -> int:
    """The machine's physical memory in bytes (a fixed guess where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_MEMORY


@functools.cache
def _machine_memory() -> int:
    """``physical_memory()``, asked of the OS once: the defaults are looked up once per graph
    node created, and the machine's memory does not change under a running process (its
    address-space limit can, so that is read every time)."""
    return physical_memory()


def usable_memory() -> int:
    """The memory this process may use: physical memory, or its address-space limit when one
    is set lower (an allocation past it fails even though the machine has the memory)."""
    memory = _machine_memory()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return memory
    return memory if soft == resource.RLIM_INFINITY or soft <= 0 else min(memory, soft)


def _from_env(name: str, default: int) -> int:
    text = os.environ.get(name)
    return default if text is None or not text.strip() else parse_bytes(text, f"environment variable {name}")


def _default_arena_bytes() -> int:
    return _from_env(ARENA_ENV, usable_memory() // 4)


def _default_tensor_bytes() -> int:
    # Half the plan budget: a folded constant that is also an output is held twice in a plan.
    return _from_env(TENSOR_ENV, min(DEFAULT_TENSOR_BYTES, _default_arena_bytes() // 2))


def _how_to_raise(env: str, field_name: str) -> str:
    return (
        f"if the model is right, raise the limit: set {env} (e.g. {env}=16GiB) or pass "
        f"limits=MemoryLimits({field_name}=...) to glow_core.compile / load_onnx"
    )


@dataclass(frozen=True)
class MemoryLimits:
    """The budgets in bytes; a field left out takes its default (environment, else built in)."""

    max_tensor_bytes: int = field(default_factory=_default_tensor_bytes)
    max_arena_bytes: int = field(default_factory=_default_arena_bytes)

    def __post_init__(self) -> None:
        for name in ("max_tensor_bytes", "max_arena_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise GlowError(f"MemoryLimits.{name} must be a positive number of bytes, got {value!r}")

    def check_tensor(self, what: str, shape: Sequence[int], itemsize: float) -> None:
        """Refuse a tensor of ``shape`` (``itemsize`` bytes an element, fractions for 4-bit
        kinds) larger than ``max_tensor_bytes``; ``what`` names it in the message."""
        nbytes = math.ceil(math.prod(int(d) for d in shape) * itemsize)
        if nbytes > self.max_tensor_bytes:
            dims = "x".join(str(int(d)) for d in shape)
            raise MemoryLimitError(
                f"{what} would take {format_bytes(nbytes)} (shape [{dims}]), more than the "
                f"per-tensor budget of {format_bytes(self.max_tensor_bytes)}; the model may be "
                f"malformed; {_how_to_raise(TENSOR_ENV, 'max_tensor_bytes')}"
            )

    def check_total(self, what: str, nbytes: int, detail: str) -> None:
        """Refuse a memory plan of ``nbytes`` in all larger than ``max_arena_bytes``."""
        if nbytes > self.max_arena_bytes:
            raise MemoryLimitError(
                f"{what} needs {format_bytes(nbytes)} ({detail}), more than the memory budget of "
                f"{format_bytes(self.max_arena_bytes)}; {_how_to_raise(ARENA_ENV, 'max_arena_bytes')}"
            )


_ACTIVE: ContextVar[MemoryLimits | None] = ContextVar("glow_memory_limits", default=None)


def current_limits() -> MemoryLimits:
    """The budget in force: the innermost ``memory_limits`` block's, else the defaults."""
    active = _ACTIVE.get()
    if active is not None:
        return active
    # Asked once per graph node created (tens of thousands for an unrolled recurrence), so
    # the defaults are made once per state of what they are computed from.
    return _defaults(os.environ.get(TENSOR_ENV), os.environ.get(ARENA_ENV), usable_memory())


@functools.lru_cache(maxsize=16)
def _defaults(tensor_env: str | None, arena_env: str | None, memory: int) -> MemoryLimits:
    """The default budget for these environment variables and usable memory (the key)."""
    return MemoryLimits()


@contextmanager
def memory_limits(limits: MemoryLimits | None) -> Iterator[MemoryLimits]:
    """Make ``limits`` the budget inside the block (None keeps the one in force)."""
    if limits is None:
        yield current_limits()
        return
    token = _ACTIVE.set(limits)
    try:
        yield limits
    finally:
        _ACTIVE.reset(token)


__all__ = [
    "ARENA_ENV",
    "TENSOR_ENV",
    "MemoryLimits",
    "current_limits",
    "format_bytes",
    "memory_limits",
    "parse_bytes",
    "physical_memory",
    "usable_memory",
]

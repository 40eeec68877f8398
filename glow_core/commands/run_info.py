"""The lines ``glow run`` prints about what ran: which backend, how long compiling took, and
the latency of the run (``glow bench`` has the statistics)."""

from __future__ import annotations

from glow_core.runtime.compiled import CompiledFunction


def backend_label(backend: str | list[str] | None) -> str:
    """The backend(s) a compile used, by name: the best installed one when none was named."""
    if isinstance(backend, list):
        return ",".join(backend)
    if backend is not None:
        return backend
    from glow_core.plugins import get_backend

    return get_backend().info().name  # the registry keeps its choice: no second self-test


def compiled_line(compiled: CompiledFunction, backend: str, seconds: float) -> str:
    """``backend: cpu, compiled in 1.23 s (from the compile cache)``."""
    hit = getattr(compiled, "cache_hit", None)
    cached = " (from the compile cache)" if hit else ""
    return f"backend: {backend}, compiled in {seconds:.2f} s{cached}"


def latency_line(seconds: float) -> str:
    """The one run's latency, first-run effects included."""
    shown = f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"
    return f"latency: {shown} (one run; `glow bench` for statistics)"

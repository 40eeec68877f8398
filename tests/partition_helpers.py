"""Backends for partitioning tests: the interpreter restricted to a few primitives.

``Restricted(["Convolution", "MatMul"])`` plays a vendor backend that runs only
convolutions and matrix products; everything else must go to the next backend of the list.
Its numbers come from the interpreter, so results are checkable against any oracle.
"""

from __future__ import annotations

from collections.abc import Iterable

from glow_interpreter.backend import InterpreterBackend

from glow_core.backend import BackendInfo
from glow_core.plugins import hookimpl


class Restricted(InterpreterBackend):
    """The interpreter, declaring only ``primitives`` (and a peak FLOP figure for the cost model)."""

    def __init__(self, primitives: Iterable[str], name: str = "acme", peak_flops: float = 1e13):
        super().__init__()
        self.primitives = frozenset(primitives)
        self.name = name  # type: ignore[misc]
        self.peak_flops = peak_flops
        base = super().info()
        self._info = base.model_copy(
            update={
                "name": name,
                "supports": {k: v for k, v in base.supports.items() if k in self.primitives},
                "peak_flops": peak_flops,
            }
        )

    def info(self) -> BackendInfo:
        return self._info


def conv_matmul_backend(name: str = "acme", peak_flops: float = 1e13) -> Restricted:
    """A backend that runs only Convolution, MatMul and BatchMatMul."""
    return Restricted(("Convolution", "MatMul", "BatchMatMul"), name, peak_flops)


class AcmeBackend(Restricted):
    """The conv+matmul backend as a registrable class (the registry builds it with no arguments)."""

    name = "acme"  # the registry names a backend by its class, which must agree with info()

    def __init__(self) -> None:
        super().__init__(("Convolution", "MatMul", "BatchMatMul"), "acme", 1e13)


class AcmePlugin:
    """A plugin object offering ``acme``, for ``install_registry(acme=AcmePlugin())``."""

    @hookimpl
    def glow_backends(self) -> list[type]:
        return [AcmeBackend]

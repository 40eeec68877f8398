"""Every emitter, registered in ``glow_cpu.emit.EMIT`` by importing its module."""

from glow_cpu.emit import EMIT
from glow_cpu.kernels import conv, elementwise, indexing, linalg, movement, reduce  # noqa: F401 - registers emitters

__all__ = ["EMIT"]

"""Every emitter, registered in ``glow_cpu.emit.EMIT`` by importing its module."""

from glow_cpu.emit import EMIT
from glow_cpu.kernels import (  # noqa: F401 - registers emitters
    conv,
    elementwise,
    indexing,
    int8_add,
    int8_conv,
    layernorm,
    linalg,
    movement,
    quantize,
    recurrent,
    reduce,
    softmax,
    wide_linalg,
)

__all__ = ["EMIT"]

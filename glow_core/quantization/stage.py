"""Where precision modes meet the compile pipeline: the two graph passes it runs.

``quantize`` runs on the optimized graph before fuse-activations and lowering (the graph
``glow_core.profile`` records names from); ``convert-precision`` runs on the lowered graph,
where support is a lookup per primitive. Both read the backend's declared support only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from glow_core.backend import Backend
from glow_core.graph.function import Function
from glow_core.quantization.convert import QuantizationReport, quantize_function
from glow_core.quantization.mode import FLOAT_MODES, Precision, Quantize
from glow_core.quantization.precision import convert_precision
from glow_core.types import ElemKind


def declared_support(backend: Backend) -> Callable[[str, ElemKind], bool]:
    """(primitive kind, element kind) -> whether ``backend`` declares a kernel for it."""
    supports = backend.info().supports
    return lambda kind, elem: elem.name in supports.get(kind, ())


@dataclass
class PrecisionOutcome:
    """What a precision mode did to one function (kept on ``Stages``)."""

    quantization: QuantizationReport | None = None
    kept_float32: list[str] = field(default_factory=list)


def quantize_pass(mode: Quantize, backend: Backend, outcome: PrecisionOutcome) -> Callable[[Function], bool]:
    def run(fn: Function) -> bool:
        outcome.quantization = quantize_function(fn, mode, declared_support(backend))
        return bool(outcome.quantization.quantized)

    return run


def precision_pass(
    precision: Precision, backend: Backend, outcome: PrecisionOutcome
) -> Callable[[Function], bool] | None:
    """The convert-precision pass for ``"fp16"``/``"bf16"``, None for other modes."""
    if not isinstance(precision, str):
        return None
    target = FLOAT_MODES[precision]

    def run(fn: Function) -> bool:
        before = len(fn)
        outcome.kept_float32 = convert_precision(fn, target, declared_support(backend))
        return len(fn) != before

    return run

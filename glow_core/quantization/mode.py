"""What a caller asks for: ``precision=Quantize(...)``, ``"fp16"``, ``"bf16"`` or None."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from glow_core.quantization.calibration import CALIBRATIONS, Calibration
from glow_core.quantization.profile import Profile
from glow_core.quantization.schema import QuantizationError, Schema, check_schema
from glow_core.types import ElemKind

FLOAT_MODES = {"fp16": ElemKind.float16, "bf16": ElemKind.bfloat16}
"""Precision modes that run float32 compute in a narrower float kind."""


@dataclass(frozen=True)
class Quantize:
    """Quantize a float model to int8 from a calibration ``profile``.

    ``schema``: how activations map to integers (``glow_core.quantization.schema``);
    ``per_channel``: one weight scale per output channel instead of one per tensor;
    ``calibration``: how a value's range is read from its profile; ``keep``: node kinds
    (``Softmax``) or node names that stay float.
    """

    profile: Profile | str | os.PathLike
    schema: Schema = "asymmetric"
    per_channel: bool = False
    calibration: Calibration = "minmax"
    keep: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        check_schema(self.schema)
        if self.calibration not in CALIBRATIONS:
            raise QuantizationError(
                f"unknown calibration {self.calibration!r}; choose one of {', '.join(CALIBRATIONS)}"
            )
        if not isinstance(self.profile, Profile):
            object.__setattr__(self, "profile", Profile.load(self.profile))
        object.__setattr__(self, "keep", frozenset(_names(self.keep)))

    @property
    def loaded_profile(self) -> Profile:
        assert isinstance(self.profile, Profile)
        return self.profile


Precision = Quantize | str | None


def check_precision(precision: object) -> Precision:
    """``precision`` if glow knows it, else a QuantizationError listing the choices."""
    if precision is None or isinstance(precision, Quantize) or precision in FLOAT_MODES:
        return precision  # type: ignore[return-value]
    raise QuantizationError(
        f"unknown precision {precision!r}: give None, {', '.join(map(repr, FLOAT_MODES))} "
        "or glow_core.Quantize(profile, ...)"
    )


def _names(keep: Iterable[str] | str) -> Iterable[str]:
    return [keep] if isinstance(keep, str) else keep

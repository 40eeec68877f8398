"""Quantization and precision modes: profile a float model, then compile it in int8 from
the profile, or in float16/bfloat16 (docs/quantization.md).

One job per module: ``schema`` (scale and offset choice), ``profile`` (the profile and
its file), ``profiling`` (recording one), ``calibration`` (a range from a profile),
``arithmetic`` (integer layers as graph fragments), ``convert`` (the quantize pass),
``precision`` (the fp16/bf16 pass), ``mode`` (what callers ask for), ``stage`` (the hook
into the compile pipeline).
"""

from glow_core.quantization.calibration import CALIBRATIONS
from glow_core.quantization.mode import FLOAT_MODES, Quantize
from glow_core.quantization.profile import Profile, ProfileError
from glow_core.quantization.profiling import profile
from glow_core.quantization.schema import SCHEMAS, QuantizationError, QuantParams, choose_params

__all__ = [
    "CALIBRATIONS",
    "FLOAT_MODES",
    "SCHEMAS",
    "Profile",
    "ProfileError",
    "QuantParams",
    "QuantizationError",
    "Quantize",
    "choose_params",
    "profile",
]

"""The runtime: the compile pipeline and compiled functions."""

from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.pipeline import STAGES, Stages, compile, compile_stages, load_model
from glow_core.runtime.session import Session, SpecializationError, load

__all__ = [
    "STAGES",
    "CompiledFunction",
    "Session",
    "SpecializationError",
    "Stages",
    "compile",
    "compile_stages",
    "load",
    "load_model",
]

"""The runtime: the compile pipeline and compiled functions."""

from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.pipeline import STAGES, Stages, compile, compile_stages, load_model

__all__ = ["STAGES", "CompiledFunction", "Stages", "compile", "compile_stages", "load_model"]

"""The interpreter's steps: each primitive instruction runs its declared reference semantics."""

from __future__ import annotations

import numpy as np

from glow_core.errors import VerifyError
from glow_core.ir.instructions import Instr
from glow_core.runtime.arena import ArenaFunction, Step


class InterpretedFunction(ArenaFunction):
    """An IR function run on host arenas by calling each primitive's ``reference``."""

    def make_step(self, instr: Instr, dest: np.ndarray, sources: list[np.ndarray]) -> Step:
        spec, attrs = instr.spec, instr.attrs
        if spec is None or not spec.is_primitive:
            raise VerifyError(f"interpreter cannot run {instr.kind!r} ({instr.name!r}): not a primitive")

        def step() -> None:
            result = spec.evaluate(sources, attrs)
            # Cast to the dest kind (the reference may compute in float64), then store.
            dest[...] = np.asarray(result).astype(dest.dtype, copy=False).reshape(dest.shape)

        return step

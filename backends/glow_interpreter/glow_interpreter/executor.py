"""The interpreter's steps: each primitive instruction runs its declared reference semantics;
a high-level node it was asked to keep runs its lowering with those references."""

from __future__ import annotations

import functools

import numpy as np

from glow_core.errors import VerifyError
from glow_core.ir.instructions import Instr
from glow_core.lowering.evaluate import node_semantics
from glow_core.runtime.arena import ArenaFunction, Step


class InterpretedFunction(ArenaFunction):
    """An IR function run on host arenas by calling each primitive's ``reference``."""

    def make_step(self, instr: Instr, dest: np.ndarray, sources: list[np.ndarray]) -> Step:
        spec, attrs = instr.spec, instr.attrs
        if spec is None:
            raise VerifyError(f"interpreter cannot run {instr.kind!r} ({instr.name!r}): no declaration")
        if spec.is_primitive:
            semantics = functools.partial(spec.evaluate, attrs=attrs)
        else:  # a high-level node the backend was asked to keep
            semantics = node_semantics(spec, [v.type for v in instr.sources], attrs)

        def step() -> None:
            result = semantics(sources)
            # Cast to the dest kind (the reference may compute in float64), then store.
            dest[...] = np.asarray(result).astype(dest.dtype, copy=False).reshape(dest.shape)

        return step

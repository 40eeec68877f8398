"""The table of mutations: each registered under a kebab-case name a recipe replays by.

A mutation is a function ``(model, rng) -> str | None``: it edits the ModelProto in place and
returns a one-line description of what it did, or None when the model offers it nothing to
damage. It draws every choice from its own ``random.Random``, so (name, seed) replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import onnx

Mutation = Callable[[onnx.ModelProto, random.Random], str | None]
MUTATIONS: dict[str, Mutation] = {}


def mutation(name: str) -> Callable[[Mutation], Mutation]:
    """Register ``fn`` as mutation ``name`` (refusing a second registration)."""

    def register(fn: Mutation) -> Mutation:
        if name in MUTATIONS:
            raise TypeError(f"mutation {name!r} registered twice")
        MUTATIONS[name] = fn
        return fn

    return register

"""The table of mutations: each registered under a kebab-case name a recipe replays by.

A mutation is a function ``(model, rng) -> str | None``: it edits the ModelProto in place and
returns a one-line description of what it did, or None when the model offers it nothing to
damage. It draws every choice from its own ``random.Random``, so (name, seed) replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import onnx

from glow_core.pipeline.data import registrar

Mutation = Callable[[onnx.ModelProto, random.Random], str | None]
MUTATIONS: dict[str, Mutation] = {}


mutation = registrar(MUTATIONS, "mutation")
"""``@mutation("kebab-name")``: register a mutation under the name recipes replay it by."""

"""Protobuf-level mutations of an ONNX model: the damage a broken exporter or a corrupt file does.

Each mutation is a function ``(model, rng) -> str | None`` registered under a kebab-case name
in ``MUTATIONS``: it edits the ModelProto in place and returns a one-line description of what
it did, or None when the model offers it nothing to damage (no attributes, no initializer...).
A mutation draws every choice from its own ``random.Random``, so a recipe that lists
(name, seed) pairs replays exactly and can be shrunk one step at a time (``minimize``).

One module per family of damage: ``tensors``, ``attributes``, ``nodes``, ``interface`` (the
graph's inputs and outputs, opsets, IR version); ``hostile`` holds the values they choose
from and ``registry`` the table. Importing this package registers them all.
"""

from __future__ import annotations

import random

import onnx

from fuzz.mutate import attributes, interface, nodes, tensors  # noqa: F401 - register every mutation
from fuzz.mutate.registry import MUTATIONS, Mutation, mutation

__all__ = ["MUTATIONS", "Mutation", "apply", "damage_bytes", "mutation"]


def apply(model: onnx.ModelProto, steps: list[tuple[str, int]]) -> list[str]:
    """Apply ``steps`` (mutation name, seed) in order; the descriptions of those that applied."""
    done = []
    for name, seed in steps:
        description = MUTATIONS[name](model, random.Random(seed))
        if description is not None:
            done.append(f"{name}: {description}")
    return done


def damage_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """The serialized model truncated or with a few bytes flipped (a corrupt file)."""
    if rng.random() < 0.5 and data:
        cut = rng.randrange(len(data))
        return data[:cut], f"bytes: truncated to {cut} of {len(data)}"
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if damaged:
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    return bytes(damaged), "bytes: bits flipped"

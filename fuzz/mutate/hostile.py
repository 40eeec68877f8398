"""Hostile values and the model's parts to aim them at, shared by every family of mutations.

Values are chosen to be hostile, not random: zero, negative, huge and NaN numbers, empty and
overlong lists, undefined element types, names that do not exist or exist twice.
"""

from __future__ import annotations

import math
import random

import onnx
from onnx import TensorProto

HOSTILE_INTS = (0, -1, -2, 1, 2, 3, 7, 2**31 - 1, -(2**31), 2**40, 2**62, 10**9)
HOSTILE_DIMS = (0, -1, -7, 1, 2, 3, 64, 2**20, 2**31, 2**40, 2**62)
HOSTILE_FLOATS = (math.nan, math.inf, -math.inf, 0.0, -1.0, 1e-30, 1e30, -3.5, 0.5)
# UNDEFINED (0), every real TensorProto type, and numbers no version of ONNX defines.
ELEM_TYPES = (0, *sorted(TensorProto.DataType.values()), 42, 99, -3)
DEFINED_TYPES = tuple(sorted(t for t in TensorProto.DataType.values() if t))


def value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def tensor_names(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output if o]


def hostile_list(rng: random.Random, current: list, scalars: tuple) -> list:
    choice = rng.randrange(5)
    if choice == 0:
        return []
    if choice == 1:
        return [*current, rng.choice(scalars)]
    if choice == 2 and current:
        return current[:-1]
    if choice == 3 and current:
        edited = list(current)
        edited[rng.randrange(len(edited))] = rng.choice(scalars)
        return edited
    return [rng.choice(scalars) for _ in range(rng.randint(1, 9))]

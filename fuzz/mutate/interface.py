"""Mutations of the graph's interface (its inputs and outputs) and of the model's versions."""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto

from fuzz.mutate.hostile import HOSTILE_DIMS
from fuzz.mutate.registry import mutation


@mutation("graph-output")
def graph_output(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """Graph outputs duplicated, removed, or naming an unknown tensor or a graph input."""
    outputs = model.graph.output
    choice = rng.randrange(4)
    if choice == 0 and outputs:
        outputs.add().CopyFrom(rng.choice(outputs))
        return f"graph output {outputs[-1].name!r} listed twice"
    if choice == 1:
        del outputs[:]
        return "every graph output removed"
    if not outputs:
        return None
    target = rng.choice(outputs)
    inputs = [v.name for v in model.graph.input]
    target.name = rng.choice(inputs) if choice == 2 and inputs else "no_such_tensor"
    return f"a graph output renamed {target.name!r}"


@mutation("graph-input")
def graph_input(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A graph input removed or duplicated, or an initializer declared as an input too."""
    inputs = model.graph.input
    choice = rng.randrange(3)
    if choice == 0 and inputs:
        index = rng.randrange(len(inputs))
        name = inputs[index].name
        del inputs[index]
        return f"graph input {name!r} removed"
    if choice == 1 and inputs:
        inputs.add().CopyFrom(rng.choice(inputs))
        return f"graph input {inputs[-1].name!r} listed twice"
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    inputs.append(
        onnx.helper.make_tensor_value_info(tensor.name, TensorProto.FLOAT, [rng.choice(HOSTILE_DIMS)])
    )
    return f"initializer {tensor.name!r} also declared as an input of another shape"


@mutation("opset")
def opset(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """The default-domain opset changed to an old, future, absurd or negative version, or removed."""
    imports = model.opset_import
    choice = rng.randrange(3)
    if choice == 0 and imports:
        del imports[:]
        return "every opset import removed"
    if choice == 1:
        imports.add().CopyFrom(onnx.helper.make_opsetid("", rng.choice([1, 13, 17, 21])))
        return "the default domain imported twice"
    for entry in imports:
        if entry.domain in ("", "ai.onnx"):
            entry.version = rng.choice([0, 1, 6, 7, 9, 12, 13, 16, 18, 21, 23, 99, 10**6, -1])
            return f"default opset = {entry.version}"
    return None


@mutation("ir-version")
def ir_version(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """The IR version changed to an old, future or absurd value."""
    model.ir_version = rng.choice([0, 1, 3, 4, 7, 11, 13, 99, -1])
    return f"ir_version = {model.ir_version}"

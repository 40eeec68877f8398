"""A fuzz case as a recipe: a base model, mutation steps, and the seed of its inputs.

A recipe is a small JSON-able dict, so a case is named by it, shipped to a worker by it,
replayed from it, and shrunk by editing it (``minimize``):

    {"id": "7/42", "base": {"kind": "generated", "seed": 123} | {"kind": "zoo", "name": "small_cnn"}
                           | {"kind": "file", "path": "..."},
     "mutations": [["attribute-value", 991], ...], "bytes": None | seed, "truncate": None | n,
     "feeds": seed}

``recipe(seed, index)`` draws the recipe of case ``index`` of campaign ``seed`` without
building anything (cheap, in the parent); ``build(recipe)`` makes the model (in a worker).
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from fuzz import generate, mutate

Recipe = dict[str, Any]

ZOO = ("small_cnn", "mobilenetv2_block", "transformer_encoder")
"""Zoo models mutated: the small ones whose load, run and reference evaluation take well under
a second (mlp carries 7 MB of weights, resnet_bottleneck a 64-channel 56x56 plane)."""

# (share of cases, base kind, whether mutated): valid generated models reach the numerics,
# mutants of both reach the validation, a few corrupt files reach the protobuf parser.
MIX = ((0.30, "generated", False), (0.35, "generated", True), (0.35, "zoo", True))
BYTES_DAMAGE = 0.04


def recipe(seed: int, index: int) -> Recipe:
    """The recipe of case ``index`` in the campaign of ``seed`` (deterministic)."""
    rng = random.Random(f"{seed}/{index}")
    draw, kind, mutated = rng.random(), "generated", False
    for share, kind, mutated in MIX:  # noqa: B007 - the last matching entry is the choice
        if draw < share:
            break
        draw -= share
    base: dict[str, Any] = (
        {"kind": "zoo", "name": rng.choice(ZOO)}
        if kind == "zoo"
        else {"kind": "generated", "seed": rng.getrandbits(32)}
    )
    names = sorted(mutate.MUTATIONS)
    steps = [[rng.choice(names), rng.getrandbits(32)] for _ in range(rng.randint(1, 3))] if mutated else []
    damage = rng.getrandbits(32) if rng.random() < BYTES_DAMAGE else None
    return {
        "id": f"{seed}/{index}",
        "base": base,
        "mutations": steps,
        "bytes": damage,
        "truncate": None,
        "feeds": rng.getrandbits(32),
    }


def file_recipe(path: str | Path) -> Recipe:
    """A recipe that runs a saved model file as it is (regression models, reproducers)."""
    return {
        "id": str(path),
        "base": {"kind": "file", "path": str(Path(path).resolve())},  # workers run in a scratch directory
        "mutations": [],
        "bytes": None,
        "truncate": None,
        "feeds": 0,
    }


def build(recipe: Recipe) -> tuple[bytes, list[str]]:
    """The serialized model of ``recipe`` and one line per step that changed it."""
    base = recipe["base"]
    if base["kind"] == "file":
        data = Path(base["path"]).read_bytes()
        if not recipe["mutations"] and recipe["truncate"] is None:
            return data, [f"file {base['path']}"]
        model = onnx.load_from_string(data)
        lines = [f"file {base['path']}"]
    elif base["kind"] == "zoo":
        model = _zoo(base["name"])
        lines = [f"zoo {base['name']}"]
    else:
        model = generate.generate(random.Random(base["seed"]))
        lines = [f"generated from seed {base['seed']}: " + " -> ".join(n.op_type for n in model.graph.node)]
    lines += mutate.apply(model, [tuple(step) for step in recipe["mutations"]])
    if recipe["truncate"] is not None:
        lines.append(truncate(model, recipe["truncate"]))
    data = model.SerializeToString()
    if recipe["bytes"] is not None:
        data, line = mutate.damage_bytes(data, random.Random(recipe["bytes"]))
        lines.append(line)
    return data, lines


@functools.cache
def _zoo_bytes(name: str) -> bytes:
    from glow_core.model_zoo import MODELS

    return MODELS[name]().SerializeToString()


def _zoo(name: str) -> onnx.ModelProto:
    return onnx.load_from_string(_zoo_bytes(name))


def truncate(model: onnx.ModelProto, keep: int) -> str:
    """Keep the first ``keep`` nodes; the graph outputs become the last kept node's outputs
    (typed by shape inference where it can) and unused inputs and initializers go."""
    del model.graph.node[keep:]
    last = model.graph.node[-1] if model.graph.node else None
    names = [o for o in last.output if o] if last is not None else []
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        known = {v.name: v for v in [*inferred.value_info, *inferred.output]}
    except Exception:  # a damaged model: outputs stay untyped floats
        known = {}
    outputs = [known.get(n) or helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names]
    del model.graph.output[:]
    model.graph.output.extend(outputs)
    used = {i for n in model.graph.node for i in n.input} | set(names)
    kept_inputs = [v for v in model.graph.input if v.name in used]
    del model.graph.input[:]
    model.graph.input.extend(kept_inputs)
    kept_inits = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept_inits)
    return f"truncated after node {keep}"

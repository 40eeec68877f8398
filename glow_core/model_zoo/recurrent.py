"""Recurrent models: a stacked bidirectional GRU over a token sequence."""

from __future__ import annotations

import math

import onnx

from glow_core.model_zoo.layers import INPUT_NAME, GraphBuilder


def _bidirectional_gru(b: GraphBuilder, x: str, name: str, in_features: int, hidden: int) -> str:
    """ONNX GRU over ``[seq, batch, in_features]`` in both directions, torch.nn.GRU-style
    (``linear_before_reset=1``, weights and biases ~ U(-1/sqrt(hidden), 1/sqrt(hidden))),
    its two directions' outputs concatenated per step: ``[seq, batch, 2 * hidden]``."""
    bound = 1.0 / math.sqrt(hidden)
    weight = b.uniform(f"{name}.W", [2, 3 * hidden, in_features], -bound, bound)
    recurrence = b.uniform(f"{name}.R", [2, 3 * hidden, hidden], -bound, bound)
    bias = b.uniform(f"{name}.B", [2, 6 * hidden], -bound, bound)
    y = b.node(
        "GRU",
        [x, weight, recurrence, bias],
        name,
        hidden_size=hidden,
        direction="bidirectional",
        linear_before_reset=1,
    )
    # Y is [seq, directions, batch, hidden]: put the directions next to the features.
    y = b.node("Transpose", [y], f"{name}/transpose", perm=[0, 2, 1, 3])
    return b.node("Reshape", [y, b.int64s(f"{name}/shape", [0, 0, 2 * hidden])], f"{name}/concat")


def gru_text(
    batch: int = 1, seed: int = 0, seq: int = 40, features: int = 64, hidden: int = 32, layers: int = 9
) -> onnx.ModelProto:
    """A stacked bidirectional GRU over an embedded token sequence: ``layers`` GRU layers,
    ``seq`` steps, input ``[batch, seq, features]``, output ``[batch, seq, 2 * hidden]``.

    The ONNX importer unrolls every step of every direction of every layer (9 x 2 x 40 = 720
    steps at the defaults), so this is the model whose compile time shows whether a backend's
    code grows with the graph's node count or with its distinct work.
    """
    if layers < 1 or seq < 1:
        raise ValueError(f"layers={layers} and seq={seq} must be at least 1")
    b = GraphBuilder(seed)
    y = b.node("Transpose", [INPUT_NAME], "to_time_major", perm=[1, 0, 2])
    width = features
    for layer in range(layers):
        y = _bidirectional_gru(b, y, f"gru{layer}", width, hidden)
        width = 2 * hidden
    y = b.node("Transpose", [y], "to_batch_major", perm=[1, 0, 2])
    return b.build("gru_text", [batch, seq, features], y, [batch, seq, width])

"""Fold inference BatchNormalization into the Conv before it, in an ONNX model.

The int8 recipe (``quantized_models.onnxruntime_qdq``) quantizes a float model with
onnxruntime's tools, whose pre-processing folds BatchNorm into the convolution on some
onnxruntime versions and not on others (1.30 left MobileNetV2's 52 BatchNorms in place, 1.32
folds them). A BatchNorm left in place becomes a layer of its own in the QDQ model, with an
extra rounding step and an extra pass over memory for every engine that runs it. Folding it
here, before onnxruntime sees the model, makes the QDQ model the same on every version, so a
speed or accuracy figure means the same thing everywhere.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper


def fold_conv_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` where every ``Conv -> BatchNormalization`` pair whose operands are
    initializers and whose Conv output feeds only that BatchNorm is one Conv:
    ``W' = W * s`` per output channel and ``b' = (b - mean) * s + beta``, with
    ``s = gamma / sqrt(var + eps)``, computed in float64. The model is otherwise unchanged
    (the Conv takes the BatchNorm's output name, so consumers and graph outputs still match)."""
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    graph = folded.graph
    inits = {t.name: t for t in graph.initializer}
    uses = Counter(name for node in graph.node for name in node.input)
    uses.update(o.name for o in graph.output)
    producer = {out: node for node in graph.node for out in node.output}
    dropped: list[onnx.NodeProto] = []
    for bn in graph.node:
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1:
            continue
        conv = producer.get(bn.input[0])
        params = bn.input[1:5]
        if conv is None or conv.op_type != "Conv" or uses[bn.input[0]] != 1:
            continue
        if not all(p in inits for p in params) or conv.input[1] not in inits:
            continue
        if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits:
            continue
        epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (numpy_helper.to_array(inits[p]).astype(np.float64) for p in params)
        scale = gamma / np.sqrt(var + epsilon)
        weight_init = inits[conv.input[1]]
        weight = numpy_helper.to_array(weight_init)
        bias = (
            numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64)
            if len(conv.input) > 2 and conv.input[2]
            else np.zeros(weight.shape[0])
        )
        new_weight = weight.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        new_bias = (bias - mean) * scale + beta
        weight_name, bias_name = f"{conv.input[1]}.bn_folded", f"{bn.output[0]}.bn_folded_bias"
        graph.initializer.append(numpy_helper.from_array(new_weight.astype(weight.dtype), weight_name))
        graph.initializer.append(numpy_helper.from_array(new_bias.astype(weight.dtype), bias_name))
        del conv.input[1:]
        conv.input.extend([weight_name, bias_name])
        conv.output[0] = bn.output[0]
        dropped.append(bn)
    for bn in dropped:
        graph.node.remove(bn)
    _drop_unused_initializers(graph)
    return folded


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove initializers no node reads any more (the replaced filters and BatchNorm
    parameters), so the folded model carries each weight once."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)

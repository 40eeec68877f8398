"""Seeded ONNX reference models for tests, demos and benchmarks.

The compiler needs realistic graphs to exercise its frontends, passes and
backends without depending on torch or on downloaded model files.  Every
builder here emits a self-contained ``onnx.ModelProto`` (opset 17, float32)
whose weights come from ``numpy.random.default_rng(seed)`` so the same call
always yields byte-identical models.

Weights are scaled (He-normal convolutions, ``1/sqrt(fan_in)`` dense layers,
damped last batch-norm in each residual branch) so activations stay O(1) even
through ResNet-50.  That keeps relative-error comparisons between two
implementations meaningful: outputs are never all zeros, NaN or enormous.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from glow_core.model_zoo.cnn import (
    mlp,
    mobilenetv2,
    mobilenetv2_block,
    resnet50,
    resnet_bottleneck,
    small_cnn,
    vgg19,
)
from glow_core.model_zoo.inception import inception_v3
from glow_core.model_zoo.recurrent import gru_text
from glow_core.model_zoo.transformer import bert_mini, transformer_encoder

__all__ = [
    "LARGE_MODELS",
    "MODELS",
    "bert_mini",
    "gru_text",
    "inception_v3",
    "mlp",
    "mobilenetv2",
    "mobilenetv2_block",
    "random_inputs",
    "resnet50",
    "resnet_bottleneck",
    "small_cnn",
    "transformer_encoder",
    "vgg19",
]

MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "mlp": mlp,
    "small_cnn": small_cnn,
    "resnet_bottleneck": resnet_bottleneck,
    "mobilenetv2_block": mobilenetv2_block,
    "mobilenetv2": mobilenetv2,
    "transformer_encoder": transformer_encoder,
    "bert_mini": bert_mini,
    "resnet50": resnet50,
    "vgg19": vgg19,
    "inception_v3": inception_v3,
    "gru_text": gru_text,
}

LARGE_MODELS = frozenset({"resnet50", "vgg19", "inception_v3"})
"""Models with ImageNet-sized weights (100 MB and more): tests run them only where marked
slow, and reference backends take seconds per inference on them."""


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Standard-normal feeds for every real graph input (initializers excluded).

    Shapes must be fully static: benchmark and comparison harnesses need a
    concrete feed, and guessing a value for a symbolic dimension would hide
    a model bug.
    """
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in tensor_type.shape.dim]
        if any(dim < 0 for dim in dims):
            raise ValueError(f"input {value.name!r} has a non-static shape {dims}")
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        feeds[value.name] = rng.standard_normal(dims).astype(dtype)
    return feeds

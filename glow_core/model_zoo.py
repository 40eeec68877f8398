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

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "LARGE_MODELS",
    "MODELS",
    "bert_mini",
    "gru_text",
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

_OPSET = 17
# IR version 8 is the lowest that opset 17 allows and is accepted by every
# onnxruntime release we target, so models stay loadable by older runtimes.
_IR_VERSION = 8
_INPUT_NAME = "input"
_OUTPUT_NAME = "output"
_BN_EPSILON = 1e-5
_LN_EPSILON = 1e-5
# Gamma range for a batch-norm that ends a residual branch: small so the
# residual sum grows slowly with depth instead of exploding.
_RESIDUAL_GAMMA = (0.1, 0.3)
_DEFAULT_GAMMA = (0.5, 1.0)

Shape = Sequence[int]


class _GraphBuilder:
    """Accumulates nodes and initializers while handing out unique names.

    Each node produces one tensor named after the node itself, so node and
    tensor names are unique together and a model's topology can be read from
    its names alone (``layer1.0/conv1`` feeds ``layer1.0/bn1`` ...).
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._used: set[str] = {_INPUT_NAME, _OUTPUT_NAME}
        self._scalars: dict[float, str] = {}

    def unique(self, name: str) -> str:
        """Return ``name`` or a suffixed variant that has not been used yet."""
        candidate, index = name, 1
        while candidate in self._used:
            candidate = f"{name}_{index}"
            index += 1
        self._used.add(candidate)
        return candidate

    def const(self, name: str, value: np.ndarray) -> str:
        """Register ``value`` as an initializer and return its tensor name."""
        unique_name = self.unique(name)
        self._initializers.append(numpy_helper.from_array(value, unique_name))
        return unique_name

    def scalar(self, value: float) -> str:
        """Return a shared rank-0 float32 constant (reused across nodes)."""
        if value not in self._scalars:
            array = np.array(value, dtype=np.float32)
            self._scalars[value] = self.const(f"const_{value:g}", array)
        return self._scalars[value]

    def int64s(self, name: str, values: Sequence[int]) -> str:
        """Register a 1-D int64 initializer, e.g. a Reshape target shape."""
        return self.const(name, np.asarray(values, dtype=np.int64))

    def node(self, op_type: str, inputs: Sequence[str], name: str, **attrs: object) -> str:
        """Append one single-output node and return its output tensor name."""
        unique_name = self.unique(name)
        self._nodes.append(helper.make_node(op_type, list(inputs), [unique_name], name=unique_name, **attrs))
        return unique_name

    def normal(self, name: str, shape: Shape, std: float) -> str:
        """Initializer drawn from N(0, std^2)."""
        data = self.rng.standard_normal(tuple(shape)) * std
        return self.const(name, data.astype(np.float32))

    def uniform(self, name: str, shape: Shape, low: float, high: float) -> str:
        """Initializer drawn from U(low, high)."""
        data = self.rng.uniform(low, high, size=tuple(shape))
        return self.const(name, data.astype(np.float32))

    def build(self, graph_name: str, input_shape: Shape, result: str, output_shape: Shape) -> onnx.ModelProto:
        """Rename ``result`` to ``output`` and wrap everything in a model.

        Renaming at the end lets helpers stay unaware of which tensor ends up
        being the graph output.
        """
        for node in self._nodes:
            node.output[:] = [_OUTPUT_NAME if out == result else out for out in node.output]
            node.input[:] = [_OUTPUT_NAME if inp == result else inp for inp in node.input]
        graph = helper.make_graph(
            self._nodes,
            graph_name,
            [helper.make_tensor_value_info(_INPUT_NAME, TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(_OUTPUT_NAME, TensorProto.FLOAT, list(output_shape))],
            initializer=self._initializers,
        )
        model = helper.make_model(
            graph,
            producer_name="glow-py.model_zoo",
            opset_imports=[helper.make_opsetid("", _OPSET)],
        )
        model.ir_version = _IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


# --------------------------------------------------------------------------
# Layer helpers
# --------------------------------------------------------------------------


def _small_bias(b: _GraphBuilder, name: str, size: int) -> str:
    """Bias ~ N(0, 0.01^2): present to exercise bias paths, too small to dominate."""
    return b.normal(name, [size], 0.01)


def _conv(
    b: _GraphBuilder,
    x: str,
    name: str,
    channels: tuple[int, int],
    kernel: int,
    stride: int = 1,
    group: int = 1,
    bias: bool = False,
) -> str:
    """Square Conv with "same"-style padding ``kernel // 2`` and He-normal weights."""
    cin, cout = channels
    fan_in = (cin // group) * kernel * kernel
    inputs = [
        x,
        b.normal(
            f"{name}.weight",
            [cout, cin // group, kernel, kernel],
            math.sqrt(2.0 / fan_in),
        ),
    ]
    if bias:
        inputs.append(_small_bias(b, f"{name}.bias", cout))
    pad = kernel // 2
    return b.node(
        "Conv",
        inputs,
        name,
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
        group=group,
    )


def _batch_norm(
    b: _GraphBuilder,
    x: str,
    name: str,
    channels: int,
    gamma: tuple[float, float] = _DEFAULT_GAMMA,
) -> str:
    """Inference-mode BatchNormalization with plausible running statistics."""
    scale = b.uniform(f"{name}.scale", [channels], *gamma)
    beta = b.normal(f"{name}.bias", [channels], 0.1)
    mean = b.normal(f"{name}.running_mean", [channels], 0.1)
    var = b.uniform(f"{name}.running_var", [channels], 0.5, 1.5)
    return b.node("BatchNormalization", [x, scale, beta, mean, var], name, epsilon=_BN_EPSILON)


def _relu6(b: _GraphBuilder, x: str, name: str) -> str:
    """ReLU6 as Clip(0, 6); opset 17 takes the bounds as inputs, not attributes."""
    return b.node("Clip", [x, b.scalar(0.0), b.scalar(6.0)], name)


def _conv_bn(
    b: _GraphBuilder,
    x: str,
    prefix: str,
    index: str,
    channels: tuple[int, int],
    kernel: int,
    stride: int = 1,
    group: int = 1,
    act: str | None = "relu",
    gamma: tuple[float, float] = _DEFAULT_GAMMA,
) -> str:
    """Conv + BatchNormalization + optional activation ("relu" or "relu6").

    Names follow torchvision (``prefix/conv1``, ``prefix/bn1``, ``prefix/relu1``)
    so graphs are easy to line up against the PyTorch reference.
    """
    y = _conv(b, x, f"{prefix}/conv{index}", channels, kernel, stride, group)
    y = _batch_norm(b, y, f"{prefix}/bn{index}", channels[1], gamma)
    if act == "relu":
        return b.node("Relu", [y], f"{prefix}/relu{index}")
    if act == "relu6":
        return _relu6(b, y, f"{prefix}/relu6_{index}")
    if act is not None:
        raise ValueError(f"unknown activation {act!r}")
    return y


def _gemm(b: _GraphBuilder, x: str, name: str, in_features: int, out_features: int) -> str:
    """Dense layer as Gemm(transB=1), matching torch.nn.Linear's weight layout."""
    weight = b.normal(f"{name}.weight", [out_features, in_features], 1.0 / math.sqrt(in_features))
    bias = _small_bias(b, f"{name}.bias", out_features)
    return b.node("Gemm", [x, weight, bias], name, transB=1)


def _linear(b: _GraphBuilder, x: str, name: str, in_features: int, out_features: int) -> str:
    """Dense layer on rank-3 activations as MatMul([in, out]) + Add(bias)."""
    weight = b.normal(f"{name}.weight", [in_features, out_features], 1.0 / math.sqrt(in_features))
    y = b.node("MatMul", [x, weight], f"{name}/matmul")
    return b.node("Add", [y, _small_bias(b, f"{name}.bias", out_features)], f"{name}/add")


def _layer_norm(b: _GraphBuilder, x: str, name: str, features: int) -> str:
    """LayerNormalization over the last axis with near-identity affine params."""
    scale = b.uniform(f"{name}.scale", [features], 0.8, 1.2)
    bias = b.normal(f"{name}.bias", [features], 0.1)
    return b.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=_LN_EPSILON)


def _gelu(b: _GraphBuilder, x: str, name: str) -> str:
    """Exact GELU spelled out as x * 0.5 * (1 + erf(x / sqrt(2))).

    Exporters emit this primitive pattern, so the compiler's fusion passes
    need to see it rather than a single Gelu op.
    """
    y = b.node("Div", [x, b.scalar(math.sqrt(2.0))], f"{name}/div")
    y = b.node("Erf", [y], f"{name}/erf")
    y = b.node("Add", [y, b.scalar(1.0)], f"{name}/add")
    y = b.node("Mul", [x, y], f"{name}/mul")
    return b.node("Mul", [y, b.scalar(0.5)], f"{name}/mul_half")


def _classifier_head(b: _GraphBuilder, x: str, in_features: int, classes: int) -> str:
    """GlobalAveragePool -> Flatten -> Gemm, the usual CNN tail."""
    y = b.node("GlobalAveragePool", [x], "avgpool")
    y = b.node("Flatten", [y], "flatten", axis=1)
    return _gemm(b, y, "fc", in_features, classes)


def _bottleneck(b: _GraphBuilder, x: str, prefix: str, in_channels: int, width: int, stride: int) -> str:
    """torchvision ResNet v1.5 Bottleneck (stride on the 3x3 conv).

    A downsample branch is added whenever the shape changes, exactly as
    torchvision does, so both the standalone block and ResNet-50 share it.
    """
    out_channels = width * 4
    y = _conv_bn(b, x, prefix, "1", (in_channels, width), 1)
    y = _conv_bn(b, y, prefix, "2", (width, width), 3, stride)
    y = _conv_bn(b, y, prefix, "3", (width, out_channels), 1, act=None, gamma=_RESIDUAL_GAMMA)
    identity = x
    if stride != 1 or in_channels != out_channels:
        down = f"{prefix}/downsample"
        identity = _conv(b, x, f"{down}/conv", (in_channels, out_channels), 1, stride)
        identity = _batch_norm(b, identity, f"{down}/bn", out_channels)
    y = b.node("Add", [y, identity], f"{prefix}/add")
    return b.node("Relu", [y], f"{prefix}/relu")


# --------------------------------------------------------------------------
# Public model builders
# --------------------------------------------------------------------------


def mlp(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """784-1024-1024-10 perceptron with a Softmax head (MNIST-sized)."""
    b = _GraphBuilder(seed)
    y = _INPUT_NAME
    sizes = [784, 1024, 1024, 10]
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), start=1):
        y = _gemm(b, y, f"fc{index}", fan_in, fan_out)
        if index < len(sizes) - 1:
            y = b.node("Relu", [y], f"relu{index}")
    y = b.node("Softmax", [y], "softmax", axis=-1)
    return b.build("mlp", [batch, 784], y, [batch, 10])


def small_cnn(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """CIFAR-sized CNN mixing BN, both pool kinds, Clip and a dense head."""
    b = _GraphBuilder(seed)
    y = _conv_bn(b, _INPUT_NAME, "block1", "", (3, 16), 3)
    y = b.node("MaxPool", [y], "block1/maxpool", kernel_shape=[2, 2], strides=[2, 2])
    y = _conv(b, y, "block2/conv", (16, 32), 3, bias=True)
    y = b.node("Relu", [y], "block2/relu")
    y = b.node("AveragePool", [y], "block2/avgpool", kernel_shape=[2, 2], strides=[2, 2])
    y = _conv(b, y, "block3/conv", (32, 32), 3, bias=True)
    y = _relu6(b, y, "block3/relu6")
    y = _classifier_head(b, y, 32, 10)
    y = b.node("Softmax", [y], "softmax", axis=-1)
    return b.build("small_cnn", [batch, 3, 32, 32], y, [batch, 10])


def resnet_bottleneck(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """One ResNet-50 ``layer1.0`` block: 64 -> 256 channels with downsample."""
    b = _GraphBuilder(seed)
    y = _bottleneck(b, _INPUT_NAME, "layer1.0", 64, 64, 1)
    return b.build("resnet_bottleneck", [batch, 64, 56, 56], y, [batch, 256, 56, 56])


def mobilenetv2_block(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 inverted residual (expand 6, depthwise 3x3, linear project)."""
    b = _GraphBuilder(seed)
    channels, hidden = 32, 32 * 6
    y = _conv_bn(b, _INPUT_NAME, "block", "1", (channels, hidden), 1, act="relu6")
    y = _conv_bn(b, y, "block", "2", (hidden, hidden), 3, group=hidden, act="relu6")
    y = _conv_bn(b, y, "block", "3", (hidden, channels), 1, act=None, gamma=_RESIDUAL_GAMMA)
    y = b.node("Add", [y, _INPUT_NAME], "block/add")
    return b.build("mobilenetv2_block", [batch, channels, 28, 28], y, [batch, channels, 28, 28])


_MOBILENETV2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""(expansion t, output channels c, repeats n, first stride s) per stage, as in the paper."""


def _inverted_residual(
    b: _GraphBuilder, x: str, prefix: str, channels: tuple[int, int], expansion: int, stride: int
) -> str:
    """Expand 1x1 (skipped for t=1) -> depthwise 3x3 -> linear 1x1, residual when shapes allow."""
    cin, cout = channels
    hidden = cin * expansion
    y = x
    if expansion != 1:
        y = _conv_bn(b, y, prefix, "1", (cin, hidden), 1, act="relu6")
    y = _conv_bn(b, y, prefix, "2", (hidden, hidden), 3, stride=stride, group=hidden, act="relu6")
    y = _conv_bn(b, y, prefix, "3", (hidden, cout), 1, act=None, gamma=_RESIDUAL_GAMMA)
    if stride == 1 and cin == cout:
        y = b.node("Add", [y, x], f"{prefix}/add")
    return y


def mobilenetv2(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision MobileNetV2 (width 1.0) for 224x224 ImageNet inputs, 1000 logits."""
    b = _GraphBuilder(seed)
    y = _conv_bn(b, _INPUT_NAME, "features.0", "", (3, 32), 3, stride=2, act="relu6")
    cin, index = 32, 1
    for expansion, cout, repeats, first_stride in _MOBILENETV2_STAGES:
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            y = _inverted_residual(b, y, f"features.{index}", (cin, cout), expansion, stride)
            cin, index = cout, index + 1
    y = _conv_bn(b, y, f"features.{index}", "", (cin, 1280), 1, act="relu6")
    y = _classifier_head(b, y, 1280, 1000)
    return b.build("mobilenetv2", [batch, 3, 224, 224], y, [batch, 1000])


def _split_heads(b: _GraphBuilder, x: str, name: str, shape: str, perm: Sequence[int]) -> str:
    """Reshape [N, S, H] -> [N, S, heads, d] then Transpose with ``perm``."""
    y = b.node("Reshape", [x, shape], f"{name}/reshape")
    return b.node("Transpose", [y], f"{name}/transpose", perm=list(perm))


def _self_attention(
    b: _GraphBuilder, x: str, batch: int, seq: int, hidden: int, heads: int, prefix: str = ""
) -> str:
    """Multi-head self-attention in the primitive form ONNX exporters produce."""
    head_dim = hidden // heads
    split_shape = b.int64s(f"{prefix}attn.split_shape", [batch, seq, heads, head_dim])
    merge_shape = b.int64s(f"{prefix}attn.merge_shape", [batch, seq, hidden])
    q = _linear(b, x, f"{prefix}attn/q_proj", hidden, hidden)
    k = _linear(b, x, f"{prefix}attn/k_proj", hidden, hidden)
    v = _linear(b, x, f"{prefix}attn/v_proj", hidden, hidden)
    q = _split_heads(b, q, f"{prefix}attn/q", split_shape, [0, 2, 1, 3])
    k_t = _split_heads(b, k, f"{prefix}attn/k", split_shape, [0, 2, 3, 1])
    v = _split_heads(b, v, f"{prefix}attn/v", split_shape, [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k_t], f"{prefix}attn/scores")
    scores = b.node("Mul", [scores, b.scalar(1.0 / math.sqrt(head_dim))], f"{prefix}attn/scale")
    probs = b.node("Softmax", [scores], f"{prefix}attn/softmax", axis=-1)
    context = b.node("MatMul", [probs, v], f"{prefix}attn/context")
    context = b.node("Transpose", [context], f"{prefix}attn/merge/transpose", perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, merge_shape], f"{prefix}attn/merge/reshape")
    return _linear(b, context, f"{prefix}attn/out_proj", hidden, hidden)


def _encoder_layer(
    b: _GraphBuilder, x: str, batch: int, seq: int, hidden: int, heads: int, ffn: int, prefix: str = ""
) -> str:
    """Post-LN BERT layer: MHSA + residual + LN, GELU FFN + residual + LN."""
    attn = _self_attention(b, x, batch, seq, hidden, heads, prefix)
    y = b.node("Add", [x, attn], f"{prefix}attn/residual")
    y = _layer_norm(b, y, f"{prefix}attn/layernorm", hidden)
    h = _linear(b, y, f"{prefix}ffn/fc1", hidden, ffn)
    h = _gelu(b, h, f"{prefix}ffn/gelu")
    h = _linear(b, h, f"{prefix}ffn/fc2", ffn, hidden)
    y = b.node("Add", [y, h], f"{prefix}ffn/residual")
    return _layer_norm(b, y, f"{prefix}ffn/layernorm", hidden)


def transformer_encoder(
    batch: int = 1,
    seed: int = 0,
    seq: int = 16,
    hidden: int = 64,
    heads: int = 4,
    ffn: int = 256,
    layers: int = 1,
) -> onnx.ModelProto:
    """Post-LN BERT-style encoder: ``layers`` x (MHSA + residual + LN, GELU FFN + residual + LN).

    The input is the embedded sequence ``[batch, seq, hidden]`` (the token embedding is a
    Gather, not what this model is here to measure). The defaults are one small layer, an
    overhead-bound graph; :func:`bert_mini` is the compute-bound size.
    """
    if hidden % heads:
        raise ValueError(f"hidden={hidden} is not divisible by heads={heads}")
    if layers < 1:
        raise ValueError(f"layers={layers} must be at least 1")
    b = _GraphBuilder(seed)
    y = _INPUT_NAME
    for layer in range(layers):
        prefix = f"layer{layer}/" if layers > 1 else ""
        y = _encoder_layer(b, y, batch, seq, hidden, heads, ffn, prefix)
    shape = [batch, seq, hidden]
    name = "transformer_encoder" if layers == 1 else f"transformer_encoder_{layers}l"
    return b.build(name, shape, y, shape)


def bert_mini(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """BERT-mini's encoder (Turc et al. 2019): 4 layers, hidden 256, 4 heads, FFN 1024, seq 128.

    0.87 GFLOP per sequence, 3.2M weights: the size at which the dense layers, not the
    per-op overhead, set the latency (the peers' BERT-mini figures are for this shape).
    """
    return transformer_encoder(batch, seed, seq=128, hidden=256, heads=4, ffn=1024, layers=4)


def resnet50(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision ResNet-50 (v1.5) for 224x224 ImageNet inputs, 1000 logits."""
    b = _GraphBuilder(seed)
    y = _conv(b, _INPUT_NAME, "conv1", (3, 64), 7, stride=2)
    y = _batch_norm(b, y, "bn1", 64)
    y = b.node("Relu", [y], "relu")
    y = b.node(
        "MaxPool",
        [y],
        "maxpool",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    in_channels = 64
    stages = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
    for layer, (width, blocks, first_stride) in enumerate(stages, start=1):
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            y = _bottleneck(b, y, f"layer{layer}.{block}", in_channels, width, stride)
            in_channels = width * 4
    y = _classifier_head(b, y, in_channels, 1000)
    return b.build("resnet50", [batch, 3, 224, 224], y, [batch, 1000])


_VGG19_STAGES = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))
"""(channels, 3x3 convolutions) per stage; each stage ends in a 2x2 max pool."""


def vgg19(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision VGG-19 (no batch norm) for 224x224 inputs, 1000 logits: 143.7M weights."""
    b = _GraphBuilder(seed)
    y, cin = _INPUT_NAME, 3
    for stage, (channels, convs) in enumerate(_VGG19_STAGES, start=1):
        for index in range(convs):
            name = f"features.{stage}.{index}"
            y = _conv(b, y, f"{name}/conv", (cin, channels), 3, bias=True)
            y = b.node("Relu", [y], f"{name}/relu")
            cin = channels
        y = b.node("MaxPool", [y], f"features.{stage}/pool", kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("Flatten", [y], "flatten", axis=1)
    for index, (fan_in, fan_out) in enumerate(((512 * 7 * 7, 4096), (4096, 4096))):
        y = b.node("Relu", [_gemm(b, y, f"classifier.{index}", fan_in, fan_out)], f"classifier.{index}/relu")
    y = _gemm(b, y, "classifier.2", 4096, 1000)
    return b.build("vgg19", [batch, 3, 224, 224], y, [batch, 1000])


def _bidirectional_gru(b: _GraphBuilder, x: str, name: str, in_features: int, hidden: int) -> str:
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
    b = _GraphBuilder(seed)
    y = b.node("Transpose", [_INPUT_NAME], "to_time_major", perm=[1, 0, 2])
    width = features
    for layer in range(layers):
        y = _bidirectional_gru(b, y, f"gru{layer}", width, hidden)
        width = 2 * hidden
    y = b.node("Transpose", [y], "to_batch_major", perm=[1, 0, 2])
    return b.build("gru_text", [batch, seq, features], y, [batch, seq, width])


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
    "gru_text": gru_text,
}

LARGE_MODELS = frozenset({"resnet50", "vgg19"})
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

"""The layers the zoo's models are made of: an ONNX graph builder with seeded weights, and
convolution, batch-norm, dense, layer-norm and residual blocks on top of it.

Weights are scaled (He-normal convolutions, ``1/sqrt(fan_in)`` dense layers, damped last
batch-norm in each residual branch) so activations stay O(1) even through ResNet-50.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_OPSET = 17
# IR version 8 is the lowest that opset 17 allows and is accepted by every
# onnxruntime release we target, so models stay loadable by older runtimes.
_IR_VERSION = 8
INPUT_NAME = "input"
OUTPUT_NAME = "output"
_BN_EPSILON = 1e-5
_LN_EPSILON = 1e-5
# Gamma range for a batch-norm that ends a residual branch: small so the
# residual sum grows slowly with depth instead of exploding.
RESIDUAL_GAMMA = (0.1, 0.3)
DEFAULT_GAMMA = (0.5, 1.0)

Shape = Sequence[int]


class GraphBuilder:
    """Accumulates nodes and initializers while handing out unique names.

    Each node produces one tensor named after the node itself, so node and
    tensor names are unique together and a model's topology can be read from
    its names alone (``layer1.0/conv1`` feeds ``layer1.0/bn1`` ...).
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._used: set[str] = {INPUT_NAME, OUTPUT_NAME}
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
            node.output[:] = [OUTPUT_NAME if out == result else out for out in node.output]
            node.input[:] = [OUTPUT_NAME if inp == result else inp for inp in node.input]
        graph = helper.make_graph(
            self._nodes,
            graph_name,
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, list(output_shape))],
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


def small_bias(b: GraphBuilder, name: str, size: int) -> str:
    """Bias ~ N(0, 0.01^2): present to exercise bias paths, too small to dominate."""
    return b.normal(name, [size], 0.01)


def conv(
    b: GraphBuilder,
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
        inputs.append(small_bias(b, f"{name}.bias", cout))
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


def batch_norm(
    b: GraphBuilder,
    x: str,
    name: str,
    channels: int,
    gamma: tuple[float, float] = DEFAULT_GAMMA,
) -> str:
    """Inference-mode BatchNormalization with plausible running statistics."""
    scale = b.uniform(f"{name}.scale", [channels], *gamma)
    beta = b.normal(f"{name}.bias", [channels], 0.1)
    mean = b.normal(f"{name}.running_mean", [channels], 0.1)
    var = b.uniform(f"{name}.running_var", [channels], 0.5, 1.5)
    return b.node("BatchNormalization", [x, scale, beta, mean, var], name, epsilon=_BN_EPSILON)


def relu6(b: GraphBuilder, x: str, name: str) -> str:
    """ReLU6 as Clip(0, 6); opset 17 takes the bounds as inputs, not attributes."""
    return b.node("Clip", [x, b.scalar(0.0), b.scalar(6.0)], name)


def conv_bn(
    b: GraphBuilder,
    x: str,
    prefix: str,
    index: str,
    channels: tuple[int, int],
    kernel: int,
    stride: int = 1,
    group: int = 1,
    act: str | None = "relu",
    gamma: tuple[float, float] = DEFAULT_GAMMA,
) -> str:
    """Conv + BatchNormalization + optional activation ("relu" or "relu6").

    Names follow torchvision (``prefix/conv1``, ``prefix/bn1``, ``prefix/relu1``)
    so graphs are easy to line up against the PyTorch reference.
    """
    y = conv(b, x, f"{prefix}/conv{index}", channels, kernel, stride, group)
    y = batch_norm(b, y, f"{prefix}/bn{index}", channels[1], gamma)
    if act == "relu":
        return b.node("Relu", [y], f"{prefix}/relu{index}")
    if act == "relu6":
        return relu6(b, y, f"{prefix}/relu6_{index}")
    if act is not None:
        raise ValueError(f"unknown activation {act!r}")
    return y


def gemm(b: GraphBuilder, x: str, name: str, in_features: int, out_features: int) -> str:
    """Dense layer as Gemm(transB=1), matching torch.nn.Linear's weight layout."""
    weight = b.normal(f"{name}.weight", [out_features, in_features], 1.0 / math.sqrt(in_features))
    bias = small_bias(b, f"{name}.bias", out_features)
    return b.node("Gemm", [x, weight, bias], name, transB=1)


def linear(b: GraphBuilder, x: str, name: str, in_features: int, out_features: int) -> str:
    """Dense layer on rank-3 activations as MatMul([in, out]) + Add(bias)."""
    weight = b.normal(f"{name}.weight", [in_features, out_features], 1.0 / math.sqrt(in_features))
    y = b.node("MatMul", [x, weight], f"{name}/matmul")
    return b.node("Add", [y, small_bias(b, f"{name}.bias", out_features)], f"{name}/add")


def layer_norm(b: GraphBuilder, x: str, name: str, features: int) -> str:
    """LayerNormalization over the last axis with near-identity affine params."""
    scale = b.uniform(f"{name}.scale", [features], 0.8, 1.2)
    bias = b.normal(f"{name}.bias", [features], 0.1)
    return b.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=_LN_EPSILON)


def gelu(b: GraphBuilder, x: str, name: str) -> str:
    """Exact GELU spelled out as x * 0.5 * (1 + erf(x / sqrt(2))).

    Exporters emit this primitive pattern, so the compiler's fusion passes
    need to see it rather than a single Gelu op.
    """
    y = b.node("Div", [x, b.scalar(math.sqrt(2.0))], f"{name}/div")
    y = b.node("Erf", [y], f"{name}/erf")
    y = b.node("Add", [y, b.scalar(1.0)], f"{name}/add")
    y = b.node("Mul", [x, y], f"{name}/mul")
    return b.node("Mul", [y, b.scalar(0.5)], f"{name}/mul_half")


def classifier_head(b: GraphBuilder, x: str, in_features: int, classes: int) -> str:
    """GlobalAveragePool -> Flatten -> Gemm, the usual CNN tail."""
    y = b.node("GlobalAveragePool", [x], "avgpool")
    y = b.node("Flatten", [y], "flatten", axis=1)
    return gemm(b, y, "fc", in_features, classes)


def bottleneck(b: GraphBuilder, x: str, prefix: str, in_channels: int, width: int, stride: int) -> str:
    """torchvision ResNet v1.5 Bottleneck (stride on the 3x3 conv).

    A downsample branch is added whenever the shape changes, exactly as
    torchvision does, so both the standalone block and ResNet-50 share it.
    """
    out_channels = width * 4
    y = conv_bn(b, x, prefix, "1", (in_channels, width), 1)
    y = conv_bn(b, y, prefix, "2", (width, width), 3, stride)
    y = conv_bn(b, y, prefix, "3", (width, out_channels), 1, act=None, gamma=RESIDUAL_GAMMA)
    identity = x
    if stride != 1 or in_channels != out_channels:
        down = f"{prefix}/downsample"
        identity = conv(b, x, f"{down}/conv", (in_channels, out_channels), 1, stride)
        identity = batch_norm(b, identity, f"{down}/bn", out_channels)
    y = b.node("Add", [y, identity], f"{prefix}/add")
    return b.node("Relu", [y], f"{prefix}/relu")

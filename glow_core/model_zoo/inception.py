"""Inception-v3 (torchvision's layout, no auxiliary head) for 299x299 ImageNet inputs.

Its mixed blocks are what ResNet and VGG lack: four or more parallel branches concatenated,
asymmetric 1x7 / 7x1 and 1x3 / 3x1 convolutions, average pooling with padding that counts
the pad, and stride-2 reductions without padding. Every convolution is torchvision's
``BasicConv2d``: Conv (no bias) + BatchNormalization + ReLU.
"""

from __future__ import annotations

import math

import onnx

from glow_core.model_zoo.layers import INPUT_NAME, GraphBuilder, batch_norm, classifier_head

Pair = tuple[int, int]


def _basic_conv(
    b: GraphBuilder,
    x: str,
    name: str,
    channels: Pair,
    kernel: Pair,
    stride: int = 1,
    pad: Pair = (0, 0),
) -> str:
    """Conv (He-normal weights, ``kernel`` may be rectangular) + BatchNormalization + ReLU."""
    cin, cout = channels
    weight = b.normal(
        f"{name}.conv.weight", [cout, cin, *kernel], math.sqrt(2.0 / (cin * kernel[0] * kernel[1]))
    )
    y = b.node(
        "Conv",
        [x, weight],
        f"{name}/conv",
        kernel_shape=list(kernel),
        strides=[stride, stride],
        pads=[pad[0], pad[1], pad[0], pad[1]],
    )
    y = batch_norm(b, y, f"{name}/bn", cout)
    return b.node("Relu", [y], f"{name}/relu")


def _chain(b: GraphBuilder, x: str, name: str, cin: int, layers: list[tuple[int, Pair, Pair]]) -> str:
    """Convolutions one after another: (output channels, kernel, pad) each, stride 1."""
    for index, (cout, kernel, pad) in enumerate(layers, start=1):
        x = _basic_conv(b, x, f"{name}_{index}", (cin, cout), kernel, pad=pad)
        cin = cout
    return x


def _avg_pool_branch(b: GraphBuilder, x: str, name: str, cin: int, cout: int) -> str:
    """3x3 average pool (stride 1, pad 1, the pad counted as torch does) then a 1x1 conv."""
    y = b.node(
        "AveragePool",
        [x],
        f"{name}/pool",
        kernel_shape=[3, 3],
        strides=[1, 1],
        pads=[1, 1, 1, 1],
        count_include_pad=1,
    )
    return _basic_conv(b, y, f"{name}/conv", (cin, cout), (1, 1))


def _max_pool(b: GraphBuilder, x: str, name: str) -> str:
    return b.node("MaxPool", [x], name, kernel_shape=[3, 3], strides=[2, 2])


def _concat(b: GraphBuilder, branches: list[str], name: str) -> str:
    return b.node("Concat", branches, f"{name}/concat", axis=1)


_1, _3, _5 = (1, 1), (3, 3), (5, 5)
_1x7, _7x1, _1x3, _3x1 = (1, 7), (7, 1), (1, 3), (3, 1)
_NO = (0, 0)


def _inception_a(b: GraphBuilder, x: str, name: str, cin: int, pool_features: int) -> str:
    """35x35: 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | pool-1x1, to 224 + pool_features channels."""
    return _concat(
        b,
        [
            _basic_conv(b, x, f"{name}.branch1x1", (cin, 64), _1),
            _chain(b, x, f"{name}.branch5x5", cin, [(48, _1, _NO), (64, _5, (2, 2))]),
            _chain(b, x, f"{name}.branch3x3dbl", cin, [(64, _1, _NO), (96, _3, _1), (96, _3, _1)]),
            _avg_pool_branch(b, x, f"{name}.branch_pool", cin, pool_features),
        ],
        name,
    )


def _inception_b(b: GraphBuilder, x: str, name: str, cin: int) -> str:
    """35x35 -> 17x17: stride-2 3x3 | 1x1-3x3-3x3/2 | max pool, to 480 + cin channels."""
    double = _chain(b, x, f"{name}.branch3x3dbl", cin, [(64, _1, _NO), (96, _3, _1)])
    return _concat(
        b,
        [
            _basic_conv(b, x, f"{name}.branch3x3", (cin, 384), _3, stride=2),
            _basic_conv(b, double, f"{name}.branch3x3dbl_3", (96, 96), _3, stride=2),
            _max_pool(b, x, f"{name}/pool"),
        ],
        name,
    )


def _inception_c(b: GraphBuilder, x: str, name: str, cin: int, c7: int) -> str:
    """17x17 with factorized 7x7s (1x7 then 7x1), to 768 channels."""
    seven = [(c7, _1, _NO), (c7, _1x7, (0, 3)), (192, _7x1, (3, 0))]
    seven_double = [
        (c7, _1, _NO),
        (c7, _7x1, (3, 0)),
        (c7, _1x7, (0, 3)),
        (c7, _7x1, (3, 0)),
        (192, _1x7, (0, 3)),
    ]
    return _concat(
        b,
        [
            _basic_conv(b, x, f"{name}.branch1x1", (cin, 192), _1),
            _chain(b, x, f"{name}.branch7x7", cin, seven),
            _chain(b, x, f"{name}.branch7x7dbl", cin, seven_double),
            _avg_pool_branch(b, x, f"{name}.branch_pool", cin, 192),
        ],
        name,
    )


def _inception_d(b: GraphBuilder, x: str, name: str, cin: int) -> str:
    """17x17 -> 8x8: 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2 | max pool, to 512 + cin channels."""
    three = _basic_conv(b, x, f"{name}.branch3x3_1", (cin, 192), _1)
    seven = _chain(
        b, x, f"{name}.branch7x7x3", cin, [(192, _1, _NO), (192, _1x7, (0, 3)), (192, _7x1, (3, 0))]
    )
    return _concat(
        b,
        [
            _basic_conv(b, three, f"{name}.branch3x3_2", (192, 320), _3, stride=2),
            _basic_conv(b, seven, f"{name}.branch7x7x3_4", (192, 192), _3, stride=2),
            _max_pool(b, x, f"{name}/pool"),
        ],
        name,
    )


def _split_1x3_3x1(b: GraphBuilder, x: str, name: str, cin: int) -> str:
    """The 8x8 blocks' fork: a 1x3 and a 3x1 convolution side by side, 768 channels."""
    return _concat(
        b,
        [
            _basic_conv(b, x, f"{name}a", (cin, 384), _1x3, pad=(0, 1)),
            _basic_conv(b, x, f"{name}b", (cin, 384), _3x1, pad=(1, 0)),
        ],
        name,
    )


def _inception_e(b: GraphBuilder, x: str, name: str, cin: int) -> str:
    """8x8 with forked 1x3 / 3x1 convolutions, to 2048 channels."""
    three = _basic_conv(b, x, f"{name}.branch3x3_1", (cin, 384), _1)
    double = _chain(b, x, f"{name}.branch3x3dbl", cin, [(448, _1, _NO), (384, _3, _1)])
    return _concat(
        b,
        [
            _basic_conv(b, x, f"{name}.branch1x1", (cin, 320), _1),
            _split_1x3_3x1(b, three, f"{name}.branch3x3_2", 384),
            _split_1x3_3x1(b, double, f"{name}.branch3x3dbl_3", 384),
            _avg_pool_branch(b, x, f"{name}.branch_pool", cin, 192),
        ],
        name,
    )


def inception_v3(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision Inception-v3 (eval mode: no auxiliary logits) for 299x299 inputs, 1000 logits."""
    b = GraphBuilder(seed)
    y = _basic_conv(b, INPUT_NAME, "Conv2d_1a_3x3", (3, 32), _3, stride=2)
    y = _basic_conv(b, y, "Conv2d_2a_3x3", (32, 32), _3)
    y = _basic_conv(b, y, "Conv2d_2b_3x3", (32, 64), _3, pad=_1)
    y = _max_pool(b, y, "maxpool1")
    y = _basic_conv(b, y, "Conv2d_3b_1x1", (64, 80), _1)
    y = _basic_conv(b, y, "Conv2d_4a_3x3", (80, 192), _3)
    y = _max_pool(b, y, "maxpool2")
    y = _inception_a(b, y, "Mixed_5b", 192, 32)
    y = _inception_a(b, y, "Mixed_5c", 256, 64)
    y = _inception_a(b, y, "Mixed_5d", 288, 64)
    y = _inception_b(b, y, "Mixed_6a", 288)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        y = _inception_c(b, y, name, 768, c7)
    y = _inception_d(b, y, "Mixed_7a", 768)
    y = _inception_e(b, y, "Mixed_7b", 1280)
    y = _inception_e(b, y, "Mixed_7c", 2048)
    y = classifier_head(b, y, 2048, 1000)
    return b.build("inception_v3", [batch, 3, 299, 299], y, [batch, 1000])

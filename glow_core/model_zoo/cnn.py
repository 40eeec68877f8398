"""Convolutional and dense models: MLP, small CNN, ResNet blocks and ResNet-50, MobileNetV2, VGG-19."""

from __future__ import annotations

import itertools

import onnx

from glow_core.model_zoo.layers import (
    INPUT_NAME,
    RESIDUAL_GAMMA,
    GraphBuilder,
    batch_norm,
    bottleneck,
    classifier_head,
    conv,
    conv_bn,
    gemm,
    relu6,
)


def mlp(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """784-1024-1024-10 perceptron with a Softmax head (MNIST-sized)."""
    b = GraphBuilder(seed)
    y = INPUT_NAME
    sizes = [784, 1024, 1024, 10]
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), start=1):
        y = gemm(b, y, f"fc{index}", fan_in, fan_out)
        if index < len(sizes) - 1:
            y = b.node("Relu", [y], f"relu{index}")
    y = b.node("Softmax", [y], "softmax", axis=-1)
    return b.build("mlp", [batch, 784], y, [batch, 10])


def small_cnn(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """CIFAR-sized CNN mixing BN, both pool kinds, Clip and a dense head."""
    b = GraphBuilder(seed)
    y = conv_bn(b, INPUT_NAME, "block1", "", (3, 16), 3)
    y = b.node("MaxPool", [y], "block1/maxpool", kernel_shape=[2, 2], strides=[2, 2])
    y = conv(b, y, "block2/conv", (16, 32), 3, bias=True)
    y = b.node("Relu", [y], "block2/relu")
    y = b.node("AveragePool", [y], "block2/avgpool", kernel_shape=[2, 2], strides=[2, 2])
    y = conv(b, y, "block3/conv", (32, 32), 3, bias=True)
    y = relu6(b, y, "block3/relu6")
    y = classifier_head(b, y, 32, 10)
    y = b.node("Softmax", [y], "softmax", axis=-1)
    return b.build("small_cnn", [batch, 3, 32, 32], y, [batch, 10])


def resnet_bottleneck(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """One ResNet-50 ``layer1.0`` block: 64 -> 256 channels with downsample."""
    b = GraphBuilder(seed)
    y = bottleneck(b, INPUT_NAME, "layer1.0", 64, 64, 1)
    return b.build("resnet_bottleneck", [batch, 64, 56, 56], y, [batch, 256, 56, 56])


def mobilenetv2_block(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 inverted residual (expand 6, depthwise 3x3, linear project)."""
    b = GraphBuilder(seed)
    channels, hidden = 32, 32 * 6
    y = conv_bn(b, INPUT_NAME, "block", "1", (channels, hidden), 1, act="relu6")
    y = conv_bn(b, y, "block", "2", (hidden, hidden), 3, group=hidden, act="relu6")
    y = conv_bn(b, y, "block", "3", (hidden, channels), 1, act=None, gamma=RESIDUAL_GAMMA)
    y = b.node("Add", [y, INPUT_NAME], "block/add")
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
    b: GraphBuilder, x: str, prefix: str, channels: tuple[int, int], expansion: int, stride: int
) -> str:
    """Expand 1x1 (skipped for t=1) -> depthwise 3x3 -> linear 1x1, residual when shapes allow."""
    cin, cout = channels
    hidden = cin * expansion
    y = x
    if expansion != 1:
        y = conv_bn(b, y, prefix, "1", (cin, hidden), 1, act="relu6")
    y = conv_bn(b, y, prefix, "2", (hidden, hidden), 3, stride=stride, group=hidden, act="relu6")
    y = conv_bn(b, y, prefix, "3", (hidden, cout), 1, act=None, gamma=RESIDUAL_GAMMA)
    if stride == 1 and cin == cout:
        y = b.node("Add", [y, x], f"{prefix}/add")
    return y


def mobilenetv2(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision MobileNetV2 (width 1.0) for 224x224 ImageNet inputs, 1000 logits."""
    b = GraphBuilder(seed)
    y = conv_bn(b, INPUT_NAME, "features.0", "", (3, 32), 3, stride=2, act="relu6")
    cin, index = 32, 1
    for expansion, cout, repeats, first_stride in _MOBILENETV2_STAGES:
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            y = _inverted_residual(b, y, f"features.{index}", (cin, cout), expansion, stride)
            cin, index = cout, index + 1
    y = conv_bn(b, y, f"features.{index}", "", (cin, 1280), 1, act="relu6")
    y = classifier_head(b, y, 1280, 1000)
    return b.build("mobilenetv2", [batch, 3, 224, 224], y, [batch, 1000])


def resnet50(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision ResNet-50 (v1.5) for 224x224 ImageNet inputs, 1000 logits."""
    b = GraphBuilder(seed)
    y = conv(b, INPUT_NAME, "conv1", (3, 64), 7, stride=2)
    y = batch_norm(b, y, "bn1", 64)
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
            y = bottleneck(b, y, f"layer{layer}.{block}", in_channels, width, stride)
            in_channels = width * 4
    y = classifier_head(b, y, in_channels, 1000)
    return b.build("resnet50", [batch, 3, 224, 224], y, [batch, 1000])


_VGG19_STAGES = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))
"""(channels, 3x3 convolutions) per stage; each stage ends in a 2x2 max pool."""


def vgg19(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """torchvision VGG-19 (no batch norm) for 224x224 inputs, 1000 logits: 143.7M weights."""
    b = GraphBuilder(seed)
    y, cin = INPUT_NAME, 3
    for stage, (channels, convs) in enumerate(_VGG19_STAGES, start=1):
        for index in range(convs):
            name = f"features.{stage}.{index}"
            y = conv(b, y, f"{name}/conv", (cin, channels), 3, bias=True)
            y = b.node("Relu", [y], f"{name}/relu")
            cin = channels
        y = b.node("MaxPool", [y], f"features.{stage}/pool", kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("Flatten", [y], "flatten", axis=1)
    for index, (fan_in, fan_out) in enumerate(((512 * 7 * 7, 4096), (4096, 4096))):
        y = b.node("Relu", [gemm(b, y, f"classifier.{index}", fan_in, fan_out)], f"classifier.{index}/relu")
    y = gemm(b, y, "classifier.2", 4096, 1000)
    return b.build("vgg19", [batch, 3, 224, 224], y, [batch, 1000])

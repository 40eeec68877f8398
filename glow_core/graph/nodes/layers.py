"""The first high-level nodes: dense and convolution layers (with a fused activation), the
simple activations, softmax, mean, and layer and batch normalization."""

from __future__ import annotations

import math

import numpy as np

from glow_core.graph.activations import apply_activation, check_activation
from glow_core.primitives import NUMERIC_KINDS
from glow_core.spec import Attr, In, ex, expect, node, normalize_axis, random_tensor, same_type


@node
class Conv:
    """2-D convolution with bias: Convolution + Add of the broadcast bias."""

    input = In()
    filter = In()
    bias = In()
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0))
    dilations = Attr(tuple, (1, 1))
    group = Attr(int, 1)
    activation = Attr(str, "none", "fused after the bias: none, relu, clip (glow_core.graph.activations)")
    activation_args = Attr(tuple, (), "the activation's parameters: clip's (low, high)")
    examples = (ex("f32[1,3,8,8]", "f32[4,3,3,3]", "f32[4]", pads=(1, 1, 1, 1)),)

    def type(input, filter, bias, strides, pads, dilations, group, activation, activation_args):
        from glow_core.primitives import Convolution

        out = Convolution.type_rule(input, filter, strides, pads, dilations, group)
        expect(bias.shape == (filter.shape[0],), "bias must be [Cout]", bias, filter)
        expect(bias.elem == out.elem, "bias must have the input's element kind", bias, input)
        check_activation(activation, activation_args, out)
        return out

    def lower(b, input, filter, bias, strides, pads, dilations, group, activation, activation_args):
        conv = b.Convolution(input, filter, strides=strides, pads=pads, dilations=dilations, group=group)
        channel_bias = b.Reshape(bias, shape=(1, bias.type.shape[0], 1, 1))
        biased = b.Add(conv, b.broadcast_to(channel_bias, conv.type.shape))
        return apply_activation(b, biased, activation, activation_args)


@node
class FullyConnected:
    """input[n,k] @ weights[k,m] + bias[m] (Glow's FC): MatMul + broadcast Add."""

    input = In()
    weights = In()
    bias = In()
    activation = Attr(str, "none", "fused after the bias: none, relu, clip (glow_core.graph.activations)")
    activation_args = Attr(tuple, (), "the activation's parameters: clip's (low, high)")
    examples = (ex("f32[2,5]", "f32[5,3]", "f32[3]"),)

    def type(input, weights, bias, activation, activation_args):
        expect(input.rank == 2 and weights.rank == 2, "input and weights must be 2-D", input, weights)
        expect(input.shape[1] == weights.shape[0], "inner dimensions differ", input, weights)
        expect(bias.shape == (weights.shape[1],), "bias must be [m]", bias, weights)
        out = input.with_shape((input.shape[0], weights.shape[1]))
        check_activation(activation, activation_args, out)
        return out

    def lower(b, input, weights, bias, activation, activation_args):
        product = b.MatMul(input, weights)
        biased = b.Add(product, b.broadcast_to(bias, product.type.shape))
        return apply_activation(b, biased, activation, activation_args)


@node
class Relu:
    """max(x, 0)."""

    input = In()
    kinds = NUMERIC_KINDS
    examples = (ex("f32[3,4]"),)
    type = same_type("input")

    def lower(b, input):
        return b.Max(input, b.splat(0, input))


@node
class Sigmoid:
    """1 / (1 + exp(-x))."""

    input = In()
    examples = (ex("f32[3,4]"),)
    type = same_type("input")

    def lower(b, input):
        one = b.splat(1.0, input)
        negated = b.Sub(b.splat(0.0, input), input)
        return b.Div(one, b.Add(b.splat(1.0, input), b.Exp(negated)))


@node
class Clip:
    """min(max(x, low), high) (ReLU6 is Clip(0, 6))."""

    input = In()
    low = Attr((int, float), -math.inf)
    high = Attr((int, float), math.inf)
    examples = (ex("f32[3,4]", low=0.0, high=6.0),)

    def type(input, low, high):
        expect(low <= high, f"clip range [{low}, {high}] is empty", input)
        return input

    def lower(b, input, low, high):
        out = input
        if low != -math.inf:
            out = b.Max(out, b.splat(low, input))
        if high != math.inf:
            out = b.Min(out, b.splat(high, input))
        return out


@node
class LeakyRelu:
    """x for x >= 0, alpha * x otherwise: max(x, 0) + alpha * min(x, 0)."""

    input = In()
    alpha = Attr(float, 0.01)
    examples = (ex("f32[3,4]", alpha=0.1),)

    def type(input, alpha):
        return input

    def lower(b, input, alpha):
        zero = b.splat(0.0, input)
        negative = b.Mul(b.Min(input, zero), b.splat(alpha, input))
        return b.Add(b.Max(input, b.splat(0.0, input)), negative)


@node
class Softmax:
    """exp(x - max) / sum(exp(x - max)) along ``axis`` (ONNX opset-13 meaning)."""

    input = In()
    axis = Attr(int, -1)
    examples = (ex("f32[2,7]"), ex("f32[2,3,5]", axis=1))

    def type(input, axis):
        normalize_axis(axis, input.rank, input)
        return input

    def lower(b, input, axis):
        axes = (normalize_axis(axis, input.type.rank),)
        shape = input.type.shape
        shifted = b.Sub(input, b.Broadcast(b.ReduceMax(input, axes=axes), shape=shape))
        exps = b.Exp(shifted)
        return b.Div(exps, b.Broadcast(b.ReduceSum(exps, axes=axes), shape=shape))


def _mean(b, x, axes: tuple[int, ...]):
    count = math.prod(x.type.shape[a] for a in axes)
    total = b.ReduceSum(x, axes=axes)
    if not x.type.elem.is_float:  # sum / count truncated toward zero, as ONNX (a factor 1/n is 0)
        return b.Div(total, b.splat(max(count, 1), total))
    return b.Mul(total, b.splat(1.0 / count, total))


@node
class ReduceMean:
    """Mean over ``axes``; reduced dimensions kept with size 1 (a Reshape drops them)."""

    input = In()
    axes = Attr(tuple)
    examples = (ex("f32[2,3,4]", axes=(1, 2)),)

    def type(input, axes):
        from glow_core.primitives import ReduceSum

        return ReduceSum.type_rule(input, axes)

    def lower(b, input, axes):
        return _mean(b, input, axes)


@node
class LayerNorm:
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the dims from ``axis`` on."""

    input = In()
    scale = In()
    bias = In()
    axis = Attr(int, -1)
    epsilon = Attr(float, 1e-5)
    examples = (ex("f32[2,4,8]", "f32[8]", "f32[8]"),)

    def type(input, scale, bias, axis, epsilon):
        axis = normalize_axis(axis, input.rank, input)
        norm_shape = input.shape[axis:]
        for t in (scale, bias):
            ok = t.rank <= len(norm_shape) and norm_shape[len(norm_shape) - t.rank :] == t.shape
            expect(ok, f"scale/bias must broadcast over the normalized dims {norm_shape}", t, input)
        return input

    def lower(b, input, scale, bias, axis, epsilon):
        axes = tuple(range(normalize_axis(axis, input.type.rank), input.type.rank))
        shape = input.type.shape
        centered = b.Sub(input, b.Broadcast(_mean(b, input, axes), shape=shape))
        variance = _mean(b, b.Mul(centered, centered), axes)
        denom = b.Sqrt(b.Add(variance, b.splat(epsilon, variance)))
        normalized = b.Div(centered, b.Broadcast(denom, shape=shape))
        return b.Add(b.Mul(normalized, b.broadcast_to(scale, shape)), b.broadcast_to(bias, shape))


@node
class BatchNorm:
    """Inference batch norm over channel dim 1: x * s + (bias - mean * s), s = scale/sqrt(var+eps)."""

    input = In()
    scale = In()
    bias = In()
    mean = In()
    var = In()
    epsilon = Attr(float, 1e-5)
    examples = (ex("f32[2,3,4,4]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"),)

    def sample(rng, input, scale, bias, mean, var, epsilon):
        """A positive variance (its square root is taken); the rest standard normal."""
        arrays = [random_tensor(rng, t) for t in (input, scale, bias, mean)]
        return [*arrays, (np.abs(random_tensor(rng, var)) + 0.5).astype(var.dtype)]

    def type(input, scale, bias, mean, var, epsilon):
        expect(input.rank >= 2, "input needs a channel dimension", input)
        channels = (input.shape[1],)
        for t in (scale, bias, mean, var):
            expect(t.shape == channels, "parameters must be [C]", t, input)
        return input

    def lower(b, input, scale, bias, mean, var, epsilon):
        multiplier = b.Div(scale, b.Sqrt(b.Add(var, b.splat(epsilon, var))))
        shift = b.Sub(bias, b.Mul(mean, multiplier))
        per_channel = (1, input.type.shape[1]) + (1,) * (input.type.rank - 2)
        shape = input.type.shape
        scaled = b.Mul(input, b.Broadcast(b.Reshape(multiplier, shape=per_channel), shape=shape))
        return b.Add(scaled, b.Broadcast(b.Reshape(shift, shape=per_channel), shape=shape))

"""Convolution and pooling over NCHW tensors."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from glow_core.primitives.kinds import NUMERIC_KINDS, wide
from glow_core.primitives.window_grads import avg_pool_grad, convolution_grad, max_pool_grad
from glow_core.spec import Attr, In, ex, expect, primitive
from glow_core.types import Type

# ---- convolution and pooling (NCHW) ------------------------------------------------


def _window_out(size: int, kernel: int, stride: int, pad_total: int, dilation: int = 1) -> int:
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


def _check_window(input: Type, kernel, strides, pads, dilations=(1, 1)) -> tuple[int, int]:
    expect(input.rank == 4, "input must be NCHW", input)
    expect(len(kernel) == 2 and len(strides) == 2 and len(pads) == 4, "2-D window attrs expected", input)
    expect(min(strides) >= 1 and min(dilations) >= 1 and min(pads) >= 0, "bad strides/pads/dilations", input)
    oh = _window_out(input.shape[2], kernel[0], strides[0], pads[0] + pads[2], dilations[0])
    ow = _window_out(input.shape[3], kernel[1], strides[1], pads[1] + pads[3], dilations[1])
    expect(oh >= 1 and ow >= 1, f"window {kernel} larger than padded input", input)
    return oh, ow


def _check_pool_pads(input: Type, kernel, pads) -> None:
    # A pooling window lying wholly in padding has no input element: NaN for a mean,
    # -inf for a max. (Convolution has no such problem: padding there is plain zeros.)
    ok = all(pads[i] < kernel[i % 2] for i in range(4))
    expect(ok, f"pads {pads} must be smaller than the kernel {tuple(kernel)}", input)


def _windows(x: np.ndarray, kernel, strides, pads, dilations, fill: float) -> np.ndarray:
    """[N,C,OH,OW,kh,kw] strided view of the padded input (pads: top, left, bottom, right)."""
    xp = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=fill)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations, strict=True))
    win = sliding_window_view(xp, span, axis=(2, 3))
    return win[:, :, :: strides[0], :: strides[1], :: dilations[0], :: dilations[1]]


@primitive
class Convolution:
    """2-D convolution, NCHW input, filter [Cout, Cin/group, kh, kw]; bias is a separate Add."""

    input = In()
    filter = In()
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right")
    dilations = Attr(tuple, (1, 1))
    group = Attr(int, 1)
    core = True
    grad = convolution_grad
    examples = (
        ex("f32[1,3,8,8]", "f32[4,3,3,3]", pads=(1, 1, 1, 1)),
        ex("f32[2,4,9,7]", "f32[6,2,3,2]", strides=(2, 1), group=2),
        ex("f32[1,5,6,6]", "f32[5,1,3,3]", pads=(1, 1, 1, 1), group=5),
        ex("f32[1,2,11,11]", "f32[3,2,3,3]", dilations=(2, 2), pads=(0, 1, 2, 0)),
    )

    def type(input, filter, strides, pads, dilations, group):
        expect(filter.rank == 4, "filter must be [Cout, Cin/group, kh, kw]", filter)
        expect(filter.elem == input.elem, "input and filter must have the same element kind", input, filter)
        cout, cin_g = filter.shape[:2]
        expect(
            group >= 1 and input.shape[1] == cin_g * group, f"channels differ (group={group})", input, filter
        )
        expect(cout % group == 0, f"output channels not divisible by group {group}", filter)
        oh, ow = _check_window(input, filter.shape[2:], strides, pads, dilations)
        return input.with_shape((input.shape[0], cout, oh, ow))

    def reference(input, filter, strides, pads, dilations, group):
        win = _windows(wide(input), filter.shape[2:], strides, pads, dilations, 0.0)
        n, c, oh, ow, kh, kw = win.shape
        w = wide(filter).reshape(group, -1, c // group, kh, kw)
        win = win.reshape(n, group, c // group, oh, ow, kh, kw)
        out = np.einsum("ngchwij,gocij->ngohw", win, w, optimize=True)
        return out.reshape(n, filter.shape[0], oh, ow)  # not -1: a batch of 0 leaves it ambiguous


@primitive
class MaxPool:
    """Maximum over each window; neither padding nor NaN wins (a window is NaN only when
    all its elements are), as in onnx.reference's MaxPool: a NaN in an image is a missing
    value, not a poison for its neighbourhood. Defined for integers too (a maximum needs no
    arithmetic), so uint8 images pool without a round trip through float."""

    input = In()
    kernel = Attr(tuple)
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0))
    core = True
    kinds = NUMERIC_KINDS
    grad = max_pool_grad
    examples = (
        ex("f32[1,3,8,8]", kernel=(2, 2), strides=(2, 2)),
        ex("f32[2,2,7,9]", kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
        # Every attribute differs per axis, and the last rows' windows reach the bottom pads:
        # a kernel reading the top pad for the bottom one fails here (padding never wins a
        # maximum, so an end pad no window reaches cannot show it).
        ex("f32[1,2,6,7]", kernel=(3, 2), strides=(1, 2), pads=(0, 1, 2, 0)),
    )

    def type(input, kernel, strides, pads):
        oh, ow = _check_window(input, kernel, strides, pads)
        _check_pool_pads(input, kernel, pads)
        return input.with_shape(input.shape[:2] + (oh, ow))

    def reference(input, kernel, strides, pads):
        if input.dtype.kind in "fV":  # fmax skips NaN, so NaN pads never win either
            windows = _windows(input, kernel, strides, pads, (1, 1), np.nan)
            with np.errstate(invalid="ignore"):  # comparing with NaN is the point, not a fault
                return np.fmax.reduce(windows, axis=(4, 5))
        windows = _windows(input, kernel, strides, pads, (1, 1), np.iinfo(input.dtype).min)
        return windows.max(axis=(4, 5))


@primitive
class AvgPool:
    """Mean over each window; ``count_include_pad`` decides whether pads count in the divisor."""

    input = In()
    kernel = Attr(tuple)
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0))
    count_include_pad = Attr(bool, False)
    core = True
    grad = avg_pool_grad
    examples = (
        ex("f32[1,3,8,8]", kernel=(2, 2), strides=(2, 2)),
        ex("f32[2,2,7,9]", kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
        ex("f32[1,4,5,5]", kernel=(3, 3), pads=(1, 1, 1, 1), count_include_pad=True),
    )

    def type(input, kernel, strides, pads, count_include_pad):
        oh, ow = _check_window(input, kernel, strides, pads)
        _check_pool_pads(input, kernel, pads)
        return input.with_shape(input.shape[:2] + (oh, ow))

    def reference(input, kernel, strides, pads, count_include_pad):
        sums = _windows(wide(input), kernel, strides, pads, (1, 1), 0.0).sum(axis=(4, 5))
        if count_include_pad:
            return sums / (kernel[0] * kernel[1])
        ones = np.ones((1, 1) + input.shape[2:])
        counts = _windows(ones, kernel, strides, pads, (1, 1), 0.0).sum(axis=(4, 5))
        return sums / counts

"""Pooling ops of the ONNX frontend against onnxruntime and onnx.reference: MaxPool and
AveragePool with strides, pads, ceil mode, auto_pad and count_include_pad, the window path
(dilations, Indices), and the global pools (split from test_onnx_loader.py, same method)."""

from __future__ import annotations

from typing import Any

import pytest
from onnx_cases import check, normal, one


def window(
    kernel: list[int], strides: list[int] | None = None, pads: list[int] | None = None, **kw: Any
) -> dict:
    """Pooling attributes, written compactly."""
    return (
        {"kernel_shape": kernel}
        | ({"strides": strides} if strides else {})
        | ({"pads": pads} if pads else {})
        | kw
    )


POOLS = [
    ("MaxPool", (1, 2, 8, 8), window([2, 2], [2, 2])),
    ("MaxPool", (2, 2, 7, 9), window([3, 3], [2, 2], [1, 1, 1, 1])),
    ("MaxPool", (1, 2, 8, 8), window([3, 3], [2, 2], ceil_mode=1)),
    ("MaxPool", (1, 1, 4, 4), window([2, 2], [2, 2], [0, 0, 1, 1], ceil_mode=1)),
    ("MaxPool", (1, 2, 7, 8), window([3, 3], [2, 2], auto_pad="SAME_UPPER")),
    ("MaxPool", (2, 3, 11), window([3], [2], [1, 1])),
    ("AveragePool", (1, 3, 8, 8), window([2, 2], [2, 2])),
    ("AveragePool", (2, 2, 7, 9), window([3, 3], [2, 2], [1, 1, 1, 1])),
    ("AveragePool", (1, 2, 5, 5), window([3, 3], None, [1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", (1, 1, 6, 6), window([3, 3], [2, 2], [1, 1, 1, 1], ceil_mode=1)),
    ("AveragePool", (1, 2, 6, 7), window([3, 3], [2, 2], [1, 1, 1, 1], ceil_mode=1, count_include_pad=1)),
    ("AveragePool", (1, 2, 7, 7), window([2, 2], [2, 2], ceil_mode=1)),
    ("AveragePool", (1, 2, 6, 7), window([2, 3], auto_pad="SAME_LOWER")),
    ("AveragePool", (2, 3, 10), window([4], [3], ceil_mode=1)),
]


@pytest.mark.parametrize(("op", "shape", "attrs"), POOLS)
def test_pool(rng, op: str, shape, attrs) -> None:
    x = normal(rng, *shape)
    check(one(op, ["x"], {"x": x}, **attrs), {"x": x})


def test_pool_dilations_and_indices_take_the_window_path(rng) -> None:
    """What the 2-D pooling primitives cannot do (dilations, Indices) is lowered by window gathering."""
    x = normal(rng, 1, 2, 6, 7)
    check(one("MaxPool", ["x"], {"x": x}, kernel_shape=[2, 2], dilations=[2, 2]), {"x": x})
    model = one("MaxPool", ["x"], {"x": x}, kernel_shape=[2, 2], strides=[2, 2], outputs={"y": 1, "idx": 7})
    check(model, {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 7)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(rng, op: str, shape) -> None:
    x = normal(rng, *shape)
    check(one(op, ["x"], {"x": x}), {"x": x})

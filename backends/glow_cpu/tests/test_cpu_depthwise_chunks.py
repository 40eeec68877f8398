"""Depthwise convolutions and phase-split pooling split their input planes a chunk at a time
(``phase_planes.by_plane_chunks``): shapes with one plane per chunk, several chunks with a partial
last one, strides 1 and 2 (the stride-2 phase rows copied as vectors, odd and even widths),
a channel multiplier and padding, on 1 and 2 threads, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import conv_model, pool_model
from glow_cpu.kernels.conv import Geometry
from glow_cpu.kernels.phase_planes import PLANE_CHUNK_BYTES
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import max_relative_error

# (batch, channels, height, width, out channels, kernel, stride, pad, group)
DEPTHWISE = [
    (2, 96, 7, 7, 96, 3, 1, 1, 96),  # 81-float planes: 101 per chunk, 192 planes -> 101 + 91
    (3, 40, 13, 13, 40, 3, 2, 1, 40),  # stride 2, odd width: phase rows of 7 and 7 columns
    (1, 8, 70, 70, 8, 3, 2, 1, 8),  # stride 2, 36-column phase rows (a whole and a partial vector)
    (2, 16, 9, 12, 32, 3, 1, 1, 16),  # channel multiplier 2
    (1, 4, 100, 90, 4, 5, 2, 2, 4),  # one plane per chunk (its phase planes outgrow 32 KB)
]


def _chunk(shape: tuple[int, ...]) -> int:
    n, c, h, w, cout, k, s, pad, group = shape
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    g = Geometry(n, c, h, w, cout, k, k, oh, ow, s, s, (pad,) * 4, 1, 1, group)
    return max(1, PLANE_CHUNK_BYTES // (4 * g.chan))


def test_the_shapes_cover_one_and_several_chunks():
    chunks = [(-(-shape[0] * shape[1] // _chunk(shape))) for shape in DEPTHWISE]
    assert max(chunks) > 1 and _chunk(DEPTHWISE[-1]) == 1
    first = DEPTHWISE[0]
    assert first[0] * first[1] % _chunk(first) != 0  # a partial last chunk


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", DEPTHWISE, ids=["x".join(map(str, s)) for s in DEPTHWISE])
def test_depthwise_matches_reference(shape, threads, rng):
    model, feeds, output = conv_model(shape, "bias_relu", int(rng.integers(1 << 30)))
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    compiled = glow_core.compile(model, backend="cpu", options={"threads": threads, "parallel_work": 0})
    got = compiled.run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert max_relative_error({output: got}, {output: expected}) < 1e-5


def _pool_model(op: str, shape: tuple[int, int, int, int], kernel: int, stride: int, pad: int):
    attrs = {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4}
    if op == "AveragePool":
        attrs["count_include_pad"] = 1
    return pool_model(op, shape, **attrs)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "pad"),
    [((2, 64, 15, 15), 3, 2, 1), ((1, 8, 57, 57), 3, 2, 1), ((3, 100, 6, 6), 2, 1, 1)],
    ids=["resnet-like", "odd-57", "many-small-planes"],
)
def test_padded_pooling_matches_reference(op, shape, kernel, stride, pad, threads, rng):
    model = _pool_model(op, shape, kernel, stride, pad)
    x = rng.standard_normal(shape).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    compiled = glow_core.compile(model, backend="cpu", options={"threads": threads, "parallel_work": 0})
    got = compiled.run({"x": x})["y"]
    assert got.shape == expected.shape and np.isfinite(got).all()
    assert max_relative_error({"y": got}, {"y": expected}) < 1e-5

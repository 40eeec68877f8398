"""1x1 convolutions much deeper than wide, cut by depth between two threads
(``kernels/conv_depth_split.py``): each thread multiplies half of the input channels into a
partial result, and a second phase adds the partials through the fused chain.

Checked against onnx's reference evaluator within the float32 tolerance, with outputs
poisoned before each run (an element no part wrote shows as non-finite), and bit-equal to
one thread at every thread count: the product sums its depth in the same two blocks
whichever threads run them.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import conv_model
from glow_conformance.compare import TOLERANCE
from glow_cpu.kernels import conv, conv_depth_split
from glow_cpu.kernels.conv import Geometry
from onnx import reference

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

# (batch, channels, height, width, out channels, kernel, stride, pad, group)
SHAPES = [
    (1, 512, 14, 14, 128, 1, 1, 0, 1),  # two blocks of 256 (KC) at every thread count
    (1, 1024, 7, 7, 256, 1, 1, 0, 1),  # blocks of 512 instead of four of 256
    (1, 384, 9, 11, 96, 1, 1, 0, 1),  # blocks of 192, a plane no vector divides
]


def _run(model, feeds, threads: int) -> dict[str, np.ndarray]:
    options = {"threads": threads, "parallel_work": 0, "cache": False, "winograd": False}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)
    for name, value in got.items():
        assert np.isfinite(value).all(), f"{name}: an element no part wrote kept its poison"
    return got


@pytest.mark.parametrize("epilogue", ["bias_residual_relu", "bias_relu", "none"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[1]}to{s[4]}at{s[2]}x{s[3]}")
def test_depth_split_matches_the_reference_and_one_thread(shape, epilogue, registry, monkeypatch):
    split: list[int] = []
    emit = conv.emit_depth_split
    record = lambda k, g, gemm: (split.append(k.parts), emit(k, g, gemm))  # noqa: E731
    monkeypatch.setattr(conv, "emit_depth_split", record)
    model, feeds, output = conv_model(shape, epilogue, seed=sum(shape) * 104729 + len(epilogue))
    one = _run(model, feeds, threads=1)
    expected = reference.ReferenceEvaluator(model).run(None, feeds)[0]
    assert relative_error(one[output], expected) <= TOLERANCE[ElemKind.float32]
    assert split == [], "one thread has one part: nothing to cut"
    for threads in (2, 3):
        got = _run(model, feeds, threads)
        assert np.array_equal(got[output], one[output]), f"{threads} threads differ from one"
    assert split == [2], "two threads cut the depth; three split the output as before"
    monkeypatch.setattr(conv_depth_split, "DEPTH_SPLIT", False)
    assert np.array_equal(_run(model, feeds, 2)[output], one[output])


def _geometry(n: int, c: int, cout: int, group: int = 1) -> Geometry:
    return Geometry(n, c, 14, 14, cout, 1, 1, 14, 14, 1, 1, (0, 0, 0, 0), 1, 1, group)


@pytest.mark.parametrize(
    ("geometry", "halves"),
    [
        (_geometry(1, 1024, 256), True),  # ResNet-50's 1024 -> 256 on 14x14
        (_geometry(1, 512, 256), True),  # exactly twice as deep as wide
        (_geometry(1, 256, 64), False),  # one block: halving it would change the sums
        (_geometry(1, 512, 512), False),  # the input is no larger than the result
        (_geometry(2, 1024, 256), False),  # a batch: the parts split images' columns
        (_geometry(1, 1024, 256, group=2), False),
        (_geometry(1, 1023, 256), False),  # odd depth
    ],
)
def test_which_products_sum_their_depth_in_two_halves(geometry, halves):
    assert conv_depth_split.two_depth_blocks(geometry) is halves

"""Transposes that swap the contiguous dimension run in 8 x 8 register tiles
(``kernels/transpose_tiles.py``); every element must land where numpy puts it."""

from __future__ import annotations

import numpy as np
import pytest
from glow_cpu.kernels.transpose_tiles import tile_plan

import glow_core
from glow_core.graph import Module
from glow_core.types import ElemKind


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("shape", "perm", "elem"),
    [
        ((1, 128, 4, 64), (0, 2, 3, 1), ElemKind.float32),  # attention's K: [heads, head_dim, seq]
        ((2, 16, 24), (0, 2, 1), ElemKind.float32),
        ((3, 8, 5, 16), (0, 3, 2, 1), ElemKind.int32),  # a dimension between the swapped two
        ((2, 3, 16, 8), (2, 0, 3, 1), ElemKind.float32),
        ((2, 12, 20), (0, 2, 1), ElemKind.float32),  # not multiples of 8: element by element
        ((2, 16, 24), (0, 2, 1), ElemKind.float16),  # 2-byte elements: element by element
    ],
)
def test_transpose_matches_numpy(shape, perm, elem, threads, rng):
    m = Module()
    b = m.create_function().builder()
    b.save(b.Transpose(b.placeholder("x", shape, elem), shuffle=perm), "y")
    x = (rng.standard_normal(shape) * 100).astype(elem.dtype)
    options = {"threads": threads, "parallel_work": 0}
    got = glow_core.compile(m, backend="cpu", options=options).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x.transpose(perm))


def test_tile_plan_takes_only_transposes_of_the_contiguous_dimension():
    assert tile_plan((4, 64, 128), (8192, 128, 1), (64, 1, 256), 4) == (2, 1)
    assert tile_plan((4, 128, 64), (8192, 64, 1), (64, 256, 1), 4) is None  # rows move, runs stay
    assert tile_plan((4, 64, 128), (8192, 128, 1), (64, 1, 256), 2) is None  # not 4-byte elements
    assert tile_plan((4, 60, 128), (7680, 128, 1), (60, 1, 240), 4) is None  # 60 is no multiple of 8

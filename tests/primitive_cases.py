"""Helpers the primitive tests share: stable per-test seeds, the declared sampling, the
type rule and reference of a spec called with its attributes completed, and the naive
float64 convolution oracle."""

from __future__ import annotations

import itertools
import zlib
from typing import Any

import numpy as np
from hypothesis import settings

from glow_core.spec import OpSpec
from glow_core.types import Type

HYPOTHESIS = settings(max_examples=50, deadline=None)


def seed_of(test_id: str) -> int:
    """A stable seed per test id, so every test sees different data."""
    return zlib.crc32(test_id.encode())


def sample_inputs(
    spec: OpSpec, types: list[Type], attrs: dict[str, Any], rng: np.random.Generator
) -> list[np.ndarray]:
    """The spec's own ``sample`` when it has one (positive Log inputs, valid Gather indices)."""
    return spec.sample_inputs(rng, types, attrs)


def infer(spec: OpSpec, types: list[Type], attrs: dict[str, Any]) -> Type:
    return spec.infer_type(types, spec.complete_attrs(attrs))


def evaluate(spec: OpSpec, arrays: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.asarray(spec.evaluate(arrays, spec.complete_attrs(attrs)))


def naive_conv(
    x: np.ndarray, w: np.ndarray, strides: tuple, pads: tuple, dilations: tuple, group: int
) -> np.ndarray:
    """Direct float64 convolution by loops; pads are (top, left, bottom, right)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, _, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    cout_g = cout // group
    out = np.zeros((n, cout, oh, ow))
    for b, o, i, j in itertools.product(range(n), range(cout), range(oh), range(ow)):
        g = o // cout_g
        acc = 0.0
        for ci, p, q in itertools.product(range(cin_g), range(kh), range(kw)):
            y = i * strides[0] - pads[0] + p * dilations[0]
            z = j * strides[1] - pads[1] + q * dilations[1]
            if 0 <= y < h and 0 <= z < wd:
                acc += x[b, g * cin_g + ci, y, z] * w[o, ci, p, q]
        out[b, o, i, j] = acc
    return out

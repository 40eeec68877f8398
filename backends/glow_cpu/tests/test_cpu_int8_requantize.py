"""The int8 kernels' requantization (``int8_conv.round_to_output``: clamp, then one float64
addition of 1.5 * 2**52 + the output offset rounds half to even and leaves the integer in the
low bits) against the interpreter's float64 ``clip(roundeven(v) + o, low, high)``, on the
values where a shortcut would slip: exact ties (power-of-two multipliers make every other
sum land on .5), sums far outside the output range (huge multipliers, where the clamp must
come before the addition), negative multipliers, and tight saturation bounds; for every
kernel that requantizes (pairs, quads, depthwise, dense), 1 and 3 threads."""

from __future__ import annotations

import numpy as np
import pytest
from glow_conformance.quantized_models import SOURCE_KINDS, integer_layer

import glow_core
from glow_core import Builder, Module

# name: (kind, input shape, weight shape, source kind, attributes)
_LAYERS = {
    "pointwise": ("QuantizedConv", (1, 13, 7, 9), (11, 13, 1, 1), "i8", {"input_offset": -3}),
    "conv3x3-strided": (
        "QuantizedConv",
        (2, 5, 9, 11),
        (7, 5, 3, 3),
        "u8",
        {"pads": (1, 1, 1, 1), "strides": (2, 2), "input_offset": 140},
    ),
    "depthwise": (
        "QuantizedConv",
        (1, 9, 7, 37),
        (9, 1, 3, 3),
        "i8",
        {"pads": (1, 1, 1, 1), "group": 9, "input_offset": 5},
    ),
    "dense": ("QuantizedFullyConnected", (6, 29), (29, 16), "i8", {"input_offset": -11}),
}
_BOUNDS = {
    "int8-offset": {"output_offset": 7},
    "int8-relu-tight": {"output_offset": -20, "low": -20, "high": 60},
    "uint8": {"output_kind": "uint8", "output_offset": 131, "low": 0, "high": 255},
}


WEIGHT_RANGE = 16
"""Weights in [-16, 16): sums small enough that a multiplier of 2**-4 .. 2**-6 keeps most
results in range while putting one sum in 16 .. 64 exactly on a tie."""


def _multipliers(channels: int, depth: int) -> np.ndarray:
    """Per channel: powers of two (ties), a huge one (sums far past the bounds), a tiny one
    (everything rounds to the offset), a negative one, and ordinary ones."""
    typical = 40 / (np.sqrt(depth) * 75 * WEIGHT_RANGE * 0.58)  # std of the weights ~ 0.58 * 16
    pool = [2.0**-5, 2.0**-4, 1e30, 1e-30, -typical, typical, 2.0**-6, typical * 1.37]
    return np.array([pool[c % len(pool)] for c in range(channels)], np.float64)


def _layer(rng, kind, x_shape, w_shape, source, attrs) -> tuple[Module, dict]:
    return integer_layer(
        rng, kind, x_shape, w_shape, source, weight_low=-WEIGHT_RANGE, weight_high=WEIGHT_RANGE,
        bias_bound=3000, multipliers=_multipliers, **attrs,
    )  # fmt: skip


@pytest.mark.parametrize("layer", sorted(_LAYERS))
@pytest.mark.parametrize("bounds", sorted(_BOUNDS))
@pytest.mark.parametrize(("threads", "dot"), [(1, "pairs"), (3, "pairs"), (3, "quads")])
def test_requantization_equals_the_float64_reference(rng, layer, bounds, threads, dot):
    kind, x_shape, w_shape, source, attrs = _LAYERS[layer]
    m, inputs = _layer(rng, kind, x_shape, w_shape, source, {**attrs, **_BOUNDS[bounds]})
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    options = {"threads": threads, "parallel_work": 0, "int8_dot": dot}
    got = glow_core.compile(m, "cpu", options=options).run(inputs)["out"]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    low, high = _BOUNDS[bounds].get("low", -128), _BOUNDS[bounds].get("high", 127)
    assert (expected == low).any() and (expected == high).any(), "both bounds are reached"
    assert len(np.unique(expected)) > 8, "the case saturates: it would test little"


def test_ties_occur_in_the_cases(rng):
    """The power-of-two channels do put sums exactly on .5 (else the test above proves little):
    the pointwise layer's float64 values before rounding, computed with numpy."""
    kind, x_shape, w_shape, source, attrs = _LAYERS["pointwise"]
    m, inputs = _layer(rng, kind, x_shape, w_shape, source, {**attrs, **_BOUNDS["int8-offset"]})
    weights = m.constants["w"].value.astype(np.int64)[:, :, 0, 0]
    bias, mult = m.constants["bias"].value, m.constants["mult"].value
    x = inputs["x"].astype(np.int64) - attrs["input_offset"]
    acc = np.einsum("oc,nchw->nohw", weights, x) + bias[None, :, None, None]
    value = acc * mult[None, :, None, None]
    ties = np.abs(value - np.floor(value)) == 0.5
    powers = np.log2(np.abs(mult)) % 1 == 0
    assert ties[:, powers].sum() >= 5


@pytest.mark.parametrize("bounds", sorted(_BOUNDS))
@pytest.mark.parametrize("threads", [1, 3])
def test_quantized_add_rounds_ties_like_the_reference(rng, bounds, threads):
    """QuantizedAdd shares the rounding: multipliers 0.5 and 0.25 put a quarter of the sums
    exactly on .5; an odd shape leaves a scalar tail."""
    m = Module()
    b = Builder(m.create_function())
    shape = (3, 45)
    a = b.placeholder("a", shape, elem=SOURCE_KINDS["i8"][0])
    c = b.placeholder("c", shape, elem=SOURCE_KINDS["u8"][0])
    attrs = {"lhs_offset": 3, "rhs_offset": 120, "lhs_multiplier": 0.5, "rhs_multiplier": 0.25}
    b.save(b.create("QuantizedAdd", a, c, **attrs, **_BOUNDS[bounds]), "out")
    inputs = {
        "a": rng.integers(-128, 128, shape).astype(np.int8),
        "c": rng.integers(0, 256, shape).astype(np.uint8),
    }
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    options = {"threads": threads, "parallel_work": 0}
    np.testing.assert_array_equal(glow_core.compile(m, "cpu", options=options).run(inputs)["out"], expected)
    value = (inputs["a"] - 3.0) * 0.5 + (inputs["c"] - 120.0) * 0.25
    assert (np.abs(value - np.floor(value)) == 0.5).sum() > 20

"""The int8 dense kernel (kernels/int8_dense.py: output channels across the lanes, one
broadcast input pair or quad per step of K): bit-equal to the interpreter's integer result
and to numpy's int64 arithmetic, in both layouts, for K not a multiple of the pair or quad,
channel counts that leave partial vectors and panels, several images, int8 and uint8
inputs with extreme zero points, 1 and 3 threads (threads split images and panels)."""

from __future__ import annotations

import numpy as np
import pytest
from glow_conformance.quantized_models import integer_layer
from int8_checks import equal_to_the_reference_twice

import glow_core

_UINT8 = {"output_kind": "uint8", "low": 0, "high": 255}
# name: (input shape [n, k], weight shape [k, m], source kind, attributes)
_CASES = {
    "k-odd-partial-vector": ((1, 37), (37, 19), "i8", {"input_offset": -4, "output_offset": 9}),
    "k302-images-partial-panel": ((5, 302), (302, 45), "u8", {"input_offset": 255, **_UINT8}),
    "k-quad-rest-3": ((3, 23), (23, 64), "i8", {"input_offset": -128, "low": 0}),
    "classifier": ((2, 1280), (1280, 1000), "i8", {"input_offset": 7, "output_offset": -3}),
    "k1": ((4, 1), (1, 9), "u8", {"input_offset": 0, **_UINT8, "output_offset": 100}),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize(("threads", "dot"), [(1, "pairs"), (3, "pairs"), (1, "quads"), (3, "quads")])
def test_dense_kernel_equals_the_integer_reference(rng, case, threads, dot):
    x_shape, w_shape, source, attrs = _CASES[case]
    m, inputs = integer_layer(rng, "QuantizedFullyConnected", x_shape, w_shape, source, **attrs)
    options = {"threads": threads, "parallel_work": 0, "int8_dot": dot}
    expected = equal_to_the_reference_twice(rng, m, inputs, source, options)[-1]
    if expected.size > 40:
        assert len(np.unique(expected)) > 10, "the case saturates: it would test little"


def test_dense_kernel_matches_numpy_int64(rng):
    """Independent of the interpreter: the int64 product and the float64 requantization."""
    x_shape, w_shape, source, attrs = _CASES["k302-images-partial-panel"]
    m, inputs = integer_layer(rng, "QuantizedFullyConnected", x_shape, w_shape, source, **attrs)
    w, bias, mult = (m.constants[name].value for name in ("w", "bias", "mult"))
    acc = (inputs["x"].astype(np.int64) - attrs["input_offset"]) @ w.astype(np.int64) + bias
    want = np.clip(np.round(acc * mult), 0, 255).astype(np.uint8)  # np.round: half to even
    got = glow_core.compile(m, "cpu", options={"threads": 1}).run(inputs)["out"]
    np.testing.assert_array_equal(got, want)

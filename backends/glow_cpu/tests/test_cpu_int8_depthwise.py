"""The int8 depthwise kernel (kernels/int8_depthwise.py): bit-equal to the interpreter's
integer result on seeded full-range inputs, across strides, paddings read as nonzero zero
points, widths that leave partial 16-output chunks and partial copy runs, per-channel
multipliers, int8 and uint8, 1 and 3 threads; and its IR compiles for an AVX-512 CPU."""

from __future__ import annotations

import numpy as np
import pytest
from bundle_helpers import bundles_compile_in_a_child
from glow_conformance.quantized_models import integer_layer
from int8_checks import equal_to_the_reference_twice

import glow_core

_UINT8 = {"output_kind": "uint8", "low": 0, "high": 255}

# name: (input shape, filter shape, source kind, attributes); group = channels
_CASES = {
    # MobileNetV2's stride-1 3x3: rows of 2 full chunks and a rest, 2 copy runs and a rest
    "3x3-s1-pad-offset": ((1, 7, 9, 37), (7, 1, 3, 3), "i8", {"pads": (1, 1, 1, 1), "input_offset": -9}),
    # its stride-2 3x3 (pads 1): the column phases swap (left pad odd)
    "3x3-s2-pad-offset": (
        (2, 5, 13, 70),
        (5, 1, 3, 3),
        "i8",
        {"pads": (1, 1, 1, 1), "strides": (2, 2), "input_offset": 17},
    ),
    # uneven pads, an even left pad, stride 2, output offset, a fused ReLU's low clamp
    "3x3-s2-uneven": (
        (1, 3, 11, 33),
        (3, 1, 3, 3),
        "i8",
        {"pads": (0, 2, 1, 0), "strides": (2, 2), "input_offset": -128, "output_offset": -20, "low": -20},
    ),
    # uint8 with a zero point above 128, stride 1 by 3 and a 5x3 dilated window
    "5x3-dilated-u8": (
        (1, 4, 12, 50),
        (4, 1, 5, 3),
        "u8",
        {"pads": (2, 3, 2, 1), "dilations": (2, 2), "strides": (1, 3), "input_offset": 131, **_UINT8},
    ),
    # the 1x1 layer a folded BatchNorm leaves (96 x 112 x 112 in MobileNetV2), narrower
    "1x1-batchnorm": ((1, 9, 6, 45), (9, 1, 1, 1), "i8", {"input_offset": 3, "output_offset": 4}),
    # a 7x7 plane (the last layers): every column in the copy's scalar rest
    "3x3-small-plane-u8": (
        (1, 11, 7, 7),
        (11, 1, 3, 3),
        "u8",
        {"pads": (1, 1, 1, 1), "input_offset": 255, **_UINT8},
    ),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("threads", [1, 3])
def test_int8_depthwise_equals_the_integer_reference(rng, case, threads):
    shape, w_shape, source, attrs = _CASES[case]
    m, inputs = integer_layer(
        rng, "QuantizedConv", shape, w_shape, source, weight_low=-128, group=shape[1], **attrs
    )
    options = {"threads": threads, "parallel_work": 0}
    for expected in equal_to_the_reference_twice(rng, m, inputs, source, options):
        assert len(np.unique(expected)) > 10, "the case saturates: it would test little"


def test_int8_depthwise_matches_a_numpy_window_sum(rng):
    """Independent of the interpreter: the float64 formula on a numpy window sum."""
    shape, w_shape = (1, 6, 10, 35), (6, 1, 3, 3)
    attrs = {"pads": (1, 1, 1, 1), "strides": (2, 2), "input_offset": -11, "output_offset": 2}
    m, inputs = integer_layer(rng, "QuantizedConv", shape, w_shape, "i8", group=6, **attrs)
    got = glow_core.compile(m, "cpu", options={"threads": 1}).run(inputs)["out"]
    consts = {name: c.value for name, c in m.constants.items()}
    w, bias, mult = consts["w"].astype(np.int64), consts["bias"], consts["mult"]
    x = np.pad(inputs["x"].astype(np.int64) + 11, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = got.shape[2:]
    acc = np.zeros(got.shape, np.int64)
    for ky in range(3):
        for kx in range(3):
            window = x[:, :, ky : ky + 2 * oh : 2, kx : kx + 2 * ow : 2]
            acc += window * w[:, 0, ky, kx][None, :, None, None]
    value = np.round((acc + bias[None, :, None, None]) * mult[None, :, None, None]) + 2
    np.testing.assert_array_equal(got, np.clip(value, -128, 127).astype(np.int8))


def test_int8_depthwise_compiles_for_an_avx512_cpu(tmp_path):
    """The kernel's IR compiles for an AVX-512 CPU (LLVM's loop vectorizer aborted the
    process on small loops there: test_cpu_pool_window.py), stride 1 and 2, int8 and uint8.
    In a child process, so an abort fails this test."""
    script = f"""
import numpy as np
import glow_core
from glow_conformance.quantized_models import integer_layer
rng = np.random.default_rng(0)
for source, stride in (("i8", 1), ("u8", 2), ("i8", 2)):
    m, _ = integer_layer(rng, "QuantizedConv", (1, 8, 15, 40), (8, 1, 3, 3), source, group=8,
                         pads=(1, 1, 1, 1), strides=(stride, stride), input_offset=3)
    glow_core.bundle(m, {str(tmp_path)!r} + f"/{{source}}{{stride}}", name="dw",
                     target="x86_64-unknown-linux-gnu", cpu="emeraldrapids")
print("compiled")
"""
    bundles_compile_in_a_child(script, tmp_path, objects=3)

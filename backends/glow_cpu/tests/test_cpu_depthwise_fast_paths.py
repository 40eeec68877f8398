"""MobileNet's faster depthwise paths against a float64 numpy reference. The flat kernel
(``kernels/depthwise_flat.py``: stride-1 "same"-width planes read as one run of vectors):
planes whose vectors are all peeled (7x7, 14x14), planes with a loop over column periods (28
and 56 wide, 3 wide), a 5x5 filter, asymmetric pads, filter rows wholly in the padding, a
channel multiplier. The 3x3 stride-2 kernel that reads each shared input row once
(``depthwise._stride2_carry``): wide and narrow rows, odd and even heights, peeled rows at
both ends, no top padding. The fused chains MobileNet uses, 1 and 3 threads. The runtime
poisons outputs before each run, so an element no kernel wrote shows up as non-finite. And
the kernels compile for an AVX-512 CPU (LLVM's vectorizer aborted on some small loops
there: test_cpu_pool_window.py)."""

from __future__ import annotations

import numpy as np
import pytest
from glow_conformance.compare import TOLERANCE
from test_cpu_depthwise import _model, _reference, check_against_float64

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

# (batch, channels, height, width, multiplier, kernel, stride, pads (top, left, bottom, right), dilation)
FLAT = [
    (1, 8, 7, 7, 1, 3, 1, (1, 1, 1, 1), 1),  # MobileNet's 7x7: 4 vectors, all peeled
    (2, 5, 14, 14, 1, 3, 1, (1, 1, 1, 1), 1),  # 14x14: 13 vectors
    (1, 3, 28, 28, 1, 3, 1, (1, 1, 1, 1), 1),  # a loop of 7-vector periods
    (1, 2, 9, 56, 1, 3, 1, (1, 1, 1, 1), 1),  # 56 wide, odd height
    (1, 3, 40, 3, 1, 3, 1, (1, 1, 1, 1), 1),  # 3 wide: a vector spans 5+ rows
    (1, 3, 11, 12, 1, 5, 1, (2, 2, 2, 2), 1),  # 5x5 filter, period 3
    (1, 4, 13, 10, 1, 3, 1, (0, 0, 2, 2), 1),  # asymmetric pads: all on the right and bottom
    (1, 4, 10, 20, 1, 3, 1, (0, 1, 0, 1), 1),  # no row padding: fewer output rows than input
    (1, 2, 9, 5, 1, 3, 1, (3, 1, 3, 1), 1),  # a filter row wholly in the padding
    (1, 4, 10, 12, 2, 3, 1, (1, 1, 1, 1), 1),  # channel multiplier 2
]
EPILOGUES = ["none", "bias_clip", "bias_residual_relu"]

# 3x3 stride 2: each shared input row read once, the next row's share in a row buffer
# (``depthwise._stride2_carry``)
STRIDE2 = [
    (1, 2, 41, 300, 1, 3, 2, (1, 1, 1, 1), 1),  # wide rows: a loop over interior chunks, odd height
    (1, 3, 60, 290, 1, 3, 2, (0, 1, 1, 0), 1),  # no top padding: the loop from row 0
    (2, 4, 8, 9, 1, 3, 2, (2, 2, 2, 2), 1),  # peeled rows at both ends, one wholly padded
    (1, 4, 12, 12, 2, 3, 2, (1, 1, 1, 1), 1),  # channel multiplier 2, even size
    (1, 3, 3, 40, 1, 3, 2, (0, 0, 0, 0), 1),  # one output row
]

# stride 2, at most 8 outputs wide: two output rows per vector (``depthwise._stride2_pairs``)
PAIRS = [
    (1, 8, 14, 14, 1, 3, 2, (1, 1, 1, 1), 1),  # MobileNetV2's 14x14 -> 7x7: 4 pairs, the last a single row
    (2, 3, 30, 16, 1, 3, 2, (1, 1, 1, 1), 1),  # 8 wide, 15 rows: a loop over pairs
    (1, 3, 41, 9, 1, 3, 2, (0, 0, 1, 1), 1),  # asymmetric pads, 5 wide, 21 rows
    (1, 4, 23, 11, 1, 5, 2, (2, 2, 2, 2), 1),  # 5x5 filter
    (1, 2, 10, 7, 2, 3, 2, (2, 2, 2, 2), 1),  # channel multiplier 2, filter rows wholly in the padding
    (1, 3, 5, 3, 1, 3, 2, (1, 1, 1, 1), 1),  # 2x2 output
]


def _case_id(case) -> str:
    return "x".join(map(str, case[:7])) + "p" + "".join(map(str, case[7]))


def _geometry(case):
    from glow_cpu.kernels.conv import Geometry

    n, c, h, w, mult, k, s, pads, d = case
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    return Geometry(n, c, h, w, c * mult, k, k, oh, ow, s, s, pads, d, d, c)


def test_the_cases_take_their_kernels(monkeypatch):
    """Each case list reaches the kernel it is meant to test (the first that fits)."""
    from glow_cpu.kernels import depthwise

    taken = []
    for name in ("depthwise_flat", "_stride2_pairs", "_stride2_carry"):
        monkeypatch.setattr(depthwise, name, lambda k, g, name=name: taken.append(name))
    for cases, name in ((FLAT, "depthwise_flat"), (PAIRS, "_stride2_pairs"), (STRIDE2[:2], "_stride2_carry")):
        for case in cases:
            taken.clear()
            depthwise.depthwise(None, _geometry(case))
            assert taken == [name], case


def test_the_cases_take_the_flat_kernel_and_the_others_do_not():
    from glow_cpu.kernels.depthwise_flat import flat_fits

    assert all(flat_fits(_geometry(case)) for case in FLAT)
    others = [
        (1, 4, 9, 32, 1, 3, 1, (1, 1, 1, 1), 1),  # rows of whole vectors: the row kernel
        (1, 4, 9, 14, 1, 3, 2, (1, 1, 1, 1), 1),  # stride 2
        (1, 4, 9, 14, 1, 3, 1, (0, 0, 0, 0), 1),  # narrower output
        (1, 4, 9, 13, 1, 3, 1, (1, 1, 1, 1), 1),  # a 13-vector column period
        (1, 4, 15, 14, 1, 3, 1, (2, 2, 2, 2), 2),  # dilated
    ]
    assert not any(flat_fits(_geometry(case)) for case in others)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("case", FLAT, ids=_case_id)
def test_flat_depthwise_matches_float64_reference(case, epilogue, threads, rng):
    check_against_float64(case, epilogue, threads, rng)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("epilogue", ["none", "bias_clip"])
@pytest.mark.parametrize("case", STRIDE2 + PAIRS, ids=_case_id)
def test_stride2_shared_rows_match_float64_reference(case, epilogue, threads, rng):
    check_against_float64(case, epilogue, threads, rng)


def test_a_non_finite_input_stays_in_its_own_outputs(rng):
    """A flat tap reads the next row's element for the lanes at a row's edge and clears it
    after: an infinity there must not leak into outputs whose window does not hold it."""
    case = FLAT[1]
    model, feeds, weight, bias, out_hw = _model(case, "none", rng)
    feeds["x"][0, 1, 4, 13] = np.inf  # the last column: the next row's first outputs read it flat
    got = glow_core.compile(model, backend="cpu", options={"threads": 1}).run(feeds)["y"]
    expected = _reference(case, "none", feeds, weight, bias, out_hw)
    finite = np.isfinite(expected)
    assert (~finite).sum() == 6  # the outputs whose window holds it: 3 rows x 2 columns
    assert np.array_equal(np.isfinite(got), finite)
    assert relative_error(got[finite], expected[finite]) <= TOLERANCE[ElemKind.float32]


@pytest.mark.parametrize("cpu", ["emeraldrapids", "znver3"])
def test_flat_kernels_compile_for_avx512_and_avx2_cpus(cpu, tmp_path):
    """In a child process, so an LLVM abort fails this test only."""
    from bundle_helpers import onnx_models_compile_for_cpu_in_a_child

    rng = np.random.default_rng(7)
    cases = [FLAT[0], FLAT[2], FLAT[5], STRIDE2[0], STRIDE2[2], PAIRS[0], PAIRS[1]]
    models = [_model(case, "bias_clip", rng)[0] for case in cases]
    onnx_models_compile_for_cpu_in_a_child(models, tmp_path, cpu)

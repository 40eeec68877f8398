"""Convolution and pooling references against naive float64 loops written here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from primitive_cases import evaluate, infer, naive_conv, seed_of

from glow_core.accuracy import relative_error
from glow_core.errors import ShapeError
from glow_core.spec import PRIMITIVES
from glow_core.types import Type

# ---- Convolution against a naive loop -------------------------------------------------


CONV_CASES = [
    pytest.param((1, 3, 6, 6), (4, 3, 3, 3), {}, id="plain"),
    pytest.param((1, 3, 8, 8), (4, 3, 3, 3), {"pads": (1, 1, 1, 1)}, id="same-pad"),
    pytest.param((2, 2, 7, 9), (3, 2, 3, 2), {"strides": (2, 3)}, id="strides"),
    pytest.param((1, 2, 6, 7), (2, 2, 2, 3), {"pads": (0, 2, 1, 0)}, id="asymmetric-pads"),
    pytest.param((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": (2, 3), "pads": (1, 0, 2, 1)}, id="dilation"),
    pytest.param((2, 4, 6, 5), (6, 2, 3, 2), {"strides": (2, 1), "group": 2}, id="groups"),
    pytest.param((1, 5, 6, 6), (5, 1, 3, 3), {"pads": (1, 1, 1, 1), "group": 5}, id="depthwise"),
    pytest.param((1, 3, 7, 7), (6, 1, 3, 3), {"group": 3, "strides": (2, 2)}, id="depthwise-multiplier"),
    pytest.param((1, 4, 5, 5), (2, 4, 1, 1), {}, id="pointwise"),
    pytest.param(
        (1, 4, 8, 8),
        (4, 2, 2, 3),
        {"group": 2, "strides": (3, 2), "pads": (2, 1, 0, 1), "dilations": (2, 1)},
        id="everything",
    ),
]


@pytest.mark.parametrize(("xshape", "wshape", "attrs"), CONV_CASES)
def test_convolution_matches_naive_loop(
    xshape: tuple, wshape: tuple, attrs: dict, request: pytest.FixtureRequest
) -> None:
    """Convolution's reference equals a direct loop, incl. stride, pads, dilation and groups."""
    rng = np.random.default_rng(seed_of(request.node.name))
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    spec = PRIMITIVES["Convolution"]
    full = spec.complete_attrs(attrs)
    out = evaluate(spec, [x, w], attrs)
    expected = naive_conv(x, w, full["strides"], full["pads"], full["dilations"], full["group"])
    assert out.shape == infer(spec, [Type.of(x), Type.of(w)], attrs).shape
    assert relative_error(out, expected) < 1e-12


# ---- pooling against naive loops ------------------------------------------------------


def naive_pool(
    x: np.ndarray, kernel: tuple, strides: tuple, pads: tuple, mode: str, count_include_pad: bool = False
) -> np.ndarray:
    """Max or average over each window by loops; padded positions never count for max."""
    n, c, h, w = x.shape
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    out = np.zeros((n, c, oh, ow))
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        values = []
        for p, q in itertools.product(range(kernel[0]), range(kernel[1])):
            y = i * strides[0] - pads[0] + p
            z = j * strides[1] - pads[1] + q
            if 0 <= y < h and 0 <= z < w:
                values.append(float(x[b, ch, y, z]))
        if mode == "max":
            out[b, ch, i, j] = max(values)
        else:
            divisor = kernel[0] * kernel[1] if count_include_pad else len(values)
            out[b, ch, i, j] = sum(values) / divisor
    return out


POOL_CASES = [
    pytest.param((1, 2, 6, 6), (2, 2), (2, 2), (0, 0, 0, 0), id="k2s2"),
    pytest.param((2, 2, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), id="k3s2p1"),
    pytest.param((1, 3, 5, 5), (3, 3), (1, 1), (1, 1, 1, 1), id="k3s1p1"),
    pytest.param((1, 1, 6, 7), (2, 3), (1, 2), (0, 1, 1, 2), id="asymmetric"),
    pytest.param((1, 2, 4, 4), (4, 4), (1, 1), (0, 0, 0, 0), id="global"),
]


@pytest.mark.parametrize(("xshape", "kernel", "strides", "pads"), POOL_CASES)
def test_maxpool_matches_naive_loop(
    xshape: tuple, kernel: tuple, strides: tuple, pads: tuple, request: pytest.FixtureRequest
) -> None:
    """MaxPool's reference equals a loop over in-bounds window elements."""
    rng = np.random.default_rng(seed_of(request.node.name))
    x = rng.standard_normal(xshape).astype(np.float32)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads}
    out = evaluate(PRIMITIVES["MaxPool"], [x], attrs)
    assert out.shape == infer(PRIMITIVES["MaxPool"], [Type.of(x)], attrs).shape
    assert relative_error(out, naive_pool(x, kernel, strides, pads, "max")) == 0.0


@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude-pad", "include-pad"])
@pytest.mark.parametrize(("xshape", "kernel", "strides", "pads"), POOL_CASES)
def test_avgpool_matches_naive_loop(
    xshape: tuple,
    kernel: tuple,
    strides: tuple,
    pads: tuple,
    count_include_pad: bool,
    request: pytest.FixtureRequest,
) -> None:
    """AvgPool's reference equals a loop, with pads counted in the divisor or not."""
    rng = np.random.default_rng(seed_of(request.node.name))
    x = rng.standard_normal(xshape).astype(np.float32)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "count_include_pad": count_include_pad}
    out = evaluate(PRIMITIVES["AvgPool"], [x], attrs)
    assert out.shape == infer(PRIMITIVES["AvgPool"], [Type.of(x)], attrs).shape
    expected = naive_pool(x, kernel, strides, pads, "avg", count_include_pad)
    assert relative_error(out, expected) < 1e-12


def test_avgpool_pad_counting_differs() -> None:
    """With padding the two divisor conventions really give different border values."""
    rng = np.random.default_rng(seed_of("avgpool-differs"))
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    attrs = {"kernel": (3, 3), "pads": (1, 1, 1, 1)}
    a = evaluate(PRIMITIVES["AvgPool"], [x], {**attrs, "count_include_pad": True})
    b = evaluate(PRIMITIVES["AvgPool"], [x], {**attrs, "count_include_pad": False})
    np.testing.assert_allclose(a[0, 0, 0, 0] * 9 / 4, b[0, 0, 0, 0], rtol=1e-12)
    np.testing.assert_allclose(a[0, 0, 1:3, 1:3], b[0, 0, 1:3, 1:3], rtol=1e-12)


@pytest.mark.parametrize("kind", ["AvgPool", "MaxPool"])
def test_pool_window_entirely_in_padding_is_refused(kind: str) -> None:
    """A window that covers no input element has no defined value, so the type rule must refuse it."""
    spec = PRIMITIVES[kind]
    attrs = {"kernel": (1, 1), "pads": (1, 1, 1, 1)}
    with pytest.raises(ShapeError):
        infer(spec, [Type((1, 1, 2, 2))], attrs)

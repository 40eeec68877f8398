"""Scale and offset choice (glow_core.quantization.schema): properties over random ranges."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glow_core.quantization.schema import SCHEMAS, QuantizationError, choose_params, weight_params
from glow_core.types import ElemKind

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
ranges = st.tuples(finite, finite).map(sorted).filter(lambda r: r[1] - r[0] > 1e-6 or r == [0.0, 0.0])


@settings(max_examples=300, deadline=None)
@given(ranges, st.sampled_from(SCHEMAS))
def test_zero_is_exact_and_the_range_fits(bounds, schema):
    low, high = bounds
    p = choose_params(low, high, schema)
    assert p.scale > 0
    assert p.qmin <= p.offset <= p.qmax
    assert p.dequantize(p.quantize(np.array([0.0])))[0] == 0.0
    # Every value of the (zero-widened) range is within half a step of its quantization,
    # but for the one rounding of the offset (asymmetric) that may push an end a half step out.
    values = np.linspace(min(low, 0.0), max(high, 0.0), 101)
    error = np.abs(p.dequantize(p.quantize(values)) - values)
    assert error.max() <= p.scale * (1.0 + 1e-9) + 1e-12


@settings(max_examples=200, deadline=None)
@given(ranges)
def test_schema_specific_shapes(bounds):
    low, high = bounds
    assert choose_params(low, high, "symmetric").offset == 0
    pow2 = choose_params(low, high, "pow2")
    assert pow2.offset == 0 and math.log2(pow2.scale).is_integer()
    assert pow2.scale >= choose_params(low, high, "symmetric").scale
    unsigned = choose_params(low, high, "symmetric-uint8")
    assert unsigned.elem is (ElemKind.uint8 if low >= 0 else ElemKind.int8)
    assert unsigned.offset == 0
    asymmetric = choose_params(low, high, "asymmetric")
    # asymmetric uses all 256 levels: its step is never coarser than symmetric's
    assert asymmetric.scale <= choose_params(low, high, "symmetric").scale * (1 + 1e-12)


def test_a_nonnegative_range_gets_all_uint8_levels():
    p = choose_params(0.0, 2.55, "symmetric-uint8")
    assert (p.elem, p.offset) == (ElemKind.uint8, 0)
    assert p.quantize(np.array([2.55]))[0] == 255


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_weights_per_channel_hit_127_and_stay_within_half_a_step(channels, width, seed):
    w = np.random.default_rng(seed).standard_normal((channels, width)) * np.arange(1, channels + 1)[:, None]
    scales, q = weight_params(w, 0, "symmetric")
    assert scales.shape == (channels,) and q.dtype == np.int8
    assert np.all(np.abs(q).max(axis=1) == 127)
    assert np.all(np.abs(q * scales[:, None] - w) <= scales[:, None] / 2 + 1e-12)
    pow2_scales, _ = weight_params(w, 0, "pow2")
    assert all(math.log2(s).is_integer() for s in pow2_scales)


@pytest.mark.parametrize(
    ("low", "high", "schema"), [(0.0, 1.0, "nonsense"), (1.0, 0.0, "symmetric"), (0.0, math.inf, "pow2")]
)
def test_bad_requests_are_refused(low, high, schema):
    with pytest.raises(QuantizationError):
        choose_params(low, high, schema)

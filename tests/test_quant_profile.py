"""Profiles (glow_core.quantization.profile, profiling, calibration): recording, the file,
and reading ranges back."""

from __future__ import annotations

import json

import numpy as np
import pytest

import glow_core
from glow_core.model_zoo import small_cnn
from glow_core.quantization.calibration import calibrated_range
from glow_core.quantization.profile import BINS, VERSION, Profile, ProfileError, TensorProfile


def test_histogram_doubling_keeps_every_count_in_its_range(rng):
    t = TensorProfile()
    batches = [rng.standard_normal(1000) * scale for scale in (0.01, 1.0, 300.0)]
    for batch in batches:
        t.record(batch)
    everything = np.concatenate(batches)
    assert (t.low, t.high) == (everything.min(), everything.max())
    assert t.counts.sum() == everything.size
    # Every value lies in its bin or (merged bins) a bin whose edges contain it.
    edges = t.edges
    expected = np.histogram(everything, bins=edges)[0]
    assert np.array_equal(t.counts, expected)
    assert t.reach >= np.abs(everything).max() and np.log2(t.reach).is_integer()


def test_non_finite_values_are_ignored(rng):
    t = TensorProfile()
    x = rng.standard_normal(50)
    t.record(np.concatenate([x, [np.nan, np.inf, -np.inf]]))
    assert (t.low, t.high, t.counts.sum()) == (x.min(), x.max(), 50)


def _calibration(rng, n=3):
    return [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(n)]


def test_profile_records_every_float_value_and_round_trips(rng, tmp_path):
    model = small_cnn()
    batches = _calibration(rng)
    profile = glow_core.profile(model, batches, "interpreter")
    assert profile.batches == 3
    assert profile["input"].low == min(b["input"].min() for b in batches)
    assert "block1/relu" in profile and profile["block1/relu"].low >= 0.0
    path = tmp_path / "p.json"
    profile.save(path)
    again = Profile.load(path)
    assert again.tensors.keys() == profile.tensors.keys()
    for name, t in profile.tensors.items():
        assert (again[name].low, again[name].high, again[name].reach) == (t.low, t.high, t.reach)
        assert np.array_equal(again[name].counts, t.counts)


def test_cpu_records_what_the_interpreter_records(rng):
    model, batches = small_cnn(), _calibration(rng, 2)
    on_cpu, reference = (
        glow_core.profile(model, batches, "cpu"),
        glow_core.profile(model, batches, "interpreter"),
    )
    for name, t in reference.tensors.items():
        np.testing.assert_allclose(
            [on_cpu[name].low, on_cpu[name].high], [t.low, t.high], rtol=1e-5, atol=1e-6
        )


def test_a_profile_of_another_version_is_refused(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "glow-profile", "version": VERSION + 1, "tensors": {}}))
    with pytest.raises(ProfileError, match=f"version {VERSION + 1}.*version {VERSION}"):
        Profile.load(path)
    path.write_text("{}")
    with pytest.raises(ProfileError, match="not a glow profile"):
        Profile.load(path)


def test_a_profile_of_another_model_is_refused_with_the_names(rng):
    profile = glow_core.profile(small_cnn(), _calibration(rng, 1), "interpreter")
    del profile.tensors["block1/relu"]
    profile.tensors["not/in/model"] = TensorProfile()
    with pytest.raises(
        ProfileError, match=r"missing from the profile: 'block1/relu'.*not in the model: 'not/in/model'"
    ):
        glow_core.compile(small_cnn(), "interpreter", precision=glow_core.Quantize(profile))


def test_no_calibration_batch_is_an_error():
    with pytest.raises(ProfileError, match="no calibration inputs"):
        glow_core.profile(small_cnn(), [], "interpreter")


def test_calibration_rules_narrow_the_range_of_outliers(rng):
    t = TensorProfile()
    t.record(np.concatenate([rng.standard_normal(100_000), [80.0, -60.0]]))
    assert calibrated_range(t, "minmax") == (t.low, t.high)
    for rule in ("percentile", "kl"):
        low, high = calibrated_range(t, rule)
        assert t.low <= low < -1.0 and 1.0 < high <= t.high
        assert high < 20.0, rule  # two outliers of 100,002 values do not set the range
    assert BINS % 4 == 0

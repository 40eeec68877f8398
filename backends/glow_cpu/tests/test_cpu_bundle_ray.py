"""Bundles over Ray Data: GlowPredictor per actor, results equal to one process's."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from bundle_helpers import assert_bit_identical

import glow_core
from glow_core.errors import BundleError, GlowError, InputError
from glow_core.integrations.ray_data import GlowPredictor, map_bundle, require_ray
from glow_core.model_zoo import MODELS

ROWS = 300  # a few hundred seeded images; not a multiple of the batch sizes below


@pytest.fixture(scope="module")
def cnn_bundle(tmp_path_factory):
    """small_cnn compiled for 4 rows a call: batches of 25 rows end in a partial call."""
    directory = tmp_path_factory.mktemp("cnn_bundle")
    glow_core.bundle(MODELS["small_cnn"](batch=4), directory, name="cnn", shared=True)
    return directory


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(19)
    return rng.standard_normal((ROWS, 3, 32, 32), dtype=np.float32)


def _single_process(directory, images: np.ndarray) -> np.ndarray:
    """The bundle run on each row in this process, one row per call padded to its batch."""
    function = glow_core.load_bundle(directory)["cnn"]
    rows = []
    for image in images:
        batch = np.repeat(image[None], 4, axis=0)
        rows.append(function.run({"input": batch})["output"][0])
    return np.stack(rows)


def test_predictor_maps_batches_of_any_size_in_order(cnn_bundle, images):
    predictor = GlowPredictor(cnn_bundle, output_columns={"output": "scores"}, keep_columns=["id"])
    expected = _single_process(cnn_bundle, images[:23])
    got = predictor({"input": images[:23], "id": np.arange(23)})  # 5 full calls and 3 rows
    assert set(got) == {"scores", "id"}
    assert_bit_identical({"scores": got["scores"]}, {"scores": expected})
    assert np.array_equal(got["id"], np.arange(23))
    assert np.abs(expected).max() > 0


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"image": np.zeros((2, 3, 32, 32), np.float32)}, "no column ['input']"),
        ({"input": np.zeros((2, 3, 32, 32), np.float64)}, "holds float64"),
        ({"input": np.zeros((2, 3, 16, 16), np.float32)}, "rows of shape (3, 16, 16)"),
        ([1, 2], 'batch_format="numpy"'),
    ],
)
def test_a_batch_that_does_not_match_the_bundle_is_refused(cnn_bundle, batch, message):
    with pytest.raises(InputError, match=re.escape(message)):
        GlowPredictor(cnn_bundle)(batch)


def test_bad_predictor_arguments_are_refused(cnn_bundle, tmp_path):
    with pytest.raises(BundleError, match="no input or output"):
        GlowPredictor(cnn_bundle, columns={"image": "pixels"})
    pair = tmp_path / "pair"
    glow_core.bundle({"a": MODELS["mlp"](), "b": MODELS["mlp"](batch=2)}, pair, name="pair", shared=True)
    with pytest.raises(BundleError, match="name the one to run"):
        GlowPredictor(pair)
    assert GlowPredictor(pair, entry="b").rows_per_call == 2


def test_missing_ray_is_said_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(GlowError, match=r'pip install "glow-core\[ray\]"'):
        require_ray()


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'glow-core[ray]'")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_two_actors_give_the_single_process_results(ray_instance, cnn_bundle, images):
    ds = ray_instance.data.from_items([{"id": i, "input": image} for i, image in enumerate(images)])
    mapped = map_bundle(ds, cnn_bundle, concurrency=2, batch_size=25, keep_columns=["id"])
    rows = mapped.take_all()
    assert len(rows) == ROWS
    order = np.argsort([row["id"] for row in rows])
    got = np.stack([rows[i]["output"] for i in order])
    assert_bit_identical({"output": got}, {"output": _single_process(cnn_bundle, images)})

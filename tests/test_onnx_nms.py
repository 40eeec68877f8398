"""NonMaxSuppression: computed in the graph, its output length resolved per call by a probe.

Random boxes (both coordinate formats, flipped corners, tied and thresholded scores) run
through a ``glow_core.load`` session on the interpreter and are compared exactly with
``onnx.reference`` and onnxruntime; a second call with other data gets another length.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_cases import model_of

import glow_core
from glow_core.accuracy import onnxruntime_outputs
from glow_core.errors import UnsupportedOpError
from glow_core.frontends.onnx import LoadTimeValueError, load_onnx


def nms_model(feeds: dict[str, np.ndarray], center: int = 0):
    names = list(feeds)
    node = helper.make_node("NonMaxSuppression", names, ["y"], name="nms", center_point_box=center)
    return model_of([node], feeds, outputs={"y": TensorProto.INT64}, opset=11)


def random_boxes(rng: np.random.Generator, batches: int, n: int, center: int) -> np.ndarray:
    """Boxes on a coarse grid (so overlaps are common), corners in either order for format 0."""
    start = rng.integers(0, 8, (batches, n, 2)).astype(np.float32)
    size = rng.integers(1, 5, (batches, n, 2)).astype(np.float32)
    if center:
        return np.concatenate([start + size / 2, size], axis=2)
    first, second = start, start + size
    flip = rng.random((batches, n, 1)) < 0.5
    a, b = np.where(flip, second, first), np.where(flip, first, second)
    return np.stack([a[..., 1], a[..., 0], b[..., 1], b[..., 0]], axis=2)  # y1, x1, y2, x2


def feeds_of(
    rng: np.random.Generator, batches: int, classes: int, n: int, center: int
) -> dict[str, np.ndarray]:
    return {
        "boxes": random_boxes(rng, batches, n, center),
        "scores": (rng.integers(0, 10, (batches, classes, n)) / 10).astype(np.float32),  # with ties
        "max_out": np.array([8], np.int64),
        "iou": np.array([0.25], np.float32),
        "score_min": np.array([0.15], np.float32),
    }


def expected(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    runtime = onnxruntime_outputs(model, feeds)["y"]
    np.testing.assert_array_equal(reference, runtime)  # the two oracles agree on these inputs
    return reference


@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_the_references_call_after_call(registry, rng: np.random.Generator, center: int) -> None:
    first = feeds_of(rng, batches=2, classes=3, n=12, center=center)
    model = nms_model(first, center)
    session = glow_core.load(model, backend="interpreter")
    lengths = set()
    for feeds in (first, *(feeds_of(rng, 2, 3, 12, center) for _ in range(2))):
        got = session.run(feeds)["y"]
        want = expected(model, feeds)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        lengths.add(len(want))
    assert len(lengths) > 1  # the output length really changed between calls


def test_nms_without_optional_thresholds(registry, rng: np.random.Generator) -> None:
    feeds = feeds_of(rng, batches=1, classes=2, n=7, center=0)
    feeds = {k: feeds[k] for k in ("boxes", "scores", "max_out")}
    model = nms_model(feeds)
    got = glow_core.load(model, backend="interpreter").run(feeds)["y"]
    # onnx.reference cannot run without iou_threshold; onnxruntime can.
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, feeds)["y"])


def test_plain_load_names_the_inputs_behind_the_length(rng: np.random.Generator) -> None:
    feeds = feeds_of(rng, batches=1, classes=1, n=5, center=0)
    with pytest.raises(LoadTimeValueError, match=r"how many boxes it selects depends on the data") as info:
        load_onnx(nms_model(feeds))
    assert set(info.value.inputs) >= {"boxes", "scores"}


def test_no_selected_box_is_refused_clearly(registry, rng: np.random.Generator) -> None:
    feeds = feeds_of(rng, batches=1, classes=1, n=5, center=0)
    feeds["score_min"] = np.array([2.0], np.float32)  # above every score
    session = glow_core.load(nms_model(feeds), backend="interpreter")
    with pytest.raises(UnsupportedOpError, match=r"selects no box for these inputs"):
        session.run(feeds)

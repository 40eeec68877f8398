"""ONNX ops outside the default domain: ai.onnx.ml (Binarizer, ArrayFeatureExtractor,
TreeEnsemble) and ai.onnx.preview.training (Adagrad, Adam, Momentum).

Each test builds a model importing only that domain (as exporters write them), loads it with
``load_onnx``, evaluates the glow graph and compares with ``onnx.reference`` on seeded random
inputs (onnxruntime too where it runs the op).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_cases import check, normal

from glow_core.accuracy import relative_error
from glow_core.errors import ModelLoadError, ShapeError, UnsupportedOpError
from glow_core.frontends.onnx import SUPPORTED_OPS, load_onnx
from glow_core.lowering.evaluate import evaluate

ML = "ai.onnx.ml"
TRAINING = "ai.onnx.preview.training"
_DOMAIN_OPSET = {ML: 5, TRAINING: 1}


def domain_model(
    op: str,
    domain: str,
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str] = ("y",),
    **attrs: Any,
) -> onnx.ModelProto:
    """A one-node model of ``domain`` importing no default-domain opset."""
    node = helper.make_node(op, list(feeds), list(outputs), domain=domain, name=f"{op.lower()}_node", **attrs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    graph = helper.make_graph(
        [node], "test", inputs, [helper.make_empty_tensor_value_info(n) for n in outputs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, _DOMAIN_OPSET[domain])])
    model.ir_version = 10
    return model


def test_domain_ops_are_listed() -> None:
    for op in ("Binarizer", "ArrayFeatureExtractor", "TreeEnsemble", "Adagrad", "Adam", "Momentum"):
        assert op in SUPPORTED_OPS


# ---- ai.onnx.ml ------------------------------------------------------------------------------


def test_binarizer(rng: np.random.Generator) -> None:
    x = normal(rng, 3, 4, 5)
    x[0, 0, 0] = 0.25  # exactly the threshold: not above
    model = domain_model("Binarizer", ML, {"x": x}, threshold=0.25)
    check(model, {"x": x}, engines=("ref", "ort"))
    x[0, 0, 1] = np.nan  # 0 (onnxruntime refuses NaN inputs, onnx.reference gives 0)
    check(model, {"x": x}, engines=("ref",))


@pytest.mark.parametrize(("shape", "index_shape"), [((3, 5), (3,)), ((2, 3, 6), (1, 4)), ((7,), (2,))])
def test_array_feature_extractor(rng: np.random.Generator, shape: tuple, index_shape: tuple) -> None:
    x = normal(rng, *shape)
    idx = rng.integers(0, shape[-1], index_shape).astype(np.int64)
    feeds = {"x": x, "i": idx}
    check(domain_model("ArrayFeatureExtractor", ML, feeds), feeds, engines=("ref",))


def random_forest(
    rng: np.random.Generator, trees: int, features: int, targets: int, modes: Sequence[int]
) -> dict[str, Any]:
    """TreeEnsemble attributes of ``trees`` random trees (depth <= 3) over a 0.5-step grid of splits.

    Nodes are numbered depth-first, true branch first, so the MEMBER sets are listed in node
    order (the spec) and in visiting order (onnx.reference) alike.
    """
    nodes: dict[str, list] = {
        k: [] for k in ("feature", "split", "mode", "true", "false", "true_leaf", "false_leaf", "missing")
    }
    leaf_targets: list[int] = []
    leaf_weights: list[float] = []
    members: list[float] = []

    def leaf() -> int:
        leaf_targets.append(int(rng.integers(targets)))
        leaf_weights.append(float(rng.standard_normal()))
        return len(leaf_targets) - 1

    def node(depth: int) -> int:
        index = len(nodes["feature"])
        mode = int(rng.choice(modes))
        for key, value in (
            ("feature", int(rng.integers(features))),
            ("split", float(rng.integers(-3, 4)) * 0.5),
            ("mode", mode),
            ("missing", int(rng.integers(2))),
        ):
            nodes[key].append(value)
        for key in ("true", "false", "true_leaf", "false_leaf"):
            nodes[key].append(0)
        if mode == 6:
            # No 0.0 member: onnx.reference reads a set until a falsy value, so 0.0 ends it early.
            grid = np.array([-3, -2, -1, 1, 2, 3]) * 0.5
            members.extend([*(float(v) for v in rng.choice(grid, 2, replace=False)), np.nan])
        for side in ("true", "false"):
            is_leaf = depth == 0 or rng.random() < 0.3
            nodes[side][index] = leaf() if is_leaf else node(depth - 1)
            nodes[f"{side}_leaf"][index] = int(is_leaf)
        return index

    roots = [node(3) for _ in range(trees)]
    attrs: dict[str, Any] = {
        "nodes_featureids": nodes["feature"],
        "nodes_splits": numpy_helper.from_array(np.asarray(nodes["split"], np.float32)),
        "nodes_modes": numpy_helper.from_array(np.asarray(nodes["mode"], np.uint8)),
        "nodes_truenodeids": nodes["true"],
        "nodes_falsenodeids": nodes["false"],
        "nodes_trueleafs": nodes["true_leaf"],
        "nodes_falseleafs": nodes["false_leaf"],
        "nodes_missing_value_tracks_true": nodes["missing"],
        "leaf_targetids": leaf_targets,
        "leaf_weights": numpy_helper.from_array(np.asarray(leaf_weights, np.float32)),
        "tree_roots": roots,
        "n_targets": targets,
    }
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.asarray(members, np.float32))
    return attrs


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("modes", [(0,), (0, 1, 2, 3, 4, 5), (0, 4, 6)])
def test_tree_ensemble(rng: np.random.Generator, aggregate: int, modes: tuple[int, ...]) -> None:
    attrs = random_forest(rng, trees=4, features=3, targets=3, modes=modes)
    # Values on the splits' grid, so equality, boundaries and set membership are all exercised.
    x = (rng.integers(-3, 4, (40, 3)) * 0.5).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values follow nodes_missing_value_tracks_true
    model = domain_model("TreeEnsemble", ML, {"x": x}, aggregate_function=aggregate, **attrs)
    check(model, {"x": x}, engines=("ref",))


def test_tree_ensemble_refusals(rng: np.random.Generator) -> None:
    attrs = random_forest(rng, trees=1, features=2, targets=2, modes=(0,))
    x = normal(rng, 4, 2)
    with pytest.raises(UnsupportedOpError, match=r"post_transform 1 is not supported"):
        load_onnx(domain_model("TreeEnsemble", ML, {"x": x}, post_transform=1, **attrs))
    with pytest.raises(UnsupportedOpError, match=r"\[N, features\] float tensor"):
        load_onnx(domain_model("TreeEnsemble", ML, {"x": normal(rng, 4, 2, 1)}, **attrs))


def test_ml_op_without_importer_names_its_domain() -> None:
    x = np.ones((2, 3), np.float32)
    model = domain_model("Normalizer", ML, {"x": x}, norm="L2")
    with pytest.raises(UnsupportedOpError, match=r"'Normalizer'.*domain 'ai.onnx.ml', opset 5"):
        load_onnx(model)


def test_default_domain_node_needs_the_default_opset() -> None:
    x = np.ones((2, 3), np.float32)
    model = domain_model("Binarizer", ML, {"x": x})
    model.graph.node.append(helper.make_node("Relu", ["y"], ["z"], name="relu"))
    model.graph.output.append(helper.make_empty_tensor_value_info("z"))
    with pytest.raises(ModelLoadError, match=r"default-domain op 'Relu'.*imports no opset of the default"):
        load_onnx(model)


# ---- ai.onnx.preview.training ----------------------------------------------------------------


def _optimizer_feeds(
    rng: np.random.Generator, step: int, roles: Sequence[str], shapes: Sequence[tuple[int, ...]]
) -> dict[str, np.ndarray]:
    feeds = {"R": np.asarray(0.1 + rng.random(), np.float32), "T": np.asarray(step, np.int64)}
    for role in roles:
        for i, shape in enumerate(shapes):
            value = normal(rng, *shape)
            feeds[f"{role}{i}"] = np.abs(value) if role == "H" else value  # squared-gradient sums
    return feeds


def _outputs(roles: Sequence[str], count: int) -> list[str]:
    return [f"{role}{i}_new" for role in roles for i in range(count)]


SHAPES = [((3,),), ((2,), (3, 4))]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("step", [0, 3])
def test_adagrad(rng: np.random.Generator, shapes: tuple, step: int) -> None:
    feeds = _optimizer_feeds(rng, step, "XGH", shapes)
    model = domain_model(
        "Adagrad",
        TRAINING,
        feeds,
        _outputs("XH", len(shapes)),
        decay_factor=0.1,
        epsilon=1e-5,
        norm_coefficient=0.01,
    )
    check(model, feeds, engines=("ref",))


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("step", [0, 1, 5])
def test_adam(rng: np.random.Generator, shapes: tuple, step: int) -> None:
    feeds = _optimizer_feeds(rng, step, "XGVH", shapes)
    attrs = {
        "alpha": 0.9,
        "beta": 0.8,
        "epsilon": 1e-3,
        "norm_coefficient": 0.01,
        "norm_coefficient_post": 0.02,
    }
    model = domain_model("Adam", TRAINING, feeds, _outputs("XVH", len(shapes)), **attrs)
    # onnx.reference returns a lone tensor's update in float64 (Python-float bias
    # correction); the spec keeps the input's type, as glow does. Compare the values.
    got = evaluate(load_onnx(model), feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for output, expected in zip(model.graph.output, want, strict=True):
        assert got[output.name].dtype == np.float32
        assert relative_error(got[output.name], np.asarray(expected)) < 1e-5, output.name


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("step", [0, 2])
@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum(rng: np.random.Generator, shapes: tuple, step: int, mode: str) -> None:
    feeds = _optimizer_feeds(rng, step, "XGV", shapes)
    attrs = {"alpha": 0.9, "beta": 0.7, "norm_coefficient": 0.01, "mode": mode}
    model = domain_model("Momentum", TRAINING, feeds, _outputs("XV", len(shapes)), **attrs)
    check(model, feeds, engines=("ref",))


def test_optimizer_refusals(rng: np.random.Generator) -> None:
    feeds = _optimizer_feeds(rng, 1, "XGV", ((3,),))
    bad_mode = domain_model(
        "Momentum", TRAINING, feeds, ["X", "V"], alpha=0.9, beta=0.1, norm_coefficient=0.0, mode="x"
    )
    with pytest.raises(UnsupportedOpError, match=r"mode 'x' is not one of standard, nesterov"):
        load_onnx(bad_mode)
    uneven = {k: v for k, v in feeds.items() if k != "V0"}
    model = domain_model("Adagrad", TRAINING, uneven, ["X"], decay_factor=0.1)
    with pytest.raises(ShapeError, match=r"takes R, T and 3 groups"):
        load_onnx(model)

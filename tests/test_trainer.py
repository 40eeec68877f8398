"""glow_core.Trainer: steps, evaluation and prediction sharing one set of weights, the ONNX
export checked in onnxruntime, refusals of bad input, and steps from several threads."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_core import SGD, Adam, ElemKind, Module, Trainer
from glow_core.errors import DifferentiationError, GlowError, InputError
from glow_core.training.onnx_export import ExportError
from tests.installed_backends import install_backend

N, D, H, C = 8, 6, 10, 4


def _relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12))


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w1": (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(H)).astype(np.float32),
        "w2": (rng.standard_normal((H, C)) / np.sqrt(H)).astype(np.float32),
        "b2": (0.1 * rng.standard_normal(C)).astype(np.float32),
    }


def _mlp(weights: dict[str, np.ndarray], batch: int = N) -> Module:
    module = Module("mlp")
    b = module.create_function().builder()
    x = b.placeholder("x", (batch, D))
    w = {name: b.constant(value, name=name) for name, value in weights.items()}
    b.save(b.FullyConnected(b.Relu(b.FullyConnected(x, w["w1"], w["b1"])), w["w2"], w["b2"]), "logits")
    return module


def _forward(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The MLP in float64 numpy: the oracle of predict."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    return np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]


def _batch(rng: np.random.Generator, rows: int = N) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((rows, D)).astype(np.float32)
    return x, np.argmax(x[:, :C], axis=1)


def _cnn(rng: np.random.Generator, batch: int) -> Module:
    """Conv + BatchNorm + Relu + MaxPool + AvgPool + FullyConnected over 1x8x8 images."""
    module = Module("cnn")
    b = module.create_function().builder()
    images = b.placeholder("images", (batch, 1, 8, 8))
    filt = b.constant((rng.standard_normal((4, 1, 3, 3)) / 3).astype(np.float32), name="filter")
    conv = b.conv(images, filt, b.constant(np.zeros(4, np.float32), name="conv_bias"), pads=(1, 1, 1, 1))
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    stats = [
        b.constant(v.copy(), name=n)
        for n, v in (("gamma", ones), ("beta", zeros), ("mean", zeros), ("var", ones))
    ]
    features = b.Relu(b.BatchNorm(conv, *stats))
    pooled = b.AvgPool(b.MaxPool(features, kernel=(2, 2), strides=(2, 2)), kernel=(2, 2), strides=(2, 2))
    w = b.constant((rng.standard_normal((16, C)) / 4).astype(np.float32), name="fc_weights")
    logits = b.FullyConnected(
        b.reshape(pooled, (batch, 16)), w, b.constant(np.zeros(C, np.float32), name="fc_bias")
    )
    b.save(b.Softmax(logits, axis=1), "probabilities")
    return module


def _images(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Images whose class is the quadrant holding a bright blob."""
    classes = rng.integers(0, C, rows)
    images = 0.1 * rng.standard_normal((rows, 1, 8, 8))
    for k, cls in enumerate(classes):
        images[k, 0, 4 * (cls % 2) : 4 * (cls % 2) + 3, 4 * (cls // 2) : 4 * (cls // 2) + 3] += 1.0
    return images.astype(np.float32), classes


def _onnxruntime(path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_step_evaluate_predict_share_the_weights(backend, install_registry, rng) -> None:
    install_backend(install_registry, backend)
    weights = _weights(rng)
    trainer = Trainer(_mlp(weights), optimizer=SGD(0.2, 0.9), backend=backend)
    x, y = _batch(rng)
    before = trainer.evaluate((x, y))["loss"]
    losses = [trainer.step((x, y)) for _ in range(15)]
    # The first step's loss is the loss of the initial weights, which evaluate computed too.
    assert abs(losses[0] - before) <= 1e-5 * abs(before)
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], losses
    assert trainer.steps == 15
    assert trainer.evaluate({"x": x, "labels": y})["accuracy"] == 1.0

    trained = trainer.weights()
    assert sorted(trained) == sorted(weights) == sorted(trainer.params)
    assert all(_relative_error(trained[k], weights[k]) > 1e-3 for k in weights), "every weight moved"
    trained["w1"][:] = 0  # a copy: the trainer's weights are untouched
    assert np.abs(trainer.weights()["w1"]).max() > 0

    # Any number of rows: chunks of the batch size, the last one padded.
    many = rng.standard_normal((2 * N + 3, D)).astype(np.float32)
    expected = _forward(trainer.weights(), many.astype(np.float64))
    assert _relative_error(trainer.predict(many), expected) < 1e-5
    assert trainer.predict({"x": many[:1]}).shape == (1, C)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_exported_cnn_gives_the_same_predictions_in_onnxruntime(
    backend, install_registry, rng, tmp_path
) -> None:
    install_backend(install_registry, backend)
    batch = 12
    trainer = Trainer(_cnn(rng, batch), loss="mean_squared_error", optimizer=Adam(0.01), backend=backend)
    for _ in range(4):
        images, classes = _images(rng, batch)
        trainer.step((images, np.eye(C, dtype=np.float32)[classes]))
    trained = trainer.weights()
    # BatchNorm's running statistics are state the export must carry, and training moved them.
    assert np.abs(trained["mean"]).max() > 1e-3 and np.abs(trained["var"] - 1).max() > 1e-3

    path = tmp_path / "cnn.onnx"
    proto = trainer.export_onnx(path)
    onnx.checker.check_model(str(path))
    assert [i.name for i in proto.graph.input] == ["images"]
    assert [o.name for o in proto.graph.output] == ["probabilities"]
    assert {t.name for t in proto.graph.initializer} >= set(trained)
    images, _ = _images(rng, 2 * batch)
    got = _onnxruntime(path, {"images": images[:batch]})
    assert _relative_error(trainer.predict(images)[:batch], got) < 1e-5
    # The exported weights are the trained ones, not the initial ones.
    exported = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for name, value in trained.items():
        np.testing.assert_array_equal(exported[name], value)


def _onnx_mlp(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The MLP as ONNX, its second layer a Gemm with transB (loaded as a transposed copy)."""
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2t", "b2"], ["logits"], transB=1),
    ]
    init = {
        "w1": weights["w1"],
        "b1": weights["b1"],
        "w2t": np.ascontiguousarray(weights["w2"].T),
        "b2": weights["b2"],
    }
    graph = helper.make_graph(
        nodes,
        "onnx_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", C])],
        [numpy_helper.from_array(v, k) for k, v in init.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_trainer_from_onnx_model_exports_and_matches_onnxruntime(interpreter, rng, tmp_path) -> None:
    weights = _weights(rng)
    model = _onnx_mlp(weights)
    with pytest.raises(InputError, match="symbolic batch dimension \\(batch\\): give the batch size"):
        Trainer(model, backend=interpreter)
    path = tmp_path / "source.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InputError, match="symbolic batch dimension"):
        Trainer(path, backend=interpreter)
    assert Trainer(str(path), backend=interpreter, input_shapes={"x": (N, D)}).batch_size == N
    trainer = Trainer(model, optimizer=SGD(0.1), backend=interpreter, input_shapes={"x": (N, D)})
    x, y = _batch(rng)
    first = trainer.step((x, y))
    assert abs(first - trainer.evaluate((x, y))["loss"]) > 1e-6, "the step changed the weights"
    path = tmp_path / "mlp.onnx"
    trainer.export_onnx(path)
    assert _relative_error(trainer.predict(x), _onnxruntime(path, {"x": x})) < 1e-5
    # The source model with the trained weights agrees: the export is the same function.
    assert _relative_error(_onnxruntime(path, {"x": x}), _onnxruntime_source(model, trainer, x)) < 1e-5


def _onnxruntime_source(model: onnx.ModelProto, trainer: Trainer, x: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    trained = trainer.weights()
    updated = onnx.ModelProto()
    updated.CopyFrom(model)
    for tensor in updated.graph.initializer:
        name = "logits/w2t_T" if tensor.name == "w2t" else tensor.name  # the loader's transposed copy
        value = trained[name].T if tensor.name == "w2t" else trained[name]
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value), tensor.name))
    session = ort.InferenceSession(updated.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_bad_batches_are_refused_before_anything_runs(interpreter, rng) -> None:
    trainer = Trainer(_mlp(_weights(rng)), backend=interpreter)
    x, y = _batch(rng)
    cases = [
        ((x[:-1], y[:-1]), "every batch holds 8 rows"),
        ((x.astype(np.float64), y), "dtype float64, expected float32"),
        ((x, y + C), "class ids must lie in [0, 4)"),
        ({"x": x, "labels": y, "w1": x}, "unknown ['w1']"),
        ({"x": x}, "missing ['labels']"),
        ((x,), "got 1 arrays, expected 2"),
        ((x, np.zeros((N, C + 1), np.float32)), "expected f32<8x4>"),
    ]
    for batch, message in cases:
        with pytest.raises(InputError) as err:
            trainer.step(batch)
        assert message in str(err.value), str(err.value)
    assert trainer.steps == 0
    assert trainer.weights().keys() == _weights(rng).keys()
    with pytest.raises(InputError, match="predict: got inputs"):
        trainer.predict({"images": x})


def test_bad_models_losses_and_params_are_refused(rng) -> None:
    weights = _weights(rng)
    with pytest.raises(DifferentiationError, match="'w3' is not a Constant read by function"):
        Trainer(_mlp(weights), params=["w1", "w3"])
    with pytest.raises(DifferentiationError, match="a loss must be a float tensor of one element"):
        Trainer(_mlp(weights), loss=lambda b, prediction, labels: b.Sub(prediction, labels))
    with pytest.raises(DifferentiationError, match="unknown loss 'hinge'"):
        Trainer(_mlp(weights), loss="hinge")
    two = _mlp(weights)
    two.function.builder().save(next(iter(two.function.saves)).operand("input"), "again")
    with pytest.raises(DifferentiationError, match="name the prediction with output="):
        Trainer(two)
    with pytest.raises(DifferentiationError, match="output 'probs' is not an output"):
        Trainer(two, output="probs")
    assert Trainer(two, output="again").output == "again"
    with pytest.raises(InputError, match="input_shapes applies to ONNX models"):
        Trainer(_mlp(weights), input_shapes={"x": (N, D)})


def test_export_refuses_a_kind_without_writer_naming_it(interpreter, rng, tmp_path) -> None:
    module = _mlp(_weights(rng))
    save = module.function.saves[0]
    save.set_input(0, module.function.builder().Sin(save.operand("input")))  # a primitive with no writer
    trainer = Trainer(module, backend=interpreter)
    with pytest.raises(ExportError, match="of kind Sin has no ONNX writer") as err:
        trainer.export_onnx(tmp_path / "sin.onnx")
    assert isinstance(err.value, GlowError)
    assert not (tmp_path / "sin.onnx").exists()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_nodes_without_a_writer_are_exported_as_their_lowering(
    approximate, interpreter, rng, tmp_path
) -> None:
    """LayerNorm has a writer (ONNX LayerNormalization); Gelu has none at opset 17, so it is
    written as the Erf or Tanh graph it lowers to. onnxruntime agrees with predict."""
    weights = _weights(rng)
    module = Module("normed")
    b = module.create_function().builder()
    x = b.placeholder("x", (N, D))
    w = {name: b.constant(value, name=name) for name, value in weights.items()}
    gamma = b.constant((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), name="gamma")
    beta = b.constant((0.1 * rng.standard_normal(H)).astype(np.float32), name="beta")
    hidden = b.Gelu(b.LayerNorm(b.FullyConnected(x, w["w1"], w["b1"]), gamma, beta), approximate=approximate)
    b.save(b.FullyConnected(hidden, w["w2"], w["b2"]), "out")
    trainer = Trainer(module, loss="mean_squared_error", optimizer=Adam(0.01), backend=interpreter)
    for _ in range(3):
        data = rng.standard_normal((N, D)).astype(np.float32)
        trainer.step((data, np.tanh(data[:, :C])))
    proto = trainer.export_onnx(tmp_path / "normed.onnx")
    kinds = {n.op_type for n in proto.graph.node}
    assert "LayerNormalization" in kinds and ("Erf" if approximate == "none" else "Tanh") in kinds
    data = rng.standard_normal((N, D)).astype(np.float32)
    assert _relative_error(_onnxruntime(tmp_path / "normed.onnx", {"x": data}), trainer.predict(data)) < 1e-5
    assert sum(1 for n in module.function.nodes if n.kind == "Gelu") == 1, "the model is not changed"


def test_steps_from_several_threads_are_serialized(interpreter, rng) -> None:
    """Two threads step on one batch: the result is that of as many steps in a row."""
    weights = _weights(rng)
    x, y = _batch(rng)
    shared = Trainer(_mlp(weights), optimizer=SGD(0.1, 0.9), backend=interpreter)
    alone = Trainer(_mlp(weights), optimizer=SGD(0.1, 0.9), backend=interpreter)
    shared.step((x, y))  # compile before the threads start
    alone.step((x, y))
    predictions: list[np.ndarray] = []

    def train() -> None:
        for _ in range(6):
            shared.step((x, y))
            predictions.append(shared.predict(x))

    threads = [threading.Thread(target=train) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(12):
        alone.step((x, y))
    assert shared.steps == alone.steps == 13
    for name, value in alone.weights().items():
        np.testing.assert_array_equal(shared.weights()[name], value)
    assert len(predictions) == 12 and all(np.isfinite(p).all() for p in predictions)


def test_learning_rate_changes_between_steps_without_recompiling(interpreter, rng) -> None:
    """SGD without momentum: the update is lr * gradient, so halving lr halves it, and 0 keeps
    the weights; the compiled function is the same object throughout."""
    weights = _weights(rng)
    x, y = _batch(rng)
    trainer = Trainer(_mlp(weights), optimizer=SGD(0.4), backend=interpreter)
    assert trainer.learning_rate == 0.4
    trainer.learning_rate = 0.0
    trainer.step((x, y))
    compiled = trainer._training._compiled
    for name, value in trainer.weights().items():
        np.testing.assert_array_equal(value, weights[name])
    full = Trainer(_mlp(weights), optimizer=SGD(0.4), backend=interpreter)
    full.step((x, y))
    trainer.learning_rate = 0.2
    trainer.step((x, y))
    assert trainer._training._compiled is compiled
    for name, value in trainer.weights().items():
        half, whole = value - weights[name], full.weights()[name] - weights[name]
        assert _relative_error(2 * half, whole) < 1e-5, name
    for bad in (-0.1, float("nan")):
        with pytest.raises(InputError, match="learning_rate must be a finite number >= 0"):
            trainer.learning_rate = bad


def test_train_epoch_announces_each_batch_and_returns_the_mean_loss(interpreter, rng) -> None:
    from glow_core import progress

    class Recorder:
        def __init__(self) -> None:
            self.steps: list[str] = []
            self.advances: list[tuple[int, int | None, str]] = []

        def step(self, name: str) -> None:
            self.steps.append(name)

        def advance(self, done: int, total: int | None, what: str) -> None:
            self.advances.append((done, total, what))

    weights = _weights(rng)
    batches = [_batch(rng) for _ in range(3)]
    trainer = Trainer(_mlp(weights), optimizer=SGD(0.1), backend=interpreter)
    twin = Trainer(_mlp(weights), optimizer=SGD(0.1), backend=interpreter)
    with progress.listening(Recorder()) as recorder:
        mean = trainer.train_epoch(iter(batches), total=3)
    assert recorder.advances == [(1, 3, "batches"), (2, 3, "batches"), (3, 3, "batches")]
    assert recorder.steps[0] == "compiling the training function"  # then the compiler's own steps
    assert mean == pytest.approx(np.mean([twin.step(b) for b in batches]), rel=1e-6)
    with pytest.raises(InputError, match="no batches"):
        trainer.train_epoch([])


def test_embedding_model_with_indexing_primitives_exports(interpreter, rng, tmp_path) -> None:
    """Gather (an embedding), Pad, Slice with a negative step, Compare + Select + Convert:
    trained, exported, and run by onnxruntime as by predict."""
    vocab, length, dim = 11, 5, 3
    module = Module("embedding")
    b = module.create_function().builder()
    tokens = b.placeholder("tokens", (N, length), ElemKind.int64)
    table = b.constant(rng.standard_normal((vocab, dim)).astype(np.float32), name="table")
    seq = b.Pad(b.Gather(table, tokens, axis=0), pads=(0, 1, 0, 0, 0, 0), value=0.5)  # [N, 6, 3]
    backwards = b.Slice(seq, starts=(0, 5, 0), ends=(N, -1, dim), steps=(1, -2, 1))  # [N, 3, 3]
    zero = b.splat(0.0, backwards)
    leaky = b.Select(
        b.Compare(backwards, zero, predicate="lt"), b.Mul(backwards, b.splat(0.1, backwards)), backwards
    )
    flat = b.Convert(b.reshape(leaky, (N, 9)), elem="float32")
    w = b.constant((rng.standard_normal((9, C)) / 3).astype(np.float32), name="w")
    b.save(b.FullyConnected(flat, w, b.constant(np.zeros(C, np.float32), name="bias")), "logits")
    trainer = Trainer(module, optimizer=SGD(0.5), backend=interpreter)
    ids = rng.integers(0, vocab, (N, length))
    for _ in range(3):
        trainer.step((ids, ids[:, 0] % C))
    assert _relative_error(trainer.weights()["table"], module.constants["table"].value) > 1e-3
    proto = trainer.export_onnx(tmp_path / "embedding.onnx")
    assert {"Gather", "Pad", "Slice", "Less", "Where"} <= {n.op_type for n in proto.graph.node}
    fresh = rng.integers(0, vocab, (N, length))
    got = _onnxruntime(tmp_path / "embedding.onnx", {"tokens": fresh})
    assert _relative_error(got, trainer.predict(fresh)) < 1e-5

"""``Trainer``: a model, a loss and an optimizer compiled once into a training function and
an evaluation function that share the current weights.

The model is an ONNX model or a glow Function computing a prediction; the Trainer adds a
labels input and the loss, differentiates (``differentiate``), and keeps, in the same
state, what both compiled functions read: the weights, the optimizer's state and the
BatchNorm running statistics. Neither function is recompiled when the weights change: the
training function takes them as inputs and returns their next values, and the evaluation
function (the model in inference mode plus the loss) takes them as inputs too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from glow_core import progress
from glow_core.errors import DifferentiationError, InputError
from glow_core.graph.builder import Builder
from glow_core.graph.function import Function, Module
from glow_core.graph.node import Node
from glow_core.training.differentiate import LOSS_OUTPUT, constant_to_placeholder, differentiate
from glow_core.training.losses import mean_squared_error, softmax_cross_entropy
from glow_core.training.optimizers import SGD, Optimizer

LossBuilder = Callable[[Builder, Node, Node], Node]
"""Builds a one-element loss from (builder, prediction, labels) nodes."""

LOSSES: dict[str, LossBuilder] = {
    "softmax_cross_entropy": softmax_cross_entropy,
    "mean_squared_error": mean_squared_error,
}
"""The losses a Trainer knows by name."""

Batch = Mapping[str, np.ndarray] | Sequence[np.ndarray]
"""One batch: arrays by input name (labels under the labels name), or a sequence of the
model's inputs in order followed by the labels."""

ModelSource = str | os.PathLike | bytes | onnx.ModelProto | Function | Module


class Trainer:
    """Train ``model`` on ``backend``: ``step(batch) -> loss``, ``evaluate``, ``predict``,
    ``weights()``, ``export_onnx(path)``.

    ``model``: an ONNX model (path, bytes or ModelProto; ``input_shapes`` fixes symbolic
    dimensions, the batch size among them) or a glow Function (or its Module) whose float
    Constants are the weights. It must compute one prediction, or name it with ``output``.
    ``loss``: ``"softmax_cross_entropy"`` (prediction = logits [N, C]), ``"mean_squared_error"``
    or a callable ``(builder, prediction, labels) -> one-element node``. The labels input,
    named ``labels``, has the prediction's type; integer class ids of shape [N] are one-hot
    encoded for you when the labels are [N, C] floats. ``params`` limits what trains (default:
    every float Constant but BatchNorm statistics). ``options`` go to ``glow_core.compile``.

    Each batch has the batch size the model was built (or loaded) for: the functions are
    compiled once, for that shape. ``predict`` takes any number of rows: it runs in chunks of
    the batch size, padding the last one, so rows must not interact in inference mode (true of
    ordinary models: BatchNorm then uses its running statistics).

    Threads: every method may be called from several threads. ``step`` (and each step of
    ``train_epoch``) holds the trainer's lock for the whole update, so concurrent steps are
    serialized, in an order nobody chooses: train from one thread when the order matters. ``evaluate``,
    ``predict``, ``weights`` and ``export_onnx`` read a consistent snapshot of the weights
    taken under the lock (the weights after some whole number of steps, never half of one)
    and then run outside it, concurrently with steps. The arrays ``weights`` returns are
    copies: changing them changes nothing in the trainer.
    """

    def __init__(
        self,
        model: ModelSource,
        loss: str | LossBuilder = "softmax_cross_entropy",
        optimizer: Optimizer | None = None,
        backend: Any = None,
        *,
        params: Sequence[str] | None = None,
        output: str | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        batchnorm_momentum: float | None = 0.1,
        options: Mapping[str, Any] | None = None,
    ):
        self.model = _private_module(model, input_shapes)
        """The inference model, with the initial weights (``export_onnx`` writes the current ones)."""
        fn = self.model.function
        self.output = _prediction(fn, output)
        """The name of the prediction output."""
        self.inputs = [p.name for p in fn.inputs]
        """The model's data inputs, in order (the labels come after them in a batch)."""
        self.batch_size = _batch_size(fn)

        scored = self.model.clone()
        loss_node = _add_loss(scored.function, self.output, loss)
        self._labels_type = scored.placeholders[LABELS].type
        self.optimizer = optimizer or SGD(lr=0.01)
        self._training = differentiate(
            scored.function,
            loss_node,
            params=params,
            optimizer=self.optimizer,
            batchnorm_momentum=batchnorm_momentum,
        )
        self.params = list(self._training.params)
        """The names of the trained weights."""
        evaluation = scored.clone()
        evaluation.function.save(
            next(n for n in evaluation.function.nodes if n.name == loss_node.name), LOSS_OUTPUT
        )
        # The evaluation function reads every weight and running statistic as an input, so
        # the weights of any step run without recompiling.
        self._weight_inputs = [name for name in self._training.state if name in evaluation.constants]
        for name in self._weight_inputs:
            constant_to_placeholder(evaluation, name)
        self._evaluation_module = evaluation
        self._backend = backend
        self._options = dict(options or {})
        self._lock = threading.Lock()
        self._compiled_evaluation: Any = None
        self.steps = 0
        """Training steps run so far."""

    # ---- training ------------------------------------------------------------------------

    def step(self, batch: Batch) -> float:
        """One forward pass, backward pass and weight update on ``batch``; returns the loss
        computed with the weights before the update."""
        feeds = self._feeds(batch)
        with self._lock:
            self._compile_training()
            loss = self._training.step(feeds)
            self.steps += 1
        return loss

    def train_epoch(self, batches: Iterable[Batch], total: int | None = None) -> float:
        """``step`` over every batch; returns the mean loss. Announces its progress
        (``glow_core.progress``: a display the caller installed draws it)."""
        losses = []
        for done, batch in enumerate(batches, 1):
            losses.append(self.step(batch))
            progress.advance(done, total, "batches")
        if not losses:
            raise InputError("train_epoch: no batches given")
        return float(np.mean(losses))

    @property
    def learning_rate(self) -> float:
        """The learning rate of the next steps (the optimizer's ``lr`` at first). Set it
        between steps for a schedule: it is an input of the training function, so nothing
        recompiles."""
        return self._training.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        value = float(value)
        if not (np.isfinite(value) and value >= 0):
            raise InputError(f"learning_rate must be a finite number >= 0, got {value}")
        with self._lock:
            self._training.learning_rate = value

    def _compile_training(self) -> None:
        if self._training._compiled is None:
            progress.step("compiling the training function")
            self._training.compile(self._backend, options=self._options)

    # ---- inference -----------------------------------------------------------------------

    def evaluate(self, batch: Batch) -> dict[str, float]:
        """The loss and the accuracy (argmax of prediction vs labels, over the last axis) of
        the model in inference mode on one batch, without updating anything."""
        feeds = self._feeds(batch)
        outputs = self._run_evaluation(feeds)
        prediction, labels = outputs[self.output], feeds[LABELS]
        accuracy = float(np.mean(np.argmax(prediction, axis=-1) == np.argmax(labels, axis=-1)))
        return {"loss": float(np.asarray(outputs[LOSS_OUTPUT]).reshape(-1)[0]), "accuracy": accuracy}

    def predict(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """The model's prediction for any number of rows, with the current weights."""
        named = self._named_inputs(inputs)
        for name, value in named.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                raise InputError(
                    f"predict: {name!r} must be a numpy array with a row axis, got {value!r:.60}"
                )
        rows = len(next(iter(named.values())))
        if any(len(a) != rows for a in named.values()):
            raise InputError(
                f"predict: inputs have different row counts: { {k: len(a) for k, a in named.items()} }"
            )
        chunks = []
        for start in range(0, rows, self.batch_size):
            chunk = {
                name: _pad_rows(a[start : start + self.batch_size], self.batch_size)
                for name, a in named.items()
            }
            # The labels only feed the loss, which predict drops: zeros do.
            chunk[LABELS] = np.zeros(self._labels_type.shape, self._labels_type.dtype)
            self._check_arrays(chunk, "predict")
            taken = min(self.batch_size, rows - start)
            chunks.append(self._run_evaluation(chunk)[self.output][:taken])
        return np.concatenate(chunks) if chunks else np.zeros((0, *self._output_shape()[1:]), np.float32)

    def _run_evaluation(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            if self._compiled_evaluation is None:
                from glow_core.runtime.pipeline import compile as compile_module

                progress.step("compiling the evaluation function")
                self._compiled_evaluation = compile_module(
                    self._evaluation_module, self._backend, options=self._options
                )
            weights = {name: self._training.state[name] for name in self._weight_inputs}
        return self._compiled_evaluation.run({**feeds, **weights})

    def _output_shape(self) -> tuple[int, ...]:
        return self._evaluation_module.placeholders[self.output].type.shape

    # ---- weights -------------------------------------------------------------------------

    def weights(self) -> dict[str, np.ndarray]:
        """A copy of every trained weight and BatchNorm running statistic, by name."""
        with self._lock:
            return {name: np.array(self._training.state[name]) for name in self._weight_inputs}

    def export_onnx(self, path: str | os.PathLike) -> onnx.ModelProto:
        """Write the trained inference model (no loss, no labels, current weights) as an ONNX
        file that onnxruntime runs; returns the ModelProto written."""
        from glow_core.training.onnx_export import export_function

        proto = export_function(self.model.function, self.weights())
        onnx.save(proto, os.fspath(path))
        return proto

    def report(self) -> Any:
        """The training function's compile figures (``glow report``'s ``CompileReport``):
        its arena holds the activations kept for the backward pass."""
        backend = (
            self._backend if isinstance(self._backend, str) or self._backend is None else self._backend.name
        )
        return self._training.report(backend)

    # ---- checking batches ----------------------------------------------------------------

    def _feeds(self, batch: Batch) -> dict[str, np.ndarray]:
        """The batch by input name, labels one-hot encoded if given as class ids, checked."""
        expected = [*self.inputs, LABELS]
        if isinstance(batch, Mapping):
            unknown, missing = sorted(set(batch) - set(expected)), [n for n in expected if n not in batch]
            if unknown or missing:
                raise InputError(
                    f"batch: unknown {unknown}, missing {missing}; a batch holds {expected} "
                    f"(the trained weights are the trainer's own: pass only data and labels)"
                )
            feeds = dict(batch)
        else:
            if len(batch) != len(expected):
                raise InputError(f"batch: got {len(batch)} arrays, expected {len(expected)}: {expected}")
            feeds = dict(zip(expected, batch, strict=True))
        feeds[LABELS] = self._encode_labels(feeds[LABELS])
        self._check_arrays(feeds, "batch")
        return feeds

    def _encode_labels(self, labels: Any) -> np.ndarray:
        t = self._labels_type
        labels = np.asarray(labels)
        if t.rank == 2 and t.elem.is_float and labels.shape == (t.shape[0],) and labels.dtype.kind in "iu":
            classes = t.shape[1]
            if labels.size and (labels.min() < 0 or labels.max() >= classes):
                raise InputError(
                    f"batch: class ids must lie in [0, {classes}), got [{labels.min()}, {labels.max()}]"
                )
            return np.eye(classes, dtype=t.dtype)[labels]
        return labels

    def _check_arrays(self, feeds: Mapping[str, np.ndarray], what: str) -> None:
        types = {**{n: self.model.placeholders[n].type for n in self.inputs}, LABELS: self._labels_type}
        for name, value in feeds.items():
            expected = types[name]
            if not isinstance(value, np.ndarray):
                raise InputError(f"{what}: {name!r} must be a numpy array, got {type(value).__name__}")
            if tuple(value.shape) != expected.shape:
                hint = (
                    f"every batch holds {self.batch_size} rows (the size the model was built for): "
                    "drop or pad a last partial batch"
                    if value.ndim == len(expected.shape) and value.shape[1:] == expected.shape[1:]
                    else f"expected {expected}"
                )
                raise InputError(
                    f"{what}: {name!r} has shape {tuple(value.shape)}, expected {expected.shape}; {hint}"
                )
            if value.dtype != expected.dtype:
                raise InputError(
                    f"{what}: {name!r} has dtype {value.dtype}, expected {expected.dtype}; "
                    f"convert it with .astype(np.{expected.dtype})"
                )

    def _named_inputs(
        self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | np.ndarray
    ) -> dict[str, np.ndarray]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            if sorted(inputs) != sorted(self.inputs):
                raise InputError(f"predict: got inputs {sorted(inputs)}, expected {self.inputs}")
            return dict(inputs)
        if len(inputs) != len(self.inputs):
            raise InputError(f"predict: got {len(inputs)} arrays, expected {len(self.inputs)}: {self.inputs}")
        return dict(zip(self.inputs, inputs, strict=True))


LABELS = "labels"
"""The input holding the labels of a batch."""


def _private_module(model: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None) -> Module:
    """A copy of the model's module holding one function, which the trainer owns."""
    if isinstance(model, Function | Module):
        if input_shapes is not None:
            raise InputError("input_shapes applies to ONNX models; a glow Function has fixed shapes")
        fn = model if isinstance(model, Function) else model.function
        module = fn.module.clone()
        module.functions = {fn.name: module.functions[fn.name]}
        return module
    from glow_core.frontends.onnx import load_onnx

    _check_batch_given(model, input_shapes or {})
    return load_onnx(model, input_shapes)


def _check_batch_given(
    model: str | os.PathLike | bytes | onnx.ModelProto, shapes: Mapping[str, object]
) -> None:
    """Refuse an ONNX model whose batch dimension is symbolic and not given: the loader
    would make it 1, and a trainer compiled for batches of one row is never what was meant."""
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, bytes):
        proto = onnx.load_from_string(model)
    else:
        proto = onnx.load(os.fspath(model), load_external_data=False)
    initializers = {t.name for t in proto.graph.initializer}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name in initializers or value.name in shapes or not dims:
            continue
        if not dims[0].HasField("dim_value"):
            raise InputError(
                f"input {value.name!r} of the ONNX model has a symbolic batch dimension "
                f"({dims[0].dim_param or '?'}): give the batch size, e.g. "
                f"input_shapes={{{value.name!r}: (32, ...)}}; the trainer compiles for one batch shape"
            )


def _prediction(fn: Function, output: str | None) -> str:
    """The name of the output the loss compares with the labels."""
    names = [p.name for p in fn.outputs]
    if output is None:
        if len(names) != 1:
            raise DifferentiationError(
                f"the model has {len(names)} outputs {names}: name the prediction with output=..."
            )
        return names[0]
    if output not in names:
        raise DifferentiationError(f"output {output!r} is not an output of the model; its outputs: {names}")
    return output


def _batch_size(fn: Function) -> int:
    """The leading dimension every input and output shares: the rows of a batch."""
    dims = {p.name: p.type.shape[0] if p.type.rank else None for p in [*fn.inputs, *fn.outputs]}
    sizes = set(dims.values())
    if len(sizes) != 1 or None in sizes:
        raise InputError(
            f"the model's inputs and outputs must share a leading batch dimension, got {dims}; "
            f"give the batch size with input_shapes=..."
        )
    return int(sizes.pop())


def _add_loss(fn: Function, output: str, loss: str | LossBuilder) -> Node:
    """Add the labels input and the loss node (not saved) to ``fn``; returns the loss."""
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise DifferentiationError(f"unknown loss {loss!r}: pass one of {sorted(LOSSES)} or a callable")
        loss = LOSSES[loss]
    if LABELS in fn.module.placeholders or LOSS_OUTPUT in fn.module.placeholders:
        raise DifferentiationError(
            f"the model already has an input or output named {LABELS!r} or {LOSS_OUTPUT!r}, which "
            f"the trainer adds: rename it"
        )
    prediction = next(s.operand("input") for s in fn.saves if s.operand("output").name == output)
    b = fn.builder()
    labels = fn.module.create_placeholder(LABELS, prediction.type)
    return loss(b, prediction, labels)


def _pad_rows(array: np.ndarray, rows: int) -> np.ndarray:
    if len(array) == rows:
        return array
    return np.concatenate([array, np.zeros((rows - len(array), *array.shape[1:]), array.dtype)])

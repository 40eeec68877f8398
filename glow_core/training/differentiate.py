"""Reverse-mode differentiation of a Function into a training Function.

The training function computes the loss, back-propagates through the gradient rules the
primitives declare (``grad`` on each declaration in ``glow_core.primitives``), and applies
the optimizer's update, all as ordinary graph nodes: it compiles, schedules and plans
memory like any other function, on any backend that runs the primitives.

Why weights travel as inputs and outputs: a compiled function's placeholders are bound per
run and its constants are folded into the code, so a weight that must change between runs
cannot be a Constant. Each trainable Constant becomes an input Placeholder (as Glow makes
trainable Constants Placeholders) and its updated value an output; ``TrainingFunction``
keeps the current values on the host and feeds each run's outputs into the next run. The
runtime needs nothing new, and a backend learns nothing about training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.errors import DifferentiationError
from glow_core.graph.builder import Builder
from glow_core.graph.function import Function, Module
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.lowering.lower import lower_function
from glow_core.training.batchnorm import running_statistics, to_training_mode
from glow_core.training.optimizers import SGD, Optimizer
from glow_core.types import ElemKind, Type

LOSS_OUTPUT = "loss"
"""The output holding the loss of each run."""

LEARNING_RATE = "learning_rate"
"""The one-element float32 input holding the learning rate of each run (fed by
``TrainingFunction`` from its ``learning_rate``, the optimizer's ``lr`` at first)."""


def updated_name(name: str) -> str:
    """The output that carries the next value of weight or state ``name``."""
    return f"{name}__updated"


def state_name(param: str, state: str) -> str:
    """The input holding optimizer state ``state`` (e.g. velocity) of weight ``param``."""
    return f"{param}__{state}"


class TrainingFunction:
    """A differentiated function plus the current weights and optimizer state.

    ``compile(backend)`` once, then ``step(inputs)`` runs one forward pass, backward pass and
    update, stores the updated weights and returns the loss.
    """

    def __init__(
        self,
        module: Module,
        function: Function,
        state: dict[str, np.ndarray],
        params: list[str],
        learning_rate: float,
    ):
        self.module = module
        self.function = function
        self.state = state
        """Current value of every weight and optimizer state tensor, by input name."""
        self.params = params
        self.learning_rate = learning_rate
        """The learning rate the next steps use: set it between steps for a schedule (it is
        an input of the compiled function, so nothing recompiles)."""
        self._compiled: Any = None

    @property
    def weights(self) -> dict[str, np.ndarray]:
        """The current value of each trained weight."""
        return {name: self.state[name] for name in self.params}

    def compile(self, backend: Any = None, **options: Any) -> TrainingFunction:
        """Compile for ``backend`` (as ``glow_core.compile``); returns self for chaining."""
        from glow_core.runtime.pipeline import compile as compile_module

        self._compiled = compile_module(self.module, backend, **options)
        return self

    def report(self, backend: str | None = None) -> Any:
        """The compile figures of the training function (``glow_core.report.CompileReport``,
        what ``glow report`` prints): its arena holds the activations the backward pass
        reads, planned like any other buffer."""
        from glow_core.plugins import get_backend
        from glow_core.report import CompileReport
        from glow_core.runtime.pipeline import compile_stages

        return CompileReport.of(compile_stages(self.module, get_backend(backend)))

    def feeds(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every input of one run: ``inputs`` (data and labels), the current weights and
        optimizer state, and the learning rate."""
        clash = set(inputs) & {*self.state, LEARNING_RATE}
        if clash:
            raise DifferentiationError(
                f"inputs {sorted(clash)} are trained weights, optimizer state or the learning "
                f"rate, which the training function feeds itself: pass only data and labels"
            )
        if not (np.isfinite(self.learning_rate) and self.learning_rate >= 0):
            raise DifferentiationError(
                f"learning_rate must be a finite number >= 0, got {self.learning_rate}"
            )
        rate = np.array(self.learning_rate, np.float32)
        return {**inputs, **self.state, LEARNING_RATE: rate}

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One training step; returns every output (loss, updated weights, saved values)."""
        if self._compiled is None:
            self.compile()
        outputs = self._compiled.run(self.feeds(inputs))
        for name in self.state:
            self.state[name] = outputs[updated_name(name)]
        return outputs

    def step(self, inputs: Mapping[str, np.ndarray]) -> float:
        """One training step; returns the loss computed with the weights before the update."""
        return float(np.asarray(self.run(inputs)[LOSS_OUTPUT]).reshape(-1)[0])


def differentiate(
    fn: Function,
    loss: Node | str,
    params: Sequence[Node | str] | None = None,
    optimizer: Optimizer | None = None,
    batchnorm_momentum: float | None = 0.1,
) -> TrainingFunction:
    """Build the training function of ``fn`` minimizing ``loss`` over ``params``.

    ``loss`` is a one-element float node of ``fn`` or the name of an output ``fn`` saves;
    ``params`` are Constants ``fn`` reads (all of its float Constants when None). ``fn`` is
    not modified: the training function lives in a copy of its module, lowered to
    primitives first, so every high-level node is differentiated through its lowering (one
    source of truth: a Relu's gradient is Max's, a Softmax's follows from Exp, ReduceSum...).

    BatchNorm runs in training mode (``glow_core.training.batchnorm``): batch statistics,
    and its running mean and var, never trained, updated with ``batchnorm_momentum`` as
    PyTorch does. ``batchnorm_momentum=None`` keeps inference semantics (frozen statistics).
    """
    optimizer = optimizer or SGD(lr=0.01)
    loss_name = _loss_node(fn, loss).name
    statistics = running_statistics(fn) if batchnorm_momentum is not None else set()
    param_names = _param_names(fn, params, statistics)

    module = fn.module.clone()
    train = module.functions[fn.name]
    module.functions = {fn.name: train}
    loss_node = next(n for n in train.nodes if n.name == loss_name)
    for taken in (LOSS_OUTPUT, LEARNING_RATE):
        if taken in module.placeholders:
            raise DifferentiationError(
                f"the function already has a placeholder named {taken!r}, which the training "
                f"function adds itself: rename it"
            )
    loss_save = train.save(loss_node, LOSS_OUTPUT)
    state: dict[str, np.ndarray] = {}
    if batchnorm_momentum is not None:
        for running, next_value in to_training_mode(train, batchnorm_momentum):
            train.save(next_value, updated_name(running.name))
            state[running.name] = constant_to_placeholder(module, running.name)[1]
    lower_function(train)
    loss_node = next(n for n in train.saves if n.operand("output") is loss_save).operand("input")

    weights: dict[str, Placeholder] = {}
    for name in param_names:
        weights[name], state[name] = constant_to_placeholder(module, name)

    grads = _backward(train, loss_node, set(weights.values()))
    b = Builder(train, prefix="update/")
    rate = module.create_placeholder(LEARNING_RATE, Type((), ElemKind.float32))
    for name, weight in weights.items():
        lr = rate if weight.type.elem is ElemKind.float32 else b.Convert(rate, elem=weight.type.elem.name)
        grad = grads.get(weight) or b.splat(0.0, weight)  # a weight the loss does not read
        current = {}
        for s, initial in optimizer.initial_state(weight.type).items():
            current[s] = module.create_placeholder(state_name(name, s), Type.of(initial))
            state[current[s].name] = initial
        new_weight, new_state = optimizer.update(b, weight, grad, current, lr)
        b.save(new_weight, updated_name(name))
        for s, value in new_state.items():
            b.save(value, updated_name(current[s].name))
    return TrainingFunction(module, train, state, list(param_names), optimizer.lr)


def constant_to_placeholder(module: Module, name: str) -> tuple[Placeholder, np.ndarray]:
    """Turn Constant ``name`` into an input placeholder of the same name; returns it and a
    copy of the constant's value (the state's first value)."""
    const = module.constants.pop(name)
    ph = module.create_placeholder(name, const.type)
    for user, index in list(const.users):
        user.set_input(index, ph)
    return ph, np.array(const.value, copy=True)


def _loss_node(fn: Function, loss: Node | str) -> Node:
    if isinstance(loss, str):
        saved = [s.operand("input") for s in fn.saves if s.operand("output").name == loss]
        if not saved:
            outputs = [o.name for o in fn.outputs]
            raise DifferentiationError(
                f"loss {loss!r} is not an output of {fn.name!r}; its outputs: {outputs}"
            )
        loss = saved[0]
    if loss not in fn:
        raise DifferentiationError(f"loss {loss!r} is not a node of function {fn.name!r}")
    if loss.type.size != 1 or not loss.type.elem.is_float:
        raise DifferentiationError(
            f"loss {loss.name!r} is {loss.type}: a loss must be a float tensor of one element "
            f"(reduce it, e.g. with ReduceSum, before differentiating)"
        )
    return loss


def _param_names(fn: Function, params: Sequence[Node | str] | None, statistics: set[str]) -> list[str]:
    read = {n.name: n for n in fn.storage() if isinstance(n, Constant)}
    if params is None:
        return [name for name, c in read.items() if c.type.elem.is_float and name not in statistics]
    names = []
    for p in params:
        name = p if isinstance(p, str) else p.name
        if name not in read:
            raise DifferentiationError(
                f"parameter {name!r} is not a Constant read by function {fn.name!r}; "
                f"its Constants: {sorted(read)}"
            )
        if name in statistics:
            raise DifferentiationError(
                f"parameter {name!r} is a BatchNorm running statistic: training mode updates it "
                f"from the batches, not by gradient (pass batchnorm_momentum=None to freeze it)"
            )
        if not read[name].type.elem.is_float:
            raise DifferentiationError(f"parameter {name!r} is {read[name].type}: only float weights train")
        names.append(name)
    return names


def _backward(fn: Function, loss: Node, params: set[Node]) -> dict[Node, Node]:
    """The gradient of ``loss`` with respect to every node between ``params`` and it."""
    order = fn.topological_order()
    depends = set(params)
    for n in order:
        if any(i in depends for i in n.inputs):
            depends.add(n)
    b = Builder(fn, prefix="grad/")
    grads: dict[Node, Node] = {loss: b.splat(1.0, loss)}
    for n in reversed(order):
        out_grad = grads.get(n)
        if out_grad is None or n.kind == "Save":
            continue
        wanted = [i in depends for i in n.inputs]
        if not any(wanted):
            continue
        if n.spec.grad is None:
            raise DifferentiationError(
                f"node {n.name!r} of kind {n.kind} has no gradient rule, and the loss depends on "
                f"a parameter through it: declare `grad` on {n.kind} or keep it off the path "
                f"from the parameters to the loss"
            )
        if n.predicate is not None:
            raise DifferentiationError(
                f"node {n.name!r} is predicated: predicated nodes cannot be differentiated"
            )
        operand_grads = n.spec.grad(b, n, out_grad)
        for operand, want, g in zip(n.inputs, wanted, operand_grads, strict=True):
            if not want or g is None:
                continue
            previous = grads.get(operand)
            grads[operand] = g if previous is None else b.Add(previous, g)
    return grads

"""glow as an ``onnx.backend.base.Backend``: ONNX models in, glow's loader and a glow backend.

This is the standard interface ONNX tooling drives (onnx's own ``BackendTest`` included):
``GlowBackend.prepare(model, backend="cpu")`` opens the model as a glow Session (glow's ONNX
frontend and compiler, see ``glow_core.load``); ``GlowRep.run(inputs)`` returns the outputs in
graph order. Sequences are lists of arrays and absent optionals None, both ways (glow takes
sequence and optional values of tensors, see ``glow_core.load``). Anything glow cannot take (a
map input, an unknown op) is refused with a GlowError: in ``prepare``, or at the first run
(``SpecializationRefused``) for a model compiled for the values of a run, so callers can tell
"not supported" from "wrong".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

import glow_core
from glow_core.backend import Backend as GlowTarget
from glow_core.errors import InputError
from glow_core.frontends.onnx import SUPPORTED_OPS
from glow_core.frontends.onnx.model import declared_type
from glow_core.runtime import Session, SpecializationError
from glow_core.runtime.host_ops import host_op_for

_DEFAULT_DOMAINS = ("", "ai.onnx")


SpecializationRefused = SpecializationError
"""glow refused a model when compiling it for the inputs of a run (the runtime's error)."""


class GlowRep(BackendRep):
    """A model run by a glow Session, with ONNX conventions (inputs by position or name).

    The session compiles on first use for shapes or input values the loader needs, and
    computes data-dependent conditions (If, Loop) per run; see ``glow_core.load``.
    """

    def __init__(self, session: Session):
        self.session = session
        self.input_names = session.input_names
        self.output_names = session.output_names

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Outputs in graph-output order for inputs in graph-input order (or a name -> value map):
        arrays, lists of arrays for sequences, None for absent optionals."""
        sequences = {info.name for info in self.session.inputs if info.sequence}
        outputs = self.session.run(_feeds(inputs, self.input_names, sequences))
        return tuple(outputs[name] for name in self.output_names)


def _feed(value: Any, sequence: bool) -> Any:
    """One input as the session takes it: None (an absent optional) stays None, a sequence
    input's list becomes a list of arrays, a tensor input's value an array. Anything else is
    left for the session to refuse with a message naming the input."""
    if value is None:
        return None
    if sequence:
        return [np.asarray(v) for v in value] if isinstance(value, list | tuple) else value
    return np.asarray(value)


def _feeds(inputs: Any, names: list[str], sequences: set[str]) -> dict[str, Any]:
    if isinstance(inputs, Mapping):
        return {n: _feed(v, n in sequences) for n, v in inputs.items()}
    values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    if len(values) != len(names):
        raise InputError(f"got {len(values)} inputs, the model takes {names}")
    return {n: _feed(v, n in sequences) for n, v in zip(names, values, strict=True)}


class GlowBackend(Backend):
    """ONNX backend interface over glow; ``backend`` picks the glow backend (default: best)."""

    glow_backend: str | GlowTarget | None = None
    """The glow backend classes made by ``for_backend`` run on."""

    @classmethod
    def for_backend(cls, backend: str | GlowTarget) -> type[GlowBackend]:
        """A GlowBackend class bound to one glow backend, for tools that take a class
        (``onnx.backend.test.BackendTest(GlowBackend.for_backend("cpu"), __name__)``)."""
        name = backend if isinstance(backend, str) else backend.info().name
        return type(f"GlowBackend_{name}", (cls,), {"glow_backend": backend})

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether every op has an importer or runs in the host partition (shapes are checked
        in prepare)."""
        return all(
            (n.domain in _DEFAULT_DOMAINS and n.op_type in SUPPORTED_OPS) or host_op_for(n) is not None
            for n in model.graph.node
        )

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> BackendRep:
        """Load and compile ``model``; GlowError (UnsupportedOpError...) when glow cannot take it.

        A model that needs input values at load time (or has symbolic dimensions) is
        compiled at its first run instead, for those values (``glow_core.load``).
        """
        _refuse_non_tensors(model)
        backend = kwargs.get("backend", cls.glow_backend)
        return GlowRep(glow_core.load(model, backend=backend, options=kwargs.get("options")))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple:
        """Run one node on ``inputs`` (arrays in the node's input order) as a one-node model."""
        arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, arrays, strict=True)
        ]
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """glow picks its device through the glow backend, so ONNX's device names only CPU memory."""
        return device.upper() == "CPU"


def _refuse_non_tensors(model: onnx.ModelProto) -> None:
    """Refuse up front graph inputs and outputs glow has no form for (maps, sparse tensors,
    sequences of sequences); tensors, sequences of tensors and optionals of either pass."""
    for role, values in (("input", model.graph.input), ("output", model.graph.output)):
        for value in values:
            declared_type(value.type, f"graph {role} {value.name!r}")

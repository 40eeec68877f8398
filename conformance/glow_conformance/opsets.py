"""Which ONNX node tests fall within onnxruntime's opsets, measured rather than assumed.

onnx ships node tests for opsets newer than the onnxruntime beside it loads, so a pass rate
over every case mixes "wrong" with "too new for onnxruntime". The scoreboard therefore also
counts each target over the cases whose default-domain opset onnxruntime loads. That opset is
asked of the installed onnxruntime itself (a session on a one-Identity model, newest opset
first), once per process, so the figure follows whatever onnxruntime is installed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from glow_conformance.case import ONNX_PREFIX
from glow_conformance.onnx_data import load_node_tests

DEFAULT_DOMAINS = ("", "ai.onnx")


def default_opset(model: onnx.ModelProto) -> int | None:
    """The model's default-domain opset; None when it imports only other domains (ai.onnx.ml...)."""
    versions = [op.version for op in model.opset_import if op.domain in DEFAULT_DOMAINS]
    return max(versions) if versions else None


def _identity_model(opset: int) -> onnx.ModelProto:
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "probe",
        [value],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)  # the newest IR may be too new
    return model


@functools.cache
def onnxruntime_opset() -> int | None:
    """The newest default-domain opset the installed onnxruntime loads (None: not installed).

    Tries onnx's newest opset first and steps down until a session opens.
    """
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # the refusals are the measurement, not news
    for opset in range(onnx.defs.onnx_opset_version(), 0, -1):
        try:
            onnxruntime.InferenceSession(
                _identity_model(opset).SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception:  # onnxruntime raises its own Fail/InvalidGraph kinds
            continue
        return opset
    return None


@dataclass(frozen=True)
class OpsetScope:
    """The default-domain opset of every node-test case, and onnxruntime's newest one."""

    newest: int | None
    """onnxruntime's newest default-domain opset; None when onnxruntime is not installed."""
    opsets: Mapping[str, int | None]
    """Case id (``onnx:test_abs``) -> its default-domain opset (None: other domains only)."""

    def within(self, case_id: str) -> bool:
        """Whether onnxruntime loads the case's default-domain opset. A case importing only
        other domains (ai.onnx.ml, training) has no default opset to exceed, so it counts."""
        opset = self.opsets.get(case_id)
        return self.newest is None or opset is None or opset <= self.newest


def opset_scope(onnx_data: str | None = None) -> OpsetScope:
    """The scope of the node tests of the installed onnx (or of ``onnx_data``)."""
    opsets = {f"{ONNX_PREFIX}{t.name}": default_opset(t.model) for t in load_node_tests(onnx_data)}
    return OpsetScope(onnxruntime_opset(), opsets)

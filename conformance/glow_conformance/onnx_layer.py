"""The ONNX layer: every node test, run by glow on the backend under test or by a reference.

A runner splits running into *prepare* (load and compile: a refusal there means
"unsupported", reported but never a pass) and *run*. glow refuses with a GlowError; any other
exception from glow is a failure. onnxruntime and ``onnx.reference`` serve as reference
columns, counted the same way: an exception while creating the session is "unsupported",
one while running or a wrong value is "failed".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx

from glow_conformance.case import ONNX_PREFIX, Case, one_line
from glow_conformance.compare import check_onnx_outputs
from glow_conformance.onnx_backend import GlowBackend, SpecializationRefused
from glow_conformance.onnx_data import NodeTest, load_node_tests
from glow_conformance.results import PASS, Outcome, Verdict
from glow_core.backend import Backend
from glow_core.errors import GlowError

RunFn = Callable[[list[Any]], Sequence[Any]]


@dataclass(frozen=True)
class NodeRunner:
    """How one target prepares and runs an ONNX model, and which errors mean "unsupported"."""

    name: str
    version: str
    prepare: Callable[[onnx.ModelProto], RunFn]
    refusals: tuple[type[BaseException], ...]
    run_refusals: tuple[type[BaseException], ...] = ()
    """Errors that mean "unsupported" when raised by a run (a model compiled at first run)."""

    def check(self, test: NodeTest) -> Verdict:
        """Prepare once, run every data set, compare each with the stored outputs."""
        try:
            run = self.prepare(test.model)
        except self.refusals as err:
            return Verdict(Outcome.UNSUPPORTED, one_line(err))
        except Exception as err:
            return Verdict(Outcome.FAILED, f"crashed while preparing: {one_line(err)}")
        for inputs, expected in test.data_sets:
            try:
                outputs = run(inputs)
            except self.run_refusals as err:
                return Verdict(Outcome.UNSUPPORTED, one_line(err))
            except Exception as err:
                return Verdict(Outcome.FAILED, f"crashed while running: {one_line(err)}")
            verdict = check_onnx_outputs(list(outputs), expected, test.rtol, test.atol)
            if verdict.outcome is not Outcome.PASSED:
                return verdict
        return PASS


@dataclass(frozen=True, eq=False)
class NodeCase(Case):
    """``onnx:test_add_bcast``: one node test, counted under its ONNX op type."""

    test: NodeTest
    layer: ClassVar[str] = "onnx"

    def run(self, target: NodeRunner) -> Verdict:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # NaN/inf are legitimate in many node tests
            return target.check(self.test)


def generate(onnx_data: str | None = None) -> list[Case]:
    """One case per node test of the installed onnx (or of ``onnx_data``)."""
    return [NodeCase(f"{ONNX_PREFIX}{t.name}", t.op_type, t) for t in load_node_tests(onnx_data)]


def _feeds(model: onnx.ModelProto, inputs: list[Any]) -> dict[str, Any]:
    initializers = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in initializers]
    return {n: v for n, v in zip(names, inputs, strict=False) if v is not None}


def glow_runner(backend: Backend) -> NodeRunner:
    """glow's ONNX loader and compiler on ``backend``; GlowError at prepare means unsupported."""

    def prepare(model: onnx.ModelProto) -> RunFn:
        return GlowBackend.prepare(model, backend=backend).run

    info = backend.info()
    return NodeRunner(info.name, info.version, prepare, (GlowError,), (SpecializationRefused,))


def onnxruntime_runner() -> NodeRunner | None:
    """onnxruntime's CPU provider on one thread, or None when it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None

    def prepare(model: onnx.ModelProto) -> RunFn:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4  # refusals are reported as results, not log lines
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return lambda inputs: session.run(None, _feeds(model, inputs))

    return NodeRunner("onnxruntime", onnxruntime.__version__, prepare, (Exception,))


def reference_runner() -> NodeRunner:
    """``onnx.reference.ReferenceEvaluator``: onnx's own Python implementation of the spec."""
    from onnx.reference import ReferenceEvaluator

    def prepare(model: onnx.ModelProto) -> RunFn:
        evaluator = ReferenceEvaluator(model)
        return lambda inputs: evaluator.run(None, _feeds(model, inputs))

    return NodeRunner("onnx.reference", onnx.__version__, prepare, (Exception,))

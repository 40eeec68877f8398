"""What a backend's declared primitives can run: models, ONNX node tests, and what to add next.

Each workload is lowered for the backend (its ``should_lower`` decides what stays
high-level) and the (kind, element kind) pairs it needs are compared with what the backend
declares. A workload that needs exactly one missing pair counts toward that pair's unlock.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from glow_core.backend import Backend
from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS
from glow_core.runtime.pipeline import graph_stages, load_model

Need = tuple[str, str]  # (operator kind, result element kind name)


@dataclass
class Coverage:
    """Runnable workloads out of those glow itself can compile, and what would unlock more."""

    backend: str
    models_runnable: list[str] = field(default_factory=list)
    models_blocked: dict[str, list[Need]] = field(default_factory=dict)
    node_tests_runnable: int = 0
    node_tests_blocked: int = 0
    node_tests_not_loadable: int = 0
    unlocks: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        total_models = len(self.models_runnable) + len(self.models_blocked)
        loadable = self.node_tests_runnable + self.node_tests_blocked
        lines = [
            f"backend {self.backend}",
            f"models: {len(self.models_runnable)}/{total_models} runnable",
        ]
        for model, missing in self.models_blocked.items():
            lines.append(f"  {model}: missing {', '.join(f'{k}[{e}]' for k, e in missing)}")
        lines.append(
            f"ONNX node tests: {self.node_tests_runnable}/{loadable} of those glow loads are runnable "
            f"({self.node_tests_not_loadable} not loadable by glow's frontend)"
        )
        if self.unlocks:
            lines.append("primitives that would unlock the most (workloads missing only that one):")
            lines += [f"  {kind}[{elem}]: {count}" for (kind, elem), count in self.unlocks.most_common(10)]
        return "\n".join(lines) + "\n"


def needs_of(model: onnx.ModelProto | str, backend: Backend) -> set[Need]:
    """The (kind, element kind) pairs a model needs after lowering for ``backend``."""
    fn = graph_stages(load_model(model), backend).function
    assert fn is not None
    return {(n.kind, n.type.elem.name) for n in fn.nodes if n.kind != "Save"}


def _missing(needs: set[Need], backend: Backend) -> list[Need]:
    supports = backend.info().supports
    return sorted((kind, elem) for kind, elem in needs if elem not in supports.get(kind, ()))


def node_test_models(limit: int | None = None) -> Iterator[str]:
    """Paths of the ONNX node test models shipped with the installed onnx package."""
    import onnx.backend.test

    root = Path(os.path.dirname(onnx.backend.test.__file__)) / "data" / "node"
    cases = sorted(root.glob("*/model.onnx"))
    yield from (str(p) for p in cases[:limit])


def check_backend(backend: Backend, *, node_tests: bool = True, limit: int | None = None) -> Coverage:
    """Coverage of ``backend`` over the zoo models and (optionally) the ONNX node tests."""
    coverage = Coverage(backend.info().name)
    for name, build in MODELS.items():
        missing = _missing(needs_of(build(), backend), backend)
        if missing:
            coverage.models_blocked[name] = missing
            if len(missing) == 1:
                coverage.unlocks[missing[0]] += 1
        else:
            coverage.models_runnable.append(name)
    for path in node_test_models(limit) if node_tests else ():
        try:
            missing = _missing(needs_of(path, backend), backend)
        except GlowError:
            coverage.node_tests_not_loadable += 1
            continue
        if missing:
            coverage.node_tests_blocked += 1
            if len(missing) == 1:
                coverage.unlocks[missing[0]] += 1
        else:
            coverage.node_tests_runnable += 1
    return coverage

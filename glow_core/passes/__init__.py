"""Target-independent graph optimizations: named passes and pipelines written as data."""

from glow_core.passes import fold_qdq as _fold_qdq  # noqa: F401 - registers the pass
from glow_core.passes import graph_passes as _graph_passes  # noqa: F401 - registers the passes
from glow_core.passes import layer_passes as _layer_passes  # noqa: F401 - registers the passes
from glow_core.passes.manager import (
    DEFAULT_GRAPH_PIPELINE,
    GRAPH_PASSES,
    PassReport,
    Pipeline,
    Repeat,
    graph_pass,
    run_pipeline,
)

__all__ = [
    "DEFAULT_GRAPH_PIPELINE",
    "GRAPH_PASSES",
    "PassReport",
    "Pipeline",
    "Repeat",
    "graph_pass",
    "run_pipeline",
]

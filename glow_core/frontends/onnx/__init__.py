"""The ONNX frontend: ``load_onnx`` builds a glow Module from an ONNX model.

Importing this package registers one importer per supported ONNX op type (in the
``ops_*`` modules); ``SUPPORTED_OPS`` is read from that table, so it can never disagree
with what the loader accepts.
"""

from __future__ import annotations

from glow_core.frontends.onnx import (  # noqa: F401 - register importers
    ops_activation,
    ops_attention,
    ops_const,
    ops_control,
    ops_einsum,
    ops_index,
    ops_integer,
    ops_logic,
    ops_loss,
    ops_math,
    ops_ml,
    ops_nms,
    ops_norm,
    ops_quant,
    ops_reduce,
    ops_resize,
    ops_rnn,
    ops_sample,
    ops_shape,
    ops_spectral,
    ops_text,
    ops_training,
    ops_window,
)
from glow_core.frontends.onnx.loader import MIN_OPSET, load_onnx
from glow_core.frontends.onnx.registry import IMPORTERS, LoadTimeValueError

SUPPORTED_OPS: frozenset[str] = frozenset(IMPORTERS)
"""ONNX op types (default domain) that ``load_onnx`` accepts."""

__all__ = ["MIN_OPSET", "SUPPORTED_OPS", "LoadTimeValueError", "load_onnx"]

"""The model zoo's default models, built and loaded once per test process.

Several test files check properties of the same default models (``MODELS[name]()``): the
large ones take tens of seconds to build (VGG-19 draws 143.7M seeded weights and the builder
runs ``onnx.checker`` over them) and more to load. Each caller gets its own copy, so a test
that changes what it got cannot affect another.
"""

from __future__ import annotations

import functools

import onnx
import pytest

from glow_core.graph import Module
from glow_core.model_zoo import LARGE_MODELS, MODELS


def zoo_names() -> list:
    """Every zoo model's name (sorted) as a test parameter, the large ones marked slow (tens
    of seconds to build and load)."""
    return [pytest.param(n, marks=pytest.mark.slow) if n in LARGE_MODELS else n for n in sorted(MODELS)]


@functools.cache
def _built(name: str) -> onnx.ModelProto:
    return MODELS[name]()


@functools.cache
def _loaded(name: str) -> Module:
    from glow_core.frontends.onnx import load_onnx  # on first use: collecting needs only names

    return load_onnx(_built(name))


def zoo_model(name: str) -> onnx.ModelProto:
    """A copy of ``MODELS[name]()`` (default arguments), built once per process."""
    copy = onnx.ModelProto()
    copy.CopyFrom(_built(name))
    return copy


def zoo_module(name: str) -> Module:
    """A clone of ``load_onnx(MODELS[name]())``, loaded once per process."""
    return _loaded(name).clone()

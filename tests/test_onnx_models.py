"""Whole zoo models through the ONNX frontend, compared with onnxruntime.

Per-op tests cannot catch mistakes in how ops compose (layouts between Conv and Gemm,
attention reshapes, residual broadcasting), so every zoo model except ResNet-50 (tested
elsewhere, it is slow under the numpy reference) is loaded, evaluated and compared.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnxruntime
import pytest

from glow_core.frontends.onnx import load_onnx
from glow_core.lowering.evaluate import evaluate
from glow_core.model_zoo import LARGE_MODELS, MODELS, random_inputs

ZOO = [name for name in MODELS if name not in LARGE_MODELS]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_matches_onnxruntime(name: str, batch: int) -> None:
    model = MODELS[name](batch=batch, seed=batch)
    feeds = random_inputs(model, seed=zlib.crc32(f"{name}/{batch}".encode()))
    module = load_onnx(model)

    got = evaluate(module, feeds)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, session.run(names, feeds), strict=True))

    assert set(got) == set(want)
    for out, expected in want.items():
        assert got[out].shape == expected.shape
        assert got[out].dtype == expected.dtype
        error = np.max(np.abs(got[out].astype(np.float64) - expected)) / np.max(np.abs(expected))
        assert error < 1e-4, f"{name} batch {batch} output {out!r}: relative error {error:.3g}"


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_structure(name: str) -> None:
    """One placeholder per real input, named outputs, and weights as constants."""
    model = MODELS[name]()
    module = load_onnx(model)
    assert list(module.functions) == ["main"]
    assert [p.name for p in module.function.inputs] == ["input"]
    assert [p.name for p in module.function.outputs] == ["output"]
    assert module.constants, "initializers must become constants"
    assert all(
        not c.type.elem.name.startswith("float") or c.type.elem.name == "float32"
        for c in module.constants.values()
    )

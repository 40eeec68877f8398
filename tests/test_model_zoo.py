"""Tests for glow_core.model_zoo.

The zoo is the reference every other component is compared against, so these
tests check that each model is valid ONNX, runs in onnxruntime, and produces
outputs that make relative-error comparisons meaningful (finite, varied,
neither vanishing nor exploding).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime
import pytest
from zoo_modules import zoo_model

from glow_core.model_zoo import LARGE_MODELS, MODELS, random_inputs

# Expected output shape for a given batch size, per model.
EXPECTED_SHAPES: dict[str, Callable[[int], tuple[int, ...]]] = {
    "mlp": lambda n: (n, 10),
    "small_cnn": lambda n: (n, 10),
    "resnet_bottleneck": lambda n: (n, 256, 56, 56),
    "mobilenetv2_block": lambda n: (n, 32, 28, 28),
    "mobilenetv2": lambda n: (n, 1000),
    "transformer_encoder": lambda n: (n, 16, 64),
    "bert_mini": lambda n: (n, 128, 256),
    "resnet50": lambda n: (n, 1000),
    "vgg19": lambda n: (n, 1000),
    "inception_v3": lambda n: (n, 1000),
    "gru_text": lambda n: (n, 40, 64),
}
FAST_MODELS = [name for name in MODELS if name not in LARGE_MODELS]
# A distinct input seed per model so the tests do not all see the same data.
INPUT_SEEDS = {name: 101 + 7 * index for index, name in enumerate(MODELS)}


def _run(model: onnx.ModelProto, seed: int) -> np.ndarray:
    """Run ``model`` in onnxruntime on seeded random inputs; return ``output``."""
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (output,) = session.run(["output"], random_inputs(model, seed))
    return output


def _check_output(output: np.ndarray, expected_shape: tuple[int, ...]) -> None:
    """Assert the output is usable as a numerical reference."""
    assert output.shape == expected_shape
    assert output.dtype == np.float32
    assert np.all(np.isfinite(output))
    assert not np.all(output == output.flat[0]), "output is constant"
    max_abs = float(np.max(np.abs(output)))
    assert 1e-3 < max_abs < 1e4, f"max |output| = {max_abs}"


def _check_structure(model: onnx.ModelProto) -> None:
    """Validate ONNX conformance and the naming conventions callers rely on."""
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["output"]
    assert {op.domain for op in model.opset_import} == {""}
    assert model.opset_import[0].version == 17
    names = [node.name for node in model.graph.node]
    assert all(names), "every node needs a name"
    assert len(names) == len(set(names)), "node names must be unique"
    assert all(
        init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64) for init in model.graph.initializer
    )


def test_models_registry_complete() -> None:
    """MODELS is the public catalogue: its keys are part of the API."""
    assert set(MODELS) == set(EXPECTED_SHAPES)


@pytest.mark.parametrize("name", FAST_MODELS)
def test_model_runs_in_onnxruntime(name: str) -> None:
    model = MODELS[name]()
    _check_structure(model)
    _check_output(_run(model, INPUT_SEEDS[name]), EXPECTED_SHAPES[name](1))


@pytest.mark.parametrize("name", FAST_MODELS)
def test_model_batch_two(name: str) -> None:
    model = MODELS[name](batch=2, seed=3)
    onnx.checker.check_model(model, full_check=True)
    output = _run(model, INPUT_SEEDS[name] + 1)
    _check_output(output, EXPECTED_SHAPES[name](2))
    # Batch rows see different inputs, so they must produce different outputs.
    assert not np.allclose(output[0], output[1])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LARGE_MODELS))
def test_large_model_runs_in_onnxruntime(name: str) -> None:
    model = zoo_model(name)
    _check_structure(model)
    start = time.perf_counter()
    output = _run(model, INPUT_SEEDS[name])
    print(f"{name} batch 1 onnxruntime (session + run): {time.perf_counter() - start:.3f}s")
    _check_output(output, EXPECTED_SHAPES[name](1))


def test_builders_are_deterministic_in_seed() -> None:
    """Same seed -> identical bytes; another seed -> different weights."""
    first = MODELS["small_cnn"](seed=5).SerializeToString()
    assert first == MODELS["small_cnn"](seed=5).SerializeToString()
    assert first != MODELS["small_cnn"](seed=6).SerializeToString()


def test_random_inputs_depend_on_seed() -> None:
    model = MODELS["small_cnn"]()
    first, second = random_inputs(model, 0), random_inputs(model, 1)
    assert set(first) == {"input"}
    assert first["input"].shape == (1, 3, 32, 32)
    assert first["input"].dtype == np.float32
    assert not np.array_equal(first["input"], second["input"])
    np.testing.assert_array_equal(first["input"], random_inputs(model, 0)["input"])


def test_random_inputs_skips_initializers_and_rejects_dynamic_dims() -> None:
    model = MODELS["mlp"]()
    weight = model.graph.initializer[0]
    model.graph.input.append(
        onnx.helper.make_tensor_value_info(weight.name, weight.data_type, list(weight.dims))
    )
    assert set(random_inputs(model, 0)) == {"input"}
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(ValueError, match="non-static"):
        random_inputs(model, 0)


def test_transformer_rejects_indivisible_heads() -> None:
    with pytest.raises(ValueError, match="divisible"):
        MODELS["transformer_encoder"](hidden=64, heads=5)


def test_transformer_rejects_no_layers() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        MODELS["transformer_encoder"](layers=0)


def test_bert_mini_has_four_prefixed_layers() -> None:
    """Each layer's nodes carry its prefix (profiles name them) and its own weights."""
    model = MODELS["bert_mini"]()
    names = [node.name for node in model.graph.node]
    for layer in range(4):
        assert f"layer{layer}/ffn/fc1/matmul" in names
    assert not any(name.startswith("layer4/") for name in names)
    weights = sum(
        int(np.prod(init.dims))
        for init in model.graph.initializer
        if init.data_type == onnx.TensorProto.FLOAT
    )
    assert 3_000_000 < weights < 3_300_000

"""Quantized and reduced-precision compiles of whole models, the refusals, and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_core.cli import main
from glow_core.model_zoo import random_inputs, small_cnn
from glow_core.quantization import QuantizationError
from glow_core.runtime.pipeline import compile_stages, load_model


@pytest.fixture(scope="module")
def cnn_and_profile():
    model = small_cnn(batch=4)
    profile = glow_core.profile(model, [random_inputs(model, seed) for seed in range(3)], "interpreter")
    return model, profile


def _logits(fn, x):
    return next(iter(fn.run(x).values()))


def test_quantized_small_cnn_agrees_with_the_float_model(cnn_and_profile):
    model, profile = cnn_and_profile
    x = random_inputs(model, 99)
    reference = _logits(glow_core.compile(model, "interpreter"), x)
    quantized = glow_core.Quantize(profile, schema="symmetric", per_channel=True)
    got = _logits(glow_core.compile(model, "interpreter", precision=quantized), x)
    cosine = np.sum(got * reference) / (np.linalg.norm(got) * np.linalg.norm(reference))
    assert cosine > 0.999
    assert np.abs(got - reference).max() < 0.1 * np.abs(reference).max()


def test_every_layer_kind_the_pass_knows_is_quantized_and_the_rest_reported(cnn_and_profile):
    model, profile = cnn_and_profile
    backend = glow_core.plugins.get_backend("interpreter")
    stages = compile_stages(
        load_model(model), backend, precision=glow_core.Quantize(profile, keep={"AvgPool"})
    )
    report = stages.precision.quantization
    assert {"block1/conv+bn", "block1/relu", "block1/maxpool", "block2/conv"} <= set(report.quantized)
    assert report.kept_float == {"block2/avgpool": "kept by request"}
    assert {"avgpool", "block3/relu6", "fc"} <= set(report.quantized)  # ReduceMean, Clip, FC
    kinds = {n.kind for n in stages.function.nodes}
    assert "Softmax" not in report.quantized and kinds >= {"Convolution", "MaxPool"}
    int8_pool = [n for n in stages.function.nodes if n.kind == "MaxPool"]
    assert int8_pool and all(n.type.elem is glow_core.ElemKind.int8 for n in int8_pool)


def test_a_backend_without_the_integer_primitives_keeps_those_layers_float(cnn_and_profile):
    model, profile = cnn_and_profile

    class NoInt8MaxPool(type(glow_core.plugins.get_backend("interpreter"))):
        def info(self):
            info = super().info()
            supports = {
                k: [e for e in v if not (k == "MaxPool" and e == "int8")] for k, v in info.supports.items()
            }
            return info.model_copy(update={"supports": supports})

    stages = compile_stages(load_model(model), NoInt8MaxPool(), precision=glow_core.Quantize(profile))
    report = stages.precision.quantization
    assert "MaxPool[int8]" in report.kept_float["block1/maxpool"]
    assert "block1/conv+bn" in report.quantized


@pytest.mark.parametrize(("mode", "tolerance"), [("fp16", 2e-3), ("bf16", 2e-2)])
@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_precision_modes_compute_in_the_narrow_kind(backend, mode, tolerance):
    model = small_cnn()
    x = random_inputs(model, 5)
    reference = _logits(glow_core.compile(model, backend), x)
    got = _logits(glow_core.compile(model, backend, precision=mode), x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, reference, atol=tolerance * np.abs(reference).max())
    narrow = glow_core.quantization.FLOAT_MODES[mode]
    stages = compile_stages(load_model(model), glow_core.plugins.get_backend(backend), precision=mode)
    assert any(n.kind == "Convolution" and n.type.elem is narrow for n in stages.function.nodes)


def test_unknown_precision_and_calibration_are_refused(cnn_and_profile):
    model, profile = cnn_and_profile
    with pytest.raises(QuantizationError, match="unknown precision 'int4'"):
        glow_core.compile(model, "interpreter", precision="int4")
    with pytest.raises(QuantizationError, match="unknown calibration 'median'"):
        glow_core.Quantize(profile, calibration="median")


def test_cli_profiles_then_runs_quantized(tmp_path, capsys):
    path = tmp_path / "p.json"
    assert (
        main(["profile", "zoo:small_cnn", "--random", "2", "-o", str(path), "--backend", "interpreter"]) == 0
    )
    assert glow_core.Profile.load(path).batches == 2
    args = ["run", "zoo:small_cnn", "--backend", "interpreter", "--quantize", str(path), "--schema", "pow2"]
    assert main([*args, "--per-channel"]) == 0
    assert "output: float32[1, 10]" in capsys.readouterr().out
    assert main(["run", "zoo:mlp", "--backend", "interpreter", "--quantize", str(path)]) == 2
    assert "does not match" in capsys.readouterr().err


def test_cli_check_judges_a_quantized_run_by_cosine_similarity(tmp_path, capsys):
    """`glow run --quantize P --check` compares with onnxruntime's float model: the int8
    result is far outside the float tolerance (1e-4) yet agrees in direction, so the check
    passes on cosine similarity; an explicit --tolerance judges by relative error again."""
    path = tmp_path / "p.json"
    profile = ["profile", "zoo:small_cnn", "--random", "2", "-o", str(path), "--backend", "interpreter"]
    assert main(profile) == 0
    capsys.readouterr()
    args = ["run", "zoo:small_cnn", "--backend", "interpreter", "--quantize", str(path), "--check"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "cosine similarity" in out and "(OK: a quantized run" in out
    error = float(out.split("max relative error ")[1].split(",")[0])
    assert error > 1e-4, "the int8 run should differ from float32 by more than the float tolerance"
    assert main([*args, "--tolerance", "1e-4"]) == 1
    assert "MISMATCH, tolerance 0.0001" in capsys.readouterr().out


def test_cosine_similarity_rows_and_edges():
    from glow_core.accuracy import cosine_similarity, min_cosine_similarity

    x = np.array([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0]])
    assert cosine_similarity(x, x) == pytest.approx(1.0)
    flipped = x.copy()
    flipped[1] = -flipped[1]
    assert cosine_similarity(flipped, x) == pytest.approx(-1.0)  # the worst row counts
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine_similarity(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) == -1.0
    assert cosine_similarity(np.ones(3), np.ones(4)) == -1.0
    assert min_cosine_similarity({"a": x}, {"b": x}) == -1.0

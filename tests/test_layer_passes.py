"""fold-batchnorm and sink-transposes: what they rewrite, and that results do not change."""

from __future__ import annotations

import numpy as np
from graph_helpers import new_function, seeded_rng

from glow_core.accuracy import relative_error
from glow_core.graph.verifier import verify
from glow_core.lowering import lower_function
from glow_core.lowering.evaluate import evaluate
from glow_core.passes import GRAPH_PASSES, Pipeline, run_pipeline


def _bn_params(b, rng, channels: int):
    gamma = b.constant(rng.uniform(0.5, 1.5, channels), "gamma")
    beta = b.constant(rng.standard_normal(channels), "beta")
    mean = b.constant(rng.standard_normal(channels), "mean")
    var = b.constant(rng.uniform(0.5, 1.5, channels), "var")
    return gamma, beta, mean, var


def _kinds(fn) -> list[str]:
    return sorted(n.kind for n in fn.nodes)


def test_batchnorm_folds_into_conv():
    rng = seeded_rng("bn-conv")
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 3, 9, 9))
    w = b.constant(rng.standard_normal((4, 3, 3, 3)), "w")
    conv = b.conv(x, w, b.constant(rng.standard_normal(4), "bias"), pads=(1, 1, 1, 1))
    b.save(b.BatchNorm(conv, *_bn_params(b, rng, 4), epsilon=1e-3), "y")
    feeds = {"x": rng.standard_normal((2, 3, 9, 9)).astype(np.float32)}
    before = evaluate(m, feeds)["y"]
    assert GRAPH_PASSES["fold-batchnorm"](fn)
    verify(fn)
    assert _kinds(fn) == ["Conv", "Save"]
    assert relative_error(evaluate(m, feeds)["y"], before) < 1e-5


def test_batchnorm_folds_into_fully_connected():
    rng = seeded_rng("bn-fc")
    m, fn, b = new_function()
    x = b.placeholder("x", (5, 6))
    fc = b.fully_connected(x, b.constant(rng.standard_normal((6, 3))), b.constant(rng.standard_normal(3)))
    b.save(b.BatchNorm(fc, *_bn_params(b, rng, 3)), "y")
    feeds = {"x": rng.standard_normal((5, 6)).astype(np.float32)}
    before = evaluate(m, feeds)["y"]
    assert GRAPH_PASSES["fold-batchnorm"](fn)
    assert _kinds(fn) == ["FullyConnected", "Save"]
    assert relative_error(evaluate(m, feeds)["y"], before) < 1e-5


def test_batchnorm_is_kept_when_the_conv_has_other_readers():
    rng = seeded_rng("bn-shared")
    _m, fn, b = new_function()
    x = b.placeholder("x", (1, 2, 4, 4))
    conv = b.conv(x, b.constant(rng.standard_normal((2, 2, 1, 1))))
    b.save(b.BatchNorm(conv, *_bn_params(b, rng, 2)), "y")
    b.save(conv, "raw")
    assert not GRAPH_PASSES["fold-batchnorm"](fn)


def test_batchnorm_with_runtime_parameters_is_kept():
    rng = seeded_rng("bn-runtime")
    _m, fn, b = new_function()
    x = b.placeholder("x", (1, 2, 4, 4))
    conv = b.conv(x, b.constant(rng.standard_normal((2, 2, 1, 1))))
    gamma, beta, mean, _ = _bn_params(b, rng, 2)
    b.save(b.BatchNorm(conv, gamma, beta, mean, b.placeholder("var", (2,))), "y")
    assert not GRAPH_PASSES["fold-batchnorm"](fn)


def test_transposes_sink_below_elementwise_and_cancel():
    rng = seeded_rng("sink")
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 3, 4))
    y = b.placeholder("y", (2, 3, 4))
    to_nhwc = (0, 2, 1)
    summed = b.Add(b.Transpose(x, shuffle=to_nhwc), b.Transpose(y, shuffle=to_nhwc))
    activated = b.Max(summed, b.splat(0.0, summed))
    b.save(b.Transpose(activated, shuffle=to_nhwc), "out")
    feeds = {
        "x": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "y": rng.standard_normal((2, 3, 4)).astype(np.float32),
    }
    before = evaluate(m, feeds)["out"]
    report = run_pipeline(
        fn,
        Pipeline("sink-transposes", "sink-transposes", "fold-transpose-pairs", "eliminate-noops", "dce"),
        verify_each=True,
    )
    assert report.changes["sink-transposes"] == 1  # both nodes sink in one sweep; the second finds nothing
    assert "Transpose" not in _kinds(fn)
    np.testing.assert_array_equal(evaluate(m, feeds)["out"], before)


def test_transpose_with_other_readers_is_not_sunk():
    _m, fn, b = new_function()
    x = b.placeholder("x", (2, 3))
    t = b.Transpose(x, shuffle=(1, 0))
    b.save(b.Exp(t), "e")
    b.save(t, "t")
    assert not GRAPH_PASSES["sink-transposes"](fn)


def test_default_pipeline_folds_batchnorm_in_a_zoo_model():
    from glow_core.frontends.onnx import load_onnx
    from glow_core.model_zoo import resnet_bottleneck

    module = load_onnx(resnet_bottleneck())
    fn = module.function
    assert "BatchNorm" in _kinds(fn)
    from glow_core.passes import DEFAULT_GRAPH_PIPELINE

    run_pipeline(fn, DEFAULT_GRAPH_PIPELINE, verify_each=True)
    assert "BatchNorm" not in _kinds(fn)
    lower_function(fn)
    verify(fn)

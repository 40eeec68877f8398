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


def _folded_by_formula(w, bias, gamma, beta, mean, var, epsilon, per_row):
    """The fold in float64 over whole tensors, rounded once to float32: what the pass
    computed before it worked a block of rows at a time."""
    scale = gamma / np.sqrt(var + epsilon)
    shaped = scale.reshape(-1, *(1,) * (w.ndim - 1)) if per_row else scale
    return (w.astype(np.float64) * shaped).astype(np.float32), ((bias - mean) * scale + beta).astype(
        np.float32
    )


def test_folded_weights_are_bit_identical_to_the_whole_tensor_fold(monkeypatch):
    """Blocks of 3 rows (the real block is 1 MB): every element rounded once, as before."""
    from glow_core.passes import layer_passes

    monkeypatch.setattr(layer_passes, "_FOLD_CHUNK_BYTES", 3 * 8 * 5 * 3 * 3, raising=False)
    rng = seeded_rng("bn-bits")
    for kind, shape in (("Conv", (8, 5, 3, 3)), ("FullyConnected", (7, 8))):
        m, fn, b = new_function()
        w = rng.standard_normal(shape).astype(np.float32)
        bias = rng.standard_normal(8).astype(np.float32)
        params = [
            rng.uniform(0.5, 1.5, 8),
            rng.standard_normal(8),
            rng.standard_normal(8),
            rng.uniform(0.1, 2, 8),
        ]
        params = [p.astype(np.float32) for p in params]
        if kind == "Conv":
            layer = b.conv(b.placeholder("x", (1, 5, 6, 6)), b.constant(w, "w"), b.constant(bias, "bias"))
        else:
            layer = b.fully_connected(
                b.placeholder("x", (4, 7)), b.constant(w, "w"), b.constant(bias, "bias")
            )
        names = ("gamma", "beta", "mean", "var")
        b.save(
            b.BatchNorm(layer, *(b.constant(p, n) for p, n in zip(params, names, strict=True)), epsilon=1e-3),
            "y",
        )
        assert GRAPH_PASSES["fold-batchnorm"](fn)
        (fused,) = fn.nodes_of(kind)
        as_f64 = [p.astype(np.float64) for p in params]
        want_w, want_b = _folded_by_formula(
            w, bias.astype(np.float64), *as_f64, np.float32(1e-3), kind == "Conv"
        )
        np.testing.assert_array_equal(fused.inputs[1].value, want_w)
        np.testing.assert_array_equal(fused.inputs[2].value, want_b)
        # The unfolded weights and the BatchNorm's parameters left the module with their nodes.
        assert sorted(m.constants) == sorted([fused.inputs[1].name, fused.inputs[2].name])


def test_a_weight_another_layer_reads_stays_after_folding():
    rng = seeded_rng("bn-shared-weight")
    m, fn, b = new_function()
    x = b.placeholder("x", (1, 2, 4, 4))
    w = b.constant(rng.standard_normal((2, 2, 1, 1)), "w")
    b.save(b.BatchNorm(b.conv(x, w), *_bn_params(b, rng, 2)), "y")
    b.save(b.conv(x, w), "plain")
    feeds = {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)}
    before = evaluate(m, feeds)
    assert GRAPH_PASSES["fold-batchnorm"](fn)
    verify(fn)
    assert m.constants.get("w") is w and len(w.users) == 1
    after = evaluate(m, feeds)
    assert all(relative_error(after[k], before[k]) < 1e-5 for k in ("y", "plain"))


def test_a_compile_from_a_file_keeps_no_unfolded_weights_alive(tmp_path):
    """The model loaded from the file is the compile's own (no copy whose nodes, reference
    cycles, would hold every original weight until a gc run): after fold-batchnorm, the
    only constants alive are those of the graph being compiled."""
    import gc

    import onnx

    from glow_core.graph.node import Constant
    from glow_core.model_zoo import resnet_bottleneck
    from glow_core.plugins import get_backend
    from glow_core.runtime.pipeline import compile_stages

    path = tmp_path / "bottleneck.onnx"
    onnx.save(resnet_bottleneck(), str(path))
    gc.collect()
    gc.disable()
    try:
        # Constants that other tests of this worker keep alive (module caches) are not this
        # compile's: hold them, so their ids stay theirs, and count only the new ones.
        already_alive = [o for o in gc.get_objects() if isinstance(o, Constant)]
        known = {id(o) for o in already_alive}
        stages = compile_stages(str(path), get_backend("interpreter"), stop_before="lower")
        alive = {id(o) for o in gc.get_objects() if isinstance(o, Constant)} - known
        assert "BatchNorm" not in _kinds(stages.function)
        assert alive == {id(c) for c in stages.module.constants.values()}
    finally:
        gc.enable()

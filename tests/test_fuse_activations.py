"""fuse-activations: Relu/Clip fold into a kept Conv/FullyConnected only where the backend says so."""

from __future__ import annotations

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend

import glow_core
from glow_core.accuracy import relative_error
from glow_core.errors import BackendError, ShapeError
from glow_core.graph import Builder, Module
from glow_core.graph.verifier import verify
from glow_core.lowering.evaluate import evaluate
from glow_core.passes.fuse_activations import fuse_activations
from glow_core.runtime.pipeline import compile_stages
from glow_core.types import ElemKind


def _block(seed: int) -> Module:
    """clip(fc(relu(conv(x)))): one Relu after a Conv, one Clip after a FullyConnected."""
    rng = np.random.default_rng(seed)
    m = Module("block")
    b = m.create_function().builder()
    x = b.placeholder("x", (2, 3, 6, 6))
    w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = b.constant(rng.standard_normal(4).astype(np.float32), "bias")
    h = b.relu(b.conv(x, w, bias, pads=(1, 1, 1, 1)))
    flat = b.reshape(h, (2, 4 * 6 * 6))
    fc_w = b.constant(rng.standard_normal((144, 5)).astype(np.float32) * 0.02, "fc_w")
    fc_b = b.constant(rng.standard_normal(5).astype(np.float32), "fc_b")
    b.save(b.Clip(b.fully_connected(flat, fc_w, fc_b), low=-0.5, high=0.5), "y")
    return m


def _everything(layer, activation) -> bool:
    return True


def test_relu_and_clip_fold_into_their_layers_with_their_arguments(rng):
    seed = int(rng.integers(1 << 30))
    m = _block(seed)
    fn = m.function
    assert fuse_activations(fn, _everything)
    verify(fn)
    kinds = sorted(n.kind for n in fn.nodes)
    assert "Relu" not in kinds and "Clip" not in kinds
    conv = next(fn.nodes_of("Conv"))
    fc = next(fn.nodes_of("FullyConnected"))
    assert (conv.activation, conv.activation_args) == ("relu", ())
    assert (fc.activation, fc.activation_args) == ("clip", (-0.5, 0.5))
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    # The fused layer's lowering applies the activation after the bias: same numbers.
    fused, unfused = evaluate(m, {"x": x})["y"], evaluate(_block(seed), {"x": x})["y"]
    assert 0 < np.count_nonzero(np.abs(unfused) < 0.5) < unfused.size  # the clip both cuts and passes
    assert relative_error(fused, unfused) < 1e-6


def test_nothing_folds_where_the_backend_says_no(rng):
    fn = _block(int(rng.integers(1 << 30))).function
    assert not fuse_activations(fn, lambda layer, activation: activation.kind == "Sigmoid")
    assert {"Relu", "Clip"} <= {n.kind for n in fn.nodes}


def test_a_layer_read_by_another_node_or_under_another_predicate_keeps_its_activation(rng):
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (3, 4))
    p = b.placeholder("p", (1,), ElemKind.bool)
    w, bias = b.constant(rng.standard_normal((4, 2))), b.constant(rng.standard_normal(2))
    shared = b.fully_connected(x, w, bias)
    b.save(b.relu(shared), "a")
    b.save(shared, "b")  # the un-activated value is needed too
    gated = Builder(fn, predicate=p).relu(b.fully_connected(x, w, bias))
    b.save(gated, "c")
    assert not fuse_activations(fn, _everything)


def test_layers_refuse_an_unknown_activation_or_wrong_arguments(rng):
    b = Module().create_function().builder()
    x = b.placeholder("x", (3, 4))
    w, bias = b.constant(rng.standard_normal((4, 2))), b.constant(rng.standard_normal(2))
    with pytest.raises(ShapeError, match="unknown activation 'gelu'"):
        b.FullyConnected(x, w, bias, activation="gelu")
    with pytest.raises(ShapeError, match="takes 2 argument"):
        b.FullyConnected(x, w, bias, activation="clip")


def test_the_pipeline_fuses_for_a_backend_that_keeps_the_layers_and_runs_them(rng):
    keeper = InterpreterBackend(keep=("Conv", "FullyConnected"))
    assert keeper.info().fused_activations == {"Conv": ["Clip", "Relu"], "FullyConnected": ["Clip", "Relu"]}
    seed = int(rng.integers(1 << 30))
    stages = compile_stages(_block(seed), keeper, verify_each=True)
    assert stages.passes.changes["fuse-activations"] == 1
    kinds = [i.kind for i in stages.ir.compute_instrs()]
    assert "Conv" in kinds and "FullyConnected" in kinds and "Max" not in kinds
    module = _block(seed)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    got = glow_core.compile(module, backend=keeper).run({"x": x})["y"]
    assert relative_error(got, evaluate(module, {"x": x})["y"]) < 1e-5


def test_a_backend_that_lowers_the_layers_gets_no_fusion(rng):
    stages = compile_stages(_block(int(rng.integers(1 << 30))), InterpreterBackend())
    assert stages.passes.changes["fuse-activations"] == 0


def test_the_interpreter_refuses_to_keep_what_is_not_a_node():
    with pytest.raises(BackendError, match="cannot keep"):
        InterpreterBackend(keep=("Convolution",))

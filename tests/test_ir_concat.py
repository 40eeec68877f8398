"""The ``concat-in-place`` IR pass: at batch 1 the branches of an Inception-style block write
straight into their slices of the Concat's buffer, and the Concat disappears; the results
stay those of a float64 reference on every backend that runs the block."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import relative_error
from glow_core.ir import verify_ir
from glow_core.ir.instructions import TensorView
from glow_core.ir.memory import check_plan
from glow_core.runtime.pipeline import compile_stages


def block_model(batch: int, branches: tuple[str, ...], seed: int = 0, c: int = 24, hw: int = 11):
    """Branches over one input, concatenated on the channels, then a Sigmoid (so the Concat's
    buffer is an activation, not the model's output). ``conv``: 1x1 conv + bias + ReLU;
    ``pool``: 3x3 average pool (pad 1, the pad counted) then that conv; ``pair``: two convs
    concatenated (a Concat inside a Concat); ``max``: 3x3 stride-1 max pool, pad 1."""
    rng = np.random.default_rng(seed)
    nodes, inits, outs = [], [], []

    def conv(src: str, name: str, cout: int) -> str:
        w = (rng.standard_normal((cout, c, 1, 1)) * 0.3).astype(np.float32)
        bias = rng.standard_normal(cout).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(bias, f"{name}_b")])
        nodes.append(helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [f"{name}_c"]))
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [name]))
        return name

    total = 0
    for index, kind in enumerate(branches):
        name = f"b{index}"
        if kind == "conv":
            outs.append(conv("x", name, 16))
            total += 16
        elif kind == "pool":
            pool = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
            nodes.append(helper.make_node("AveragePool", ["x"], [f"{name}_p"], **pool))
            outs.append(conv(f"{name}_p", name, 8))
            total += 8
        elif kind == "pair":
            parts = [conv("x", f"{name}a", 8), conv("x", f"{name}b", 5)]
            nodes.append(helper.make_node("Concat", parts, [name], axis=1))
            outs.append(name)
            total += 13
        else:
            nodes.append(helper.make_node("MaxPool", ["x"], [name], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
            outs.append(name)
            total += c
    nodes.append(helper.make_node("Concat", outs, ["cat"], axis=1))
    nodes.append(helper.make_node("Sigmoid", ["cat"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, total, hw, hw])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


BRANCHES = ("conv", "pool", "pair", "max")


def _optimized_ir(model):
    from glow_interpreter.backend import InterpreterBackend

    return compile_stages(model, InterpreterBackend()).ir


def test_batch_one_branches_write_into_the_concat_buffer():
    ir = _optimized_ir(block_model(1, BRANCHES))
    verify_ir(ir)
    check_plan(ir.memory_plan)
    assert not [i for i in ir.instrs if i.kind == "Concat"]
    views = [i for i in ir.instrs if isinstance(i, TensorView) and i.source.type.shape[1] == 61]
    assert len({v.source.name for v in views}) == 1  # one buffer, the nested pair's slices too
    plane = 11 * 11
    assert {v.offset for v in views} == {0, 16 * plane, 24 * plane, 32 * plane, 37 * plane}


def test_batch_two_keeps_the_concat():
    """The slices of one input are not contiguous when the batch is above 1."""
    ir = _optimized_ir(block_model(2, BRANCHES))
    assert [i.kind for i in ir.instrs].count("Concat") == 2


CASES = [BRANCHES, ("conv", "pool"), ("pool", "max", "conv", "pair")]
"""``("conv", "pool")``: the case glow-cpu once got wrong, when only the last buffer of each
branch's in-place chain became a view: its fused convolution wrote the slice while the
pool's result, planned in the same bytes, was still being read (backends/glow_cpu/tests/
test_cpu_concat_in_place.py runs these on cpu)."""


def check_block(
    rng, backend: str, branches: tuple[str, ...], options: dict | None = None, c: int = 24, hw: int = 11
) -> None:
    """The block at batch 1 on ``backend`` against onnx.reference in float64, twice (the
    outputs are poisoned before each run)."""
    model = block_model(1, branches, seed=len(branches), c=c, hw=hw)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float64)})[0]
    compiled = glow_core.compile(model, backend=backend, options=options)
    for _ in range(2):  # outputs are poisoned before each run
        got = compiled.run({"x": x})["y"]
        assert np.isfinite(got).all()
        assert relative_error(got, expected) < 1e-5


@pytest.mark.parametrize("branches", CASES)
def test_block_matches_float64_reference(rng, branches, registry):
    check_block(rng, "interpreter", branches)

"""The constant region stores each weight once: packed copies, and originals only where read."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from glow_cpu.codegen import build_program, constant_root
from glow_cpu.runtime import constant_region
from glow_cpu.winograd_transforms import VARIANTS

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.ir.instructions import WeightKind
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import choose_backend, compile_stages, load_model

pytest.importorskip("onnxruntime")


def _ir(name: str):
    backend, _ = choose_backend("cpu", None)
    return compile_stages(load_model(MODELS[name]()), backend).ir


@pytest.mark.parametrize("name", ["mlp", "resnet_bottleneck", "mobilenetv2_block"])
def test_packed_weights_are_not_stored_a_second_time(name):
    ir = _ir(name)
    layout = build_program(ir, 1, False).layout
    region = constant_region(ir, layout)
    parameters = sum(w.type.nbytes for w in ir.weights if w.kind is WeightKind.CONSTANT)
    # GEMM and convolution weights: their panels are what the kernels read.
    packed_roots = {constant_root(ir.instrs[p.instr].operands[p.operand][0])[0].name for p in layout.packed}
    assert packed_roots, f"{name}: expected kernels that read packed weights"
    assert packed_roots.isdisjoint(layout.constant_offsets), "a packed weight is stored twice"
    # Winograd's transformed filters are (m + 2)^2 / 9 times their 3x3 filter (docs/winograd.md).
    growth = sum(
        (VARIANTS[p.params["m"]].positions / 9 - 1) * ir.instrs[p.instr].operands[p.operand][0].type.nbytes
        for p in layout.packed
        if p.packer == "winograd_filter"
    )
    # Panels pad to whole register tiles: a little above the parameters, never twice them.
    assert region.nbytes < 1.1 * (parameters + growth), (region.nbytes, parameters, growth)
    # The originals that are kept sit after the panels, each at its own aligned offset.
    sizes = {w.name: w.type.nbytes for w in ir.weights}
    spans = sorted((o, o + sizes[n]) for n, o in layout.constant_offsets.items())
    assert all(start >= layout.constant_base and start % 64 == 0 for start, _ in spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert layout.region_bytes == region.nbytes
    assert not spans or spans[-1][1] <= layout.region_bytes


@pytest.mark.parametrize("name", ["mlp", "resnet_bottleneck", "mobilenetv2_block"])
def test_outputs_with_the_compact_region_match_onnxruntime(name):
    model = MODELS[name]()
    inputs = random_inputs(model, seed=3)
    got = glow_core.compile(model, backend="cpu", options={"threads": 1, "cache": False}).run(inputs)
    assert all(np.isfinite(v).all() and np.abs(v).max() > 0 for v in got.values())
    error = max_relative_error(got, onnxruntime_outputs(model, inputs))
    assert error < 1e-4, f"{name}: relative error {error:.3g}"

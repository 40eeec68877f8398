"""Dense layers whose A (the activation, rows of tokens) outgrows half of L2 run each row
panel over a group of the weight's column panels (``gemm._streams_a``), as a transformer's
dense layers do at batch 8. The visiting order changes, each element's sum does not: the
outputs match a float64 reference and are bit-equal to the one-panel-at-a-time order, on
the AVX2 and the AVX-512 register file (a file only changes the blocking), on 1 and 3
threads, with a bias and a residual fused into the store. The runtime poisons outputs
before each run, so an element no tile wrote shows up as non-finite.
"""

from __future__ import annotations

import numpy as np
import pytest
from glow_conformance.compare import TOLERANCE
from glow_cpu import backend as cpu_backend
from glow_cpu.kernels import gemm
from glow_cpu.kernels.gemm_shape import Gemm
from glow_cpu.registers import AVX2, AVX512
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

# (m, k, n): A = m x k floats, all past half of L2 (512 KiB).
SHAPES = [
    (1033, 300, 200),  # 206 x 5 + 3 rows; 12 column panels + 8 columns (groups of 6, 6, 1); 2 K blocks
    (700, 1024, 40),  # 4 K blocks; 2 panels + 8 columns: one group
    (2000, 70, 100),  # one K block; 6 panels + 4 columns
]


def _dense(m: int, k: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Add", ["y", "b"], ["z"]),
        helper.make_node("Add", ["z", "r"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [m, n]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    feeds = {
        "x": rng.standard_normal((m, k)).astype(np.float32),
        "r": rng.standard_normal((m, n)).astype(np.float32),
    }
    expected = feeds["x"].astype(np.float64) @ weight.astype(np.float64) + bias + feeds["r"]
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds, expected


@pytest.mark.parametrize("registers", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_grouped_layers_match_float64_and_the_old_order(shape, threads, registers, monkeypatch, tmp_path):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_backend, "register_file", lambda *target: registers)
    model, feeds, expected = _dense(*shape, seed=sum(shape) * 7 + threads)
    options = {"threads": threads, "parallel_work": 0, "cache": False}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)["out"]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert relative_error(got, expected) < TOLERANCE[ElemKind.float32]
    monkeypatch.setattr(gemm, "_streams_a", lambda g: False)
    one_panel_at_a_time = glow_core.compile(model, backend="cpu", options=options).run(feeds)["out"]
    np.testing.assert_array_equal(got, one_panel_at_a_time)


def _product(m: int, depth: int, constant_b: bool = True) -> Gemm:
    return Gemm(
        m=m, n=256, outer=depth, taps=(0,), a=None, a_panel=5 * depth, a_row=depth, a_k=1, b=None,
        b_panel=depth * 16 if constant_b else 16, b_outer=16 if constant_b else 256, b_padded=constant_b,
        c=None, ldc=256, mr=5, nr=16,
    )  # fmt: skip


def test_groups_only_where_a_outgrows_half_of_l2():
    """BERT-mini's dense layers: grouped at batch 8 (1024 tokens: A is 1-4 MiB), not at batch
    1 (128 tokens: 128-512 KiB), and never when B is read at run time (a convolution's
    activations: the run-time packing chooses its own groups)."""
    assert gemm._streams_a(_product(1024, 1024))
    assert gemm._streams_a(_product(1024, 256))
    assert not gemm._streams_a(_product(128, 1024))
    assert not gemm._streams_a(_product(128, 256))
    assert not gemm._streams_a(_product(1024, 1024, constant_b=False))

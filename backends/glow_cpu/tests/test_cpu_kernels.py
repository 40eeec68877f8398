"""The fast paths on shapes the declared examples do not reach: packed weights, partial
tiles, blocked K, every convolution strategy, and threads 1 vs 2."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import run_case

from glow_core.types import Type

MATMULS = [
    ("f32[1,784]", "f32[784,1024]"),
    ("f32[8,300]", "f32[300,70]"),
    ("f32[33,17]", "f32[17,45]"),
    ("f32[5,600]", "f32[600,3]"),
    ("f32[40,100]", "f32[100,50]"),
    ("f32[3,1]", "f32[1,1]"),
    ("f32[20,1]", "f32[1,21]"),  # depth 1: A's rows contiguous, the last 5 columns over rows
]

CONVOLUTIONS = [
    ("f32[1,64,14,14]", "f32[48,64,1,1]", {}),
    ("f32[2,20,13,11]", "f32[33,20,3,3]", {"pads": (1, 1, 1, 1)}),
    ("f32[1,300,7,7]", "f32[20,300,3,3]", {"pads": (1, 1, 1, 1)}),
    ("f32[1,16,15,15]", "f32[8,16,3,3]", {"pads": (1, 1, 1, 1), "strides": (2, 2)}),
    ("f32[1,3,23,23]", "f32[16,3,7,7]", {"pads": (3, 3, 3, 3), "strides": (2, 2)}),
    ("f32[2,32,9,9]", "f32[64,32,1,1]", {"strides": (2, 2)}),
    ("f32[1,8,15,15]", "f32[8,1,3,3]", {"pads": (1, 1, 1, 1), "strides": (2, 2), "group": 8}),
    ("f32[2,4,9,33]", "f32[8,1,3,3]", {"pads": (1, 1, 1, 1), "group": 4}),
    ("f32[1,6,10,10]", "f32[6,3,3,3]", {"pads": (2, 0, 1, 2), "group": 2, "dilations": (1, 2)}),
]


def _ids(cases):
    return ["x".join(str(c) for c in case[:2]) + (str(case[2]) if len(case) > 2 else "") for case in cases]


@pytest.mark.parametrize("constant", [(), (1,)], ids=["runtime", "weight"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("lhs", "rhs"), MATMULS, ids=_ids(MATMULS))
def test_matmul(lhs, rhs, threads, constant, rng):
    types = [Type.parse(lhs), Type.parse(rhs)]
    assert run_case("MatMul", types, {}, rng, threads, constant) < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lhs", ["f32[40,100]", "f32[7,300]"])
def test_matmul_with_constant_lhs(lhs, threads, rng):
    """A packed weight on the left: the partial column panels (50 = 32 + 16 + 2 columns;
    the 2 accumulated over rows) and partial row panels (40 = 3 x 12 + 4; 7 rows)."""
    types = [Type.parse(lhs), Type.parse(f"f32[{lhs.split(',')[1][:-1]},50]")]
    assert run_case("MatMul", types, {}, rng, threads, (0,)) < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_matmul(threads, rng):
    types = [Type.parse("f32[3,17,40]"), Type.parse("f32[3,40,33]")]
    assert run_case("BatchMatMul", types, {}, rng, threads) < 1e-5


@pytest.mark.parametrize("constant", [(), (1,)], ids=["runtime", "weight"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x", "w", "attrs"), CONVOLUTIONS, ids=_ids(CONVOLUTIONS))
def test_convolution(x, w, attrs, threads, constant, rng):
    types = [Type.parse(x), Type.parse(w)]
    assert run_case("Convolution", types, attrs, rng, threads, constant) < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("kind", "shape", "attrs"),
    [
        ("MaxPool", "f32[2,5,17,19]", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        ("AvgPool", "f32[1,7,14,14]", {"kernel": (7, 7)}),
        # No padding: read in place, two loads and a lane shuffle per window row and column.
        ("MaxPool", "f32[2,3,37,45]", {"kernel": (2, 2), "strides": (2, 2)}),
        ("AvgPool", "f32[1,4,9,40]", {"kernel": (3, 3)}),
        ("MaxPool", "f32[1,2,11,17]", {"kernel": (3, 2), "strides": (1, 2)}),
        ("MaxPool", "f32[1,2,10,33]", {"kernel": (2, 3), "strides": (2, 2)}),  # 33 lanes: phase split
        ("ReduceSum", "f32[3,50,7]", {"axes": (1,)}),
        ("ReduceMax", "f32[4,1025]", {"axes": (1,)}),
        # Innermost runs: 16 lanes at a time, the last vector masked (a 7x7 plane: 49).
        ("ReduceSum", "f32[2,37,7,7]", {"axes": (2, 3)}),
        ("ReduceMax", "f32[2,37,7,7]", {"axes": (2, 3)}),
        ("ReduceSum", "f32[5,16]", {"axes": (1,)}),
        ("ReduceMax", "f32[6,3]", {"axes": (1,)}),
        ("ReduceSum", "f32[3,4001]", {"axes": (1,)}),
        ("ReduceSum", "f32[9,33]", {"axes": (0, 1)}),
        ("ReduceMax", "f32[1,1]", {"axes": (1,)}),
        ("Transpose", "f32[2,17,33,5]", {"shuffle": (0, 3, 1, 2)}),
        ("Broadcast", "f32[1,64,1,1]", {"shape": (2, 64, 9, 9)}),
        ("Exp", "f32[1023]", {}),
        ("Tanh", "f32[3,17,33]", {}),
        ("Erf", "f32[511,513]", {}),
    ],
)
def test_other_kernels_on_odd_sizes(kind, shape, attrs, threads, rng):
    assert run_case(kind, [Type.parse(shape)], attrs, rng, threads) < 1e-5


@pytest.mark.parametrize("lanes", [5, 16, 49])
def test_innermost_max_lets_nan_win(lanes, rng):
    """The vector ReduceMax keeps the element-wise Max's rule: a NaN anywhere in a run
    (in a whole vector or the masked last one) is the result; other runs are unaffected."""
    from cpu_cases import one_primitive_ir
    from glow_cpu.backend import CpuBackend, CpuOptions

    x = rng.standard_normal((3, lanes)).astype(np.float32)
    x[1, lanes - 1] = np.nan
    ir = one_primitive_ir("ReduceMax", [Type.parse(f"f32[3,{lanes}]")], {"axes": (1,)}, {})
    got = CpuBackend().compile(ir, CpuOptions(threads=1)).run({"in0": x})["out"].reshape(3)
    assert np.isnan(got[1])
    np.testing.assert_array_equal(got[[0, 2]], x[[0, 2]].max(axis=1))

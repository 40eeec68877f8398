"""A pooling window's tap loops stay scalar: LLVM's loop vectorizer aborted the whole process
planning the float16 MaxPool below (an assertion in llvmlite 0.50's LLVM), so the conformance
run recorded it as crashed. Run in a child process, so the old abort fails this test instead
of ending the test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ABORTED_CASE = "MaxPool[float16-6x6x21x27]"


@pytest.mark.parametrize(
    "case_id", [ABORTED_CASE, "MaxPool[bfloat16-6x6x21x27]", "AvgPool[float16-6x6x21x27]"]
)
def test_pool_window_compiles_and_matches_the_reference(case_id: str, tmp_path: Path) -> None:
    env = {**os.environ, "GLOW_CPU_CACHE_DIR": str(tmp_path / "cache")}  # compile for real
    command = [sys.executable, "-m", "glow_conformance", "--backend", "cpu", "--layers", "primitives"]
    done = subprocess.run(
        [*command, "--select", case_id, "--in-process", "--seed", "7"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"{case_id}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )
    assert "| primitives | 1 | 0 |" in done.stdout, done.stdout


# MaxPool float64, 3x2 window, strides (1, 2), pads (0, 1, 2, 0) on a 12x14 plane: the 2-tap row
# loop is unrolled, the window's row loop becomes the innermost one, and LLVM's vectorizer
# aborted planning it for AVX-512 CPUs (seen on an Emerald Rapids Xeon in a conformance run,
# `MaxPool[float64-1x4x12x14]`); AVX2 hosts compiled it. A bundle compiles for any x86 CPU on
# any x86 host, so the AVX-512 plan is checked here without running the code.
AVX512_WINDOW = {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [0, 1, 2, 0]}


@pytest.mark.parametrize("cpu", ["emeraldrapids", "skylake-avx512"])
@pytest.mark.parametrize(
    "op,elem", [("MaxPool", "DOUBLE"), ("MaxPool", "FLOAT16"), ("AveragePool", "DOUBLE")]
)
def test_pool_window_compiles_for_avx512_cpus(cpu: str, op: str, elem: str, tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    kind = getattr(TensorProto, elem)
    node = helper.make_node(op, ["x"], ["y"], **AVX512_WINDOW)
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", kind, [1, 4, 12, 14])],
        [helper.make_tensor_value_info("y", kind, None)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "pool.onnx")
    env = {**os.environ, "GLOW_CPU_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-c", "import sys; from glow_core.cli import main; sys.exit(main())"]
    args = [
        "bundle",
        str(tmp_path / "pool.onnx"),
        "-o",
        str(tmp_path / "out"),
        "--target",
        "x86_64-linux-gnu",
    ]
    done = subprocess.run(
        [*command, *args, "--cpu", cpu], capture_output=True, text=True, env=env, check=False, timeout=600
    )
    assert done.returncode == 0, f"{op} {elem} for {cpu}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert (tmp_path / "out" / "pool.o").stat().st_size > 0

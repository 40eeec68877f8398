"""``glow bench``: latency statistics, throughput and peak memory, beside onnxruntime."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from glow_core.cli import main
from glow_core.commands.measure import Latencies, PeakMemory, time_runs

COLUMNS = ["engine", "ready in", "runs", "min", "median", "p90", "p99", "mean", "throughput", "peak RSS"]


def _symbolic_batch_model(path) -> str:
    """y = relu(x) with x: float[N, 8]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _table(out: str) -> dict[str, list[str]]:
    """The result table's rows by engine name, cells split on runs of two or more spaces."""
    import re

    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["engine", "ready"])
    assert re.split(r"\s{2,}", lines[header].strip()) == COLUMNS
    rows = {}
    for line in lines[header + 2 :]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(COLUMNS):
            break
        rows[cells[0]] = cells
    return rows


def _ms(cell: str) -> float:
    number, unit = cell.split()
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def test_bench_beside_onnxruntime(registry, capsys):
    assert main(["bench", "zoo:small_cnn", "--runs", "7", "--warmup", "1", "--compare", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    assert set(rows) == {"glow interpreter", next(k for k in rows if k.startswith("onnxruntime "))}
    for cells in rows.values():
        assert cells[2] == "7"
        low, median, p90, p99 = (_ms(c) for c in cells[3:7])
        assert 0 < low <= median <= p90 <= p99
        assert float(cells[8].removesuffix("/s")) > 0
        assert cells[9].endswith("iB")
    assert "median latency, glow interpreter / onnxruntime" in out
    assert "model: zoo:small_cnn  inputs: input float32[1, 3, 32, 32]  batch: 1" in out


def test_symbolic_batch_is_reported_and_set_by_batch(registry, tmp_path, capsys):
    model = _symbolic_batch_model(tmp_path / "relu.onnx")
    assert main(["bench", model, "--runs", "2", "--warmup", "0"]) == 0
    said = capsys.readouterr()
    assert "note: input 'x' dimension 0 is symbolic ('N'): compiling with 1" in said.err
    assert main(["bench", model, "--runs", "2", "--batch", "6", "--compare", "onnxruntime"]) == 0
    said = capsys.readouterr()
    assert "compiling with 6 (--batch)" in said.err and "x float32[6, 8]  batch: 6" in said.out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--batch", "4"], "--batch 4: input 'input' has a fixed first dimension of 1"),
        (["--threads", "2"], "--threads: backend 'interpreter' has no threads option"),
        (["--runs", "0"], "--runs 0: give a positive number"),
        (["--shape", "nope=1,2"], "--shape nope=...: the model has no input 'nope'; its inputs: input"),
        (["--backend", "interpreter,cpu"], "--backend interpreter,cpu: bench times one backend"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(argv, expected, registry, capsys):
    assert main(["bench", "zoo:small_cnn", "--runs", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {expected}") and err.count("\n") == 1


def test_runs_and_time_exclude_each_other(registry, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "zoo:small_cnn", "--runs", "3", "--time", "1"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_percentiles_are_nearest_rank():
    lat = Latencies(tuple(float(i) for i in range(1, 101)), wall=50.0)  # 1..100 s
    assert (lat.percentile(50), lat.percentile(90), lat.percentile(99), lat.percentile(100)) == (
        50,
        90,
        99,
        100,
    )
    assert lat.median == 50.5 and lat.throughput(batch=4) == 8.0
    few = Latencies((3.0, 1.0, 2.0), wall=6.0)
    assert few.percentile(99) == 3.0 and few.percentile(1) == 1.0


def test_timed_by_runs_or_seconds():
    calls = []
    by_runs = time_runs(lambda: calls.append(1), warmup=2, runs=5, seconds=None)
    assert len(by_runs.runs) == 5 and len(calls) == 7
    by_time = time_runs(lambda: None, warmup=0, runs=None, seconds=0.05)
    assert by_time.wall >= 0.05 and len(by_time.runs) >= 1


def test_peak_memory_sees_a_large_allocation():
    import numpy as np

    with PeakMemory() as before:
        pass
    with PeakMemory() as during:
        block = np.ones(64 * 1024**2 // 8)  # 64 MiB, touched
        assert block.sum() > 0
        del block
    if during.scoped:  # Linux: the mark was reset at the start of each block
        assert during.peak_bytes >= before.peak_bytes + 48 * 1024**2
    else:
        assert during.peak_bytes >= 64 * 1024**2

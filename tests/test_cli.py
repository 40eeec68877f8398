"""The glow command: run, dump, demo, and one-line errors for bad input."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from glow_core.cli import main
from glow_core.model_zoo import small_cnn


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=5), str(path))
    return str(path)


def test_run_with_check(model_path, registry, capsys):
    assert main(["run", model_path, "--check", "--seed", "11"]) == 0
    out = capsys.readouterr().out
    assert "output: float32[1, 10]" in out
    assert "max relative error vs onnxruntime" in out and "(OK" in out


def test_run_with_input_files(model_path, registry, tmp_path, rng, capsys):
    import numpy as np

    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert (
        main(["run", model_path, "--input", f"input={tmp_path / 'x.npy'}", "--save", str(tmp_path / "o.npz")])
        == 0
    )
    assert np.load(tmp_path / "o.npz")["output"].shape == (1, 10)


@pytest.mark.parametrize("stage", ["graph", "optimized", "lowered", "ir", "memory"])
def test_dump_every_stage_as_text(stage, model_path, registry, capsys):
    assert main(["dump", model_path, "--stage", stage]) == 0
    out = capsys.readouterr().out
    expected = {
        "graph": "Conv",
        "optimized": "Conv",
        "lowered": "Convolution",
        "ir": "code {",
        "memory": "arena",
    }
    assert expected[stage] in out


@pytest.mark.parametrize("stage", ["graph", "ir"])
def test_dump_dot(stage, model_path, registry, capsys):
    assert main(["dump", model_path, "--stage", stage, "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph")


def test_dump_after_a_pass(model_path, registry, capsys):
    assert main(["dump", model_path, "--after", "fold-constants"]) == 0
    assert "function main" in capsys.readouterr().out


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_unknown_op_is_one_line(tmp_path, registry, capsys):
    node = helper.make_node("FancyOp", ["x"], ["y"], name="mystery")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "unknown.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert main(["run", str(path)]) == 2
    err = _one_line_error(capsys)
    assert "FancyOp" in err and "mystery" in err and "17" in err


def test_truncated_file_is_one_line(model_path, tmp_path, registry, capsys):
    with open(model_path, "rb") as f:
        data = f.read()
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(data[: len(data) // 3])
    assert main(["run", str(bad)]) == 2
    assert "truncated.onnx" in _one_line_error(capsys)


def test_wrong_input_shape_is_one_line(model_path, tmp_path, registry, capsys):
    import numpy as np

    np.save(tmp_path / "x.npy", np.ones((1, 3, 16, 16), np.float32))
    assert main(["run", model_path, "--input", f"input={tmp_path / 'x.npy'}"]) == 2
    assert "expected (1, 3, 32, 32)" in _one_line_error(capsys)


def test_missing_backend_is_one_line(model_path, registry, capsys):
    assert main(["run", model_path, "--backend", "nope"]) == 2
    assert "no backend named 'nope'" in _one_line_error(capsys)


def test_demo(registry, capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "backend: interpreter" in out and "(OK)" in out


def test_report_json_has_every_figure(model_path, registry, capsys):
    import json

    assert main(["report", model_path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in (
        "nodes_imported",
        "nodes_optimized",
        "nodes_lowered",
        "instructions",
        "constant_bytes",
        "placeholder_bytes",
        "activation_bytes_total",
        "peak_live_bytes",
        "arena_bytes",
    ):
        assert isinstance(report[key], int) and report[key] >= 0, key
    assert report["peak_live_bytes"] <= report["arena_bytes"] <= report["activation_bytes_total"]
    assert {"optimize", "lower", "schedule", "irgen", "plan-memory"} <= set(report["stage_seconds"])


def test_report_table(model_path, registry, capsys):
    assert main(["report", model_path]) == 0
    out = capsys.readouterr().out
    assert "arena_bytes" in out and "MiB" in out and "fold-constants" in out


def test_memory_plan_as_svg(model_path, registry, capsys):
    import xml.etree.ElementTree as ET

    assert main(["dump", model_path, "--stage", "memory", "--format", "svg"]) == 0
    svg = ET.fromstring(capsys.readouterr().out)
    rects = [e for e in svg.iter() if e.tag.endswith("rect")]
    assert len(rects) > 3  # the frame plus one box per buffer


def test_svg_only_for_memory(model_path, registry, capsys):
    assert main(["dump", model_path, "--stage", "ir", "--format", "svg"]) == 2
    assert "--stage memory" in _one_line_error(capsys)


def test_backend_options_from_the_command_line(model_path, registry, capsys):
    assert main(["run", model_path, "--option", "poison=false"]) == 0
    assert main(["run", model_path, "--option", "colour=blue"]) == 2
    err = _one_line_error(capsys)
    assert "bad options for backend 'interpreter'" in err and "colour" in err and "poison" in err

"""The CLI as a user meets it: --version, examples in --help, what `glow run` says, progress
only on a terminal, CLI words in errors, and no traceback on a closed pipe or a bad --check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from glow_core import progress
from glow_core.cli import build_parser, main

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["glow", "--version"], "glow 0.1.0"),
        (["glow-sdk", "--version"], "glow-sdk 0.1.0"),
        (["glow", "conformance", "--version"], "glow-conformance 0.1.0"),
    ],
)
def test_version(argv, expected):
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == expected


def test_every_command_has_examples_in_its_help():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert parser.epilog and "glow bench zoo:resnet50 --compare onnxruntime" in parser.epilog
    for name, command in sub.choices.items():
        if command.get_default("plugin_command") is not None:  # `glow conformance`, `glow sdk`:
            continue  # forwarded whole to their own parsers (test_cli_plugins.py)
        assert command.epilog and command.epilog.startswith("examples:"), name
        assert f"glow {name}" in command.epilog, name


def test_run_names_backend_compile_time_and_latency(registry, capsys):
    assert main(["run", "zoo:small_cnn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("backend: interpreter, compiled in ") and lines[0].split()[-1] == "s"
    assert lines[1].startswith("latency: ") and "(one run; `glow bench` for statistics)" in lines[1]


def _model(path: Path, dims: list) -> str:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_symbolic_batch_is_said_before_running(registry, tmp_path, capsys):
    assert main(["run", _model(tmp_path / "m.onnx", ["batch", 5]), "--check"]) == 0
    said = capsys.readouterr()
    assert said.err.startswith("note: input 'x' dimension 0 is symbolic ('batch'): compiling with 1")
    assert "y: float32[1, 5]" in said.out


def test_symbolic_inner_dimension_asks_for_shape_in_cli_words(registry, tmp_path, capsys):
    model = _model(tmp_path / "m.onnx", [1, "width"])
    assert main(["run", model]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: input 'x' dimension 1 is symbolic ('width'); glow needs static shapes: "
        "give them with --shape x=D1,D2,...\n"
    )
    assert "input_shapes" not in err and "load_onnx" not in err
    assert main(["run", model, "--shape", "x=1,7", "--check"]) == 0


def test_shape_beyond_the_model_with_check_is_one_line(registry, capsys):
    assert main(["run", "zoo:small_cnn", "--shape", "input=2,3,32,32", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: onnxruntime, the reference to compare with, refuses the model or the inputs"
    )
    assert "input: float32[2, 3, 32, 32]" in err and err.count("\n") == 1


class _Recorder:
    def __init__(self) -> None:
        self.steps: list[str] = []
        self.counts: list[tuple[int, int | None, str]] = []

    def step(self, name: str) -> None:
        self.steps.append(name)

    def advance(self, done: int, total: int | None, what: str) -> None:
        self.counts.append((done, total, what))


def test_compile_announces_its_steps_to_a_listener_only(interpreter):
    import glow_core
    from glow_core.model_zoo import small_cnn
    from glow_core.pipeline.data import item_name
    from glow_core.pipeline.steps import DEFAULT_PIPELINE

    recorder = _Recorder()
    with progress.listening(recorder):
        glow_core.compile(small_cnn(), interpreter)
    top_level = [item_name(item) for item in DEFAULT_PIPELINE.steps]
    assert recorder.steps == [f"{name} (interpreter)" if name == "codegen" else name for name in top_level]
    glow_core.compile(small_cnn(), interpreter)  # nobody listens: nothing recorded, nothing shown
    assert len(recorder.steps) == len(top_level)


def _glow(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "glow"), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_progress_is_quiet_when_not_a_terminal():
    done = subprocess.run(
        [str(BIN / "glow"), "run", "zoo:small_cnn", "--backend", "interpreter"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "\x1b" not in done.stdout


def test_closed_pipe_ends_quietly():
    """``glow report --json | head``: the reader goes away; no traceback, status 141."""
    process = _glow("report", "zoo:small_cnn", "--json", "--backend", "interpreter")
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before glow writes a byte
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141
    assert err == ""


def test_closed_pipe_in_process(monkeypatch, registry):
    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["backends"]) == 141

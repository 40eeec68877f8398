"""The command line with a backend list: summary, trace, partition pictures and report."""

from __future__ import annotations

import json

import glow_cpu.plugin
import glow_interpreter.plugin
import pytest
from partition_helpers import AcmePlugin

from glow_core.cli import main


@pytest.fixture
def backends(install_registry):
    install_registry(acme=AcmePlugin(), cpu=glow_cpu.plugin, interpreter=glow_interpreter.plugin)


MODEL = "zoo:resnet_bottleneck"


def test_run_prints_a_partition_summary_and_checks(backends, capsys):
    assert main(["run", MODEL, "--backend", "acme,cpu", "--check", "--option", "cpu.threads=1"]) == 0
    out = capsys.readouterr().out
    assert "partition(s): " in out and "acme" in out and "cpu" in out
    assert "(OK" in out


def test_run_writes_a_chrome_trace(backends, capsys, tmp_path):
    trace = tmp_path / "run.json"
    assert main(["run", MODEL, "--backend", "acme,cpu", "--trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} == {"device acme", "device cpu"}
    assert {e["cat"] for e in events if e["ph"] == "X"} == {"partition", "transfer", "kernel"}


@pytest.mark.parametrize("form", ["text", "dot", "svg"])
def test_dump_partitions(backends, capsys, form):
    assert main(["dump", MODEL, "--backend", "acme,cpu", "--stage", "partitions", "--format", form]) == 0
    out = capsys.readouterr().out
    assert "p0 on " in out and "acme" in out
    if form == "text":
        assert "reads layer1.0/" in out and "KiB)" in out
    if form == "dot":
        assert out.startswith("digraph partitions {") and "->" in out and "fillcolor" in out
    if form == "svg":
        assert out.startswith("<svg") and out.rstrip().endswith("</svg>") and "<line" in out


def test_report_json_lists_partitions(backends, capsys):
    assert main(["report", MODEL, "--backend", "acme,cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    keys = {"backend", "nodes", "flops", "constant_bytes", "arena_bytes", "boundary_bytes"}
    assert report["partitions"] and all(keys <= set(p) for p in report["partitions"])
    assert {p["backend"] for p in report["partitions"]} == {"acme", "cpu"}
    assert sum(p["boundary_bytes"] for p in report["partitions"]) == 2 * report["boundary_bytes"]


def test_report_json_of_one_backend_has_one_partition(backends, capsys):
    assert main(["report", MODEL, "--backend", "cpu", "--json"]) == 0
    (only,) = json.loads(capsys.readouterr().out)["partitions"]
    assert only["backend"] == "cpu" and only["boundary_bytes"] == 0 and only["flops"] > 4e8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "acme,tpu"], "in the backend list ['acme', 'tpu']: no backend named 'tpu'"),
        (["--backend", "cpu,cpu", "--option", "memory_bytes=1000"], "but device 'cpu:0' holds 1000 B"),
        (["--backend", "acme,cpu", "--partition", "nosuch=cpu"], "'nosuch' matches no node"),
        (["--backend", "acme,cpu", "--option", "gpu.threads=1"], "'gpu' is none of the devices"),
    ],
)
def test_bad_partition_input_is_one_line(backends, capsys, argv, message):
    assert main(["run", MODEL, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err

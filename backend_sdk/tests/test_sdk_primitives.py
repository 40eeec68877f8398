"""`glow-sdk new NAME --primitives ...`: a backend claiming part of the core set, run beside cpu."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import glow_backend_sdk
import pytest
import yaml
from glow_backend_sdk.cli import main as sdk_main
from glow_backend_sdk.render import claimed_primitives, render_backend
from glow_backend_sdk.template_repo import REPO_ENV
from sdk_install import install_rendered

from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS
from glow_core.primitives import CORE

NAME = "acmeconv"
CLAIMED = ["Convolution", "MatMul"]
BIN = Path(sys.executable).parent

MILESTONE_MODELS = ("resnet50", "mobilenetv2", "bert_mini")
"""The second milestone (docs/writing-a-backend.md): these match onnxruntime on NAME,cpu."""

_RUN_BESIDE_CPU = """
import json, sys
import glow_core
from glow_core import model_zoo
from glow_core.accuracy import max_relative_error, onnxruntime_outputs

figures = {}
for name in sys.argv[2:]:
    model = model_zoo.MODELS[name]()
    inputs = model_zoo.random_inputs(model, 0)
    compiled = glow_core.compile(model, backend=[sys.argv[1], "cpu"])
    labels = [step.partition.device.label for step in compiled.steps]
    products = sum(
        node.kind in ("Convolution", "MatMul")
        for step in compiled.steps
        if step.partition.device.label == sys.argv[1]
        for node in step.partition.nodes
    )
    error = max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs))
    figures[name] = {
        "error": error, "partitions": labels, "products": products, "summary": compiled.summary()
    }
print(json.dumps(figures))
"""
"""Compiles and runs each model on [NAME, cpu] in one process; prints the figures as JSON."""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    # In reverse order, to show the claim is put in the core set's order.
    return render_backend(
        NAME, tmp_path_factory.mktemp("render") / f"glow-{NAME}", primitives="MatMul,Convolution"
    )


@pytest.fixture(scope="module")
def installed(rendered, tmp_path_factory) -> dict[str, str]:
    """The rendered package installed with pip into a private site dir (the venv stays clean)."""
    return install_rendered(rendered, tmp_path_factory.mktemp("site"))


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=1200)


def test_only_the_claimed_kernels_are_rendered_and_the_claim_is_recorded(rendered):
    kernels = sorted(p.name for p in (rendered / f"glow_{NAME}" / "kernels").glob("*.py"))
    assert kernels == ["__init__.py", "convolution.py", "matmul.py"]
    answers = yaml.safe_load((rendered / ".copier-answers.yml").read_text())
    assert answers["primitives"] == "Convolution,MatMul"  # `glow-sdk update` keeps the claim
    test = (rendered / "tests" / "test_conformance.py").read_text()
    assert '"--layers", "primitives,partitions"' in test
    backend = (rendered / f"glow_{NAME}" / "backend.py").read_text()
    assert "Runs Convolution, MatMul with the kernels" in backend and "peak_flops=PEAK_FLOPS" in backend
    assert f"--backend {NAME},cpu" in (rendered / "README.md").read_text()


@pytest.mark.parametrize(
    ("primitives", "bad"),
    [("Conv,MatMul", "'Conv'"), ("FullyConnected", "'FullyConnected'"), ("MatMul,,Add", "(an empty name)")],
)
def test_names_outside_the_core_set_are_refused_with_the_valid_ones(tmp_path, primitives, bad):
    with pytest.raises(GlowError) as caught:
        render_backend("acmebad", tmp_path / "out", primitives=primitives)
    message = str(caught.value)
    assert f"{bad} is not a core primitive" in message
    assert "choose from " + ", ".join(sorted(CORE)) in message
    assert not (tmp_path / "out").exists()  # nothing half-done


def test_the_cli_passes_the_claim_and_refuses_unknown_names(tmp_path, capsys):
    assert sdk_main(["new", "acmecli", "--dir", str(tmp_path / "bad"), "--primitives", "Gemm"]) == 2
    assert "'Gemm' is not a core primitive" in capsys.readouterr().err
    assert sdk_main(["new", "acmecli", "--dir", str(tmp_path / "ok"), "--primitives", "MatMul"]) == 0
    assert "--backend acmecli,cpu" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "ok" / "glow_acmecli" / "kernels").glob("*.py")) == [
        "__init__.py",
        "matmul.py",
    ]


def test_no_primitives_means_every_core_primitive():
    assert claimed_primitives(None) == claimed_primitives("") == []
    assert claimed_primitives(["MatMul", "Convolution", "MatMul"]) == CLAIMED


def test_the_installed_backend_declares_only_its_claim(installed):
    listing = _run([str(BIN / "glow"), "backends"], installed)
    line = next(row for row in listing.stdout.splitlines() if row.startswith(NAME))
    assert re.search(rf"glow-{NAME}\s+{len(CLAIMED)}\s+ok \(npu\)", line), line


@pytest.mark.slow
def test_the_rendered_package_tests_pass_with_the_partitions_layer(rendered, installed):
    """The rendered package's own test: its two primitives, and every zoo model on
    [NAME, interpreter], plainly and alternating (about a minute on numpy kernels)."""
    run = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], installed, rendered)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout


@pytest.mark.slow
def test_the_second_milestone_models_match_onnxruntime_beside_cpu(installed):
    run = _run([sys.executable, "-c", _RUN_BESIDE_CPU, NAME, *MILESTONE_MODELS], installed)
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout.splitlines()[-1])
    for name in MILESTONE_MODELS:
        assert figures[name]["error"] <= 1e-4, (name, figures[name])
        # The vendor's backend really runs part of it: every convolution or product it can
        # (counted as nodes: products joined by views share a partition, BERT-mini's q, k
        # and v projections one per layer).
        assert figures[name]["products"] >= 20, (name, figures[name]["summary"])
        assert "cpu" in figures[name]["partitions"]


@pytest.mark.slow
def test_check_reports_the_share_each_model_runs_beside_a_catch_all(installed):
    run = _run([str(BIN / "glow-sdk"), "check", "--backend", NAME, "--models-only"], installed)
    assert run.returncode == 0, run.stderr
    assert f"models: 0/{len(MODELS)} runnable alone" in run.stdout
    assert f"with a catch-all backend after it (--backend {NAME},cpu)" in run.stdout
    share = re.search(r"  resnet50: ([\d.]+)% of the FLOPs, in (\d+) of (\d+) partitions", run.stdout)
    assert share and float(share[1]) > 95 and int(share[2]) >= 53, run.stdout


def test_update_keeps_rendering_only_the_claimed_kernels(tmp_path, monkeypatch):
    git = ["git", "-c", "user.name=Vendor", "-c", "user.email=v@example.com", "-c", "commit.gpgsign=false"]
    template = tmp_path / "template"
    shutil.copytree(glow_backend_sdk.TEMPLATE_DIR, template)
    monkeypatch.setattr(glow_backend_sdk, "TEMPLATE_DIR", template)
    monkeypatch.setenv(REPO_ENV, str(tmp_path / "template-repo"))  # its v99.0.0 stays with this test
    project = render_backend("acmeupd", tmp_path / "glow-acmeupd", primitives=["MatMul"])
    subprocess.run([*git, "init", "--quiet"], cwd=project, check=True)
    subprocess.run([*git, "add", "--all"], cwd=project, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "rendered"], cwd=project, check=True)

    # A newer template changes a claimed kernel and one the backend does not claim.
    for kernel in ("matmul.py", "exp.py"):
        path = template / "glow_{{ name }}" / "kernels" / kernel
        path.write_text(path.read_text() + "\n# changed in the next template\n")
    monkeypatch.setattr(glow_backend_sdk, "TEMPLATE_VERSION", "99.0.0")
    assert sdk_main(["update", str(project)]) == 0

    kernels = project / "glow_acmeupd" / "kernels"
    assert "changed in the next template" in (kernels / "matmul.py").read_text()
    assert sorted(p.name for p in kernels.glob("*.py")) == ["__init__.py", "matmul.py"]

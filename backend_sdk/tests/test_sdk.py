"""glow-sdk: a rendered backend installs, is listed, passes conformance, runs real models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from glow_backend_sdk.cli import main as sdk_main
from glow_backend_sdk.render import render_backend
from sdk_install import install_rendered

from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS
from glow_core.primitives import CORE

NAME = "acmetest"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_backend(
        NAME, tmp_path_factory.mktemp("render") / f"glow-{NAME}", vendor="Acme", device="npu"
    )


@pytest.fixture(scope="module")
def installed(rendered, tmp_path_factory) -> dict[str, str]:
    """The rendered package installed with pip into a private site dir (the venv stays clean)."""
    return install_rendered(rendered, tmp_path_factory.mktemp("site"))


def _glow(args: list[str], env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "glow"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_template_has_one_kernel_file_per_core_primitive(rendered):
    kernels = rendered / f"glow_{NAME}" / "kernels"
    kinds = set()
    for path in kernels.glob("*.py"):
        if path.name != "__init__.py":
            kind = path.read_text().split('KIND = "', 1)[1].split('"', 1)[0]
            assert path.name == f"{kind.lower()}.py"  # `--primitives` selects kernels by this name
            kinds.add(kind)
    assert kinds == CORE
    assert (rendered / ".copier-answers.yml").is_file()
    assert f'{NAME} = "glow_{NAME}.plugin"' in (rendered / "pyproject.toml").read_text()


def test_installed_backend_is_listed(installed):
    listing = _glow(["backends"], installed)
    assert listing.returncode == 0, listing.stderr
    line = next(row for row in listing.stdout.splitlines() if row.startswith(NAME))
    assert f"glow-{NAME}" in line and str(len(CORE)) in line and "ok (npu)" in line


def test_conformance_passes_with_core_primitives_only(installed):
    # Without --slow: ResNet-50 is checked below, and VGG-19 (same primitives, 574 MB of
    # weights) would triple the time of the SDK's tests on numpy kernels.
    run = _glow(["conformance", "--backend", NAME, "--layers", "primitives,models"], installed)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "PASS" in run.stdout and "| primitives |" in run.stdout


def test_runs_from_threads_equal_sequential_runs(installed):
    """The template's executor (an ArenaFunction) under the threading contract: conformance's
    threads case, run alone (4 threads, each run's result equal to the sequential one)."""
    select = ["--layers", "models", "--select", "model:mlp?threads?"]
    run = _glow(["conformance", "--backend", NAME, *select], installed)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "| models | 1 | 0 |" in run.stdout


def test_resnet50_and_the_encoder_match_onnxruntime(installed):
    check = _glow(["run", "zoo:resnet50", "--backend", NAME, "--check"], installed)
    assert check.returncode == 0 and "(OK" in check.stdout, check.stdout + check.stderr
    check = _glow(["run", "zoo:transformer_encoder", "--backend", NAME, "--check"], installed)
    assert check.returncode == 0 and "(OK" in check.stdout, check.stdout + check.stderr


def test_check_reports_every_zoo_model_runnable(installed):
    run = subprocess.run(
        [str(BIN / "glow-sdk"), "check", "--backend", NAME, "--models-only"],
        env=installed,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert f"models: {len(MODELS)}/{len(MODELS)} runnable" in run.stdout


def test_check_names_the_missing_primitive(registry_with_partial_backend):
    from glow_backend_sdk.check import check_backend

    coverage = check_backend(registry_with_partial_backend, node_tests=False)
    assert "mlp" in coverage.models_blocked
    assert coverage.unlocks.most_common(1)[0][0] == ("MatMul", "float32")


def test_check_runs_the_conformance_node_tests_keyed_by_selecting_kind(argmax_for_floats_only):
    from glow_backend_sdk.check import check_backend

    first = 57  # test_abs ... test_argmax_no_keepdims_random_select_last_index (onnx 1.23)
    coverage = check_backend(argmax_for_floats_only, models=False, limit=first)
    counted = coverage.node_tests_runnable + coverage.node_tests_blocked + coverage.node_tests_not_passed
    assert counted == first and coverage.node_tests_runnable > 30
    # ArgMax is declared for what it reads (float32), not for its int64 result: the float
    # argmax tests run, and nothing asks for ArgMax[int64]...
    assert ("ArgMax", "int64") not in coverage.unlocks
    # ...while Add of int8, taken away, is what test_add_int8 lacks.
    assert coverage.unlocks[("Add", "int8")] == 1
    summary = coverage.summary()
    assert f"ONNX node tests: {coverage.node_tests_runnable}/{first} (" in summary and "models" not in summary


@pytest.fixture
def argmax_for_floats_only():
    from glow_interpreter.backend import InterpreterBackend

    from glow_core.backend import BackendInfo

    class FloatArgMax(InterpreterBackend):
        def info(self) -> BackendInfo:
            info = super().info()
            supports = dict(info.supports, ArgMax=["float32"])
            supports["Add"] = [k for k in supports["Add"] if k != "int8"]
            return info.model_copy(update={"supports": supports})

    return FloatArgMax()


@pytest.fixture
def registry_with_partial_backend():
    from glow_interpreter.backend import InterpreterBackend

    from glow_core.backend import BackendInfo

    class NoMatMul(InterpreterBackend):
        def info(self) -> BackendInfo:
            info = super().info()
            return info.model_copy(
                update={"supports": {k: v for k, v in info.supports.items() if k != "MatMul"}}
            )

    return NoMatMul()


def test_bad_name_and_non_empty_folder_are_refused(tmp_path):
    with pytest.raises(GlowError, match="lowercase"):
        render_backend("Bad-Name", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(GlowError, match="not empty"):
        render_backend("ok", tmp_path / "full")
    assert sdk_main(["new", "Bad-Name", "--dir", str(tmp_path / "y")]) == 2

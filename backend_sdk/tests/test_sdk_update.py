"""`glow-sdk update` (copier update) brings a rendered backend to a newer template, keeping the
vendor's edits; names that would clash are refused before anything is rendered."""

from __future__ import annotations

import shutil
import subprocess

import glow_backend_sdk
import pytest
import yaml
from glow_backend_sdk.cli import main as sdk_main
from glow_backend_sdk.render import name_problem, render_backend
from glow_backend_sdk.template_repo import REPO_ENV, source_path

from glow_core.errors import GlowError

GIT = ["git", "-c", "user.name=Vendor", "-c", "user.email=vendor@example.com", "-c", "commit.gpgsign=false"]


def _commit(project, message: str) -> None:
    subprocess.run([*GIT, "add", "--all"], cwd=project, check=True)
    subprocess.run([*GIT, "commit", "--quiet", "-m", message], cwd=project, check=True)


def test_update_brings_template_changes_and_keeps_vendor_edits(tmp_path, monkeypatch):
    template = tmp_path / "template"
    shutil.copytree(glow_backend_sdk.TEMPLATE_DIR, template)
    monkeypatch.setattr(glow_backend_sdk, "TEMPLATE_DIR", template)
    monkeypatch.setenv(REPO_ENV, str(tmp_path / "template-repo"))  # its v99.0.0 stays with this test
    project = render_backend("acmeup", tmp_path / "glow-acmeup")
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["_commit"] == f"v{glow_backend_sdk.TEMPLATE_VERSION}"
    assert answers["name"] == "acmeup"
    subprocess.run([*GIT, "init", "--quiet"], cwd=project, check=True)
    _commit(project, "rendered")
    matmul = project / "glow_acmeup" / "kernels" / "matmul.py"
    matmul.write_text(matmul.read_text() + "\n# Acme: replaced by the systolic array kernel\n")
    _commit(project, "our matmul")

    # A newer SDK: its template gained a line in the README and a kernel changed.
    readme = template / "README.md.jinja"
    readme.write_text(readme.read_text() + "\nNew in the next template: profiling hooks.\n")
    exp = template / "glow_{{ name }}" / "kernels" / "exp.py"
    exp.write_text(exp.read_text().replace('"""dest = ', '"""dest (updated) = ', 1))
    monkeypatch.setattr(glow_backend_sdk, "TEMPLATE_VERSION", "99.0.0")
    assert sdk_main(["update", str(project)]) == 0

    assert "profiling hooks" in (project / "README.md").read_text()
    assert "(updated)" in (project / "glow_acmeup" / "kernels" / "exp.py").read_text()
    assert "systolic array" in matmul.read_text()
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["_commit"] == "v99.0.0"


def test_update_refuses_a_folder_it_did_not_render(tmp_path, capsys):
    assert sdk_main(["update", str(tmp_path)]) == 2
    assert "no .copier-answers.yml" in capsys.readouterr().err


def test_answers_name_the_template_from_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert source_path(tmp_path / ".cache" / "glow-backend-sdk" / "template") == (
        "~/.cache/glow-backend-sdk/template"
    )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("cpu", "glow-py's own glow-cpu"),
        ("interpreter", "glow-py's own"),
        ("core", "glow-py's own"),
        ("class", "Python keyword"),
        ("match", "Python keyword"),
        ("Bad-Name", "lowercase"),
    ],
)
def test_clashing_names_are_refused(tmp_path, name, why):
    assert why in (name_problem(name) or "")
    with pytest.raises(GlowError, match="pick another name"):
        render_backend(name, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_name_an_installed_backend_registers_is_refused(monkeypatch):
    import importlib.metadata

    taken = importlib.metadata.EntryPoint("npux", "glow_npux.plugin", "glow.backends")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [taken])
    assert "an installed backend is registered under it (glow_npux.plugin" in (name_problem("npux") or "")
    assert name_problem("acme") is None

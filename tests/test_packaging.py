"""Every distribution's metadata is complete, so a package page and an installed wheel say what
they are: readme, license file, classifiers, URLs, bounded dependencies, py.typed, and one
version source. (scripts/release builds, twine-checks and installs the wheels themselves.)"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = {
    "glow-core": ROOT,
    "glow-interpreter": ROOT / "backends/glow_interpreter",
    "glow-cpu": ROOT / "backends/glow_cpu",
    "glow-opencl": ROOT / "backends/glow_opencl",
    "glow-conformance": ROOT / "conformance",
    "glow-backend-sdk": ROOT / "backend_sdk",
}


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def _package(folder: Path) -> str:
    (include,) = _project(folder)["tool"]["setuptools"]["packages"]["find"]["include"]
    return include.rstrip("*")


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_metadata_is_complete(name):
    folder = DISTRIBUTIONS[name]
    project = _project(folder)["project"]
    assert project["name"] == name
    readme = folder / project["readme"]
    assert readme.is_file() and "## Install" in readme.read_text() and "pip install" in readme.read_text()
    assert project["license"] == "Apache-2.0"
    (license_file,) = project["license-files"]
    assert (folder / license_file).read_text() == (ROOT / "LICENSE").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it
    # No public repository yet, so no URLs (a placeholder would send users nowhere); once
    # there is one, all six name the same.
    assert project.get("urls") == _project(ROOT)["project"].get("urls")
    assert project["description"] and project["requires-python"] == ">=3.11"


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_dependencies_are_bounded(name):
    own_minor = re.match(r"\d+\.\d+", _version(DISTRIBUTIONS["glow-core"])).group()
    for text in _project(DISTRIBUTIONS[name])["project"]["dependencies"]:
        requirement = Requirement(text)
        lower = [s for s in requirement.specifier if s.operator in (">=", "==", "~=")]
        assert lower, f"{name}: {text} has no lower bound"
        if requirement.name.startswith("glow-"):  # our own: the same minor series
            assert f">={own_minor}" in str(requirement.specifier) and "<" in str(requirement.specifier), text


def _version(folder: Path) -> str:
    """The version from the one place it is written: ``__version__`` in the package."""
    config = _project(folder)
    assert "version" not in config["project"] and config["project"]["dynamic"] == ["version"]
    attr = config["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, variable = attr.rpartition(".")
    init = folder / module.replace(".", "/") / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        names = (
            [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
        )
        if names == [variable]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{init} sets no {variable}")


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_one_version_source_and_py_typed(name):
    folder = DISTRIBUTIONS[name]
    assert re.fullmatch(r"\d+\.\d+\.\d+", _version(folder))
    package = _package(folder)
    assert (folder / package / "py.typed").is_file()
    assert "py.typed" in _project(folder)["tool"]["setuptools"]["package-data"][package]


def test_readme_installs_before_it_develops():
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings.index("Install") < headings.index("Develop")
    assert "scripts/release" in text
    assert "](docs/" not in text  # the package page has no docs folder beside it: links are absolute


def test_ci_runs_the_tests_then_the_release_check():
    ci = (ROOT / ".ci/run").read_text()
    assert ci.index("scripts/test") < ci.index("scripts/release")

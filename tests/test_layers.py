"""The layering contracts (``.importlinter`` at the repository root) hold.

import-linter builds the import graph of glow_core and every in-tree plugin and checks the
contracts the design states: the core imports no plugin, the primitive declarations import
nothing above them, the graph and IR import no frontend, the graph imports no stage that
runs on it, backends never import each other, and the runtime's modules form no cycle. A
failing run prints the offending import chains, which the assertion message carries.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

REQUIRED_CONTRACTS = {
    "core-imports-no-plugin",
    "backends-independent",
    "primitives-are-the-bottom",
    "graph-and-ir-below-frontends",
    "graph-below-lowering",
    "runtime-acyclic",
}
"""The contracts issue 23 asks for; removing one from the file fails this test, not silently."""


def _lint(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_required_contract_is_declared() -> None:
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    declared = {s.removeprefix("importlinter:contract:") for s in parser.sections() if ":contract:" in s}
    assert declared >= REQUIRED_CONTRACTS, f"missing contracts: {sorted(REQUIRED_CONTRACTS - declared)}"


def test_layer_contracts_hold() -> None:
    result = _lint(CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(_contract_sections(CONFIG))} kept, 0 broken" in result.stdout, result.stdout


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    """The harness can fail: a contract the code breaks on purpose (glow-cpu does import
    glow_core) makes lint-imports exit 1 and name the import."""
    config = tmp_path / "broken.ini"
    config.write_text(
        "[importlinter]\nroot_packages =\n    glow_core\n    glow_cpu\n\n"
        "[importlinter:contract:impossible]\nname = glow_cpu imports no glow_core\ntype = forbidden\n"
        "source_modules =\n    glow_cpu\nforbidden_modules =\n    glow_core\n"
    )
    result = _lint(config)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout and "glow_cpu" in result.stdout and "glow_core" in result.stdout


def _contract_sections(config: Path) -> list[str]:
    parser = configparser.ConfigParser()
    parser.read(config)
    return [s for s in parser.sections() if ":contract:" in s]

"""Subcommands from other distributions (entry-point group ``glow.commands``).

The installed in-tree plugins (conformance, the SDK) are listed by ``glow --help`` and run;
fake entry points stand for broken, clashing and well-behaved third-party commands, so these
tests never depend on what else happens to be installed.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from glow_core.cli import build_parser, main
from glow_core.commands import plugin_commands
from glow_core.commands.plugin_commands import ENTRY_POINT_GROUP, plugin_for

BIN = Path(sys.executable).parent


def _entry_point(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


@pytest.fixture
def command_plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``command_plugins(name=value, ...)``: exactly these ``glow.commands`` entry points are
    installed for the test; ``tmp_path`` is importable, for modules a test writes there."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(**values: str) -> None:
        points = [_entry_point(name, value) for name, value in values.items()]
        monkeypatch.setattr(
            plugin_commands.importlib.metadata,
            "entry_points",
            lambda group: [p for p in points if group == ENTRY_POINT_GROUP],
        )

    return install


def _module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(body)
    sys.modules.pop(name, None)


RECORDING = '''
CALLS = []

def main(argv):
    """say hello to the arguments"""
    CALLS.append(list(argv))
    return 3
'''


def test_installed_plugins_are_listed_in_help():
    help_text = build_parser().format_help()
    assert "conformance" in help_text and "run the conformance suite on a backend" in help_text
    assert "sdk" in help_text and "start or update a backend from the template" in help_text


def test_conformance_and_sdk_run_through_glow():
    for argv, expected in (
        (["conformance", "--version"], "glow-conformance 0.1.0"),
        (["sdk", "--version"], "glow-sdk 0.1.0"),
    ):
        done = subprocess.run([str(BIN / "glow"), *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == expected, done.stderr


def test_plugin_command_gets_its_arguments_unparsed(command_plugins, tmp_path, capsys):
    _module(tmp_path, "hello_plugin", RECORDING)
    command_plugins(hello="hello_plugin:main")
    assert main(["hello", "a", "--weird-option", "-x"]) == 3
    import hello_plugin

    assert hello_plugin.CALLS == [["a", "--weird-option", "-x"]]
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "say hello to the arguments" in capsys.readouterr().out


def test_broken_plugin_is_named_and_the_rest_of_the_cli_works(command_plugins, tmp_path, capsys):
    _module(tmp_path, "hello_plugin", RECORDING)
    _module(tmp_path, "exiting_plugin", "import sys\nsys.exit(7)\n")
    command_plugins(
        broken="no_such_module_for_glow:main",
        exiting="exiting_plugin:main",
        notcallable="math:pi",
        hello="hello_plugin:main",
    )
    assert main(["broken", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: command 'broken' (entry point broken = 'no_such_module_for_glow:main'")
    assert "'glow.commands'" in err and "ModuleNotFoundError" in err and "reinstall or uninstall" in err
    assert main(["exiting"]) == 2
    assert "SystemExit: 7" in capsys.readouterr().err
    assert main(["notcallable"]) == 2
    assert "math:pi is a float, not a callable main(argv) -> int" in capsys.readouterr().err
    # The rest still works: the good plugin, a built-in command, and --help listing the broken ones.
    assert main(["hello"]) == 3
    assert main(["dump", "--list-steps"]) == 0
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "broken" in out and "BROKEN" in out and "say hello" in out


def test_plugin_cannot_replace_a_builtin_or_share_a_name(command_plugins, tmp_path, capsys):
    _module(tmp_path, "hello_plugin", RECORDING)
    command_plugins(run="hello_plugin:main", dump="hello_plugin:main")
    parser = build_parser()
    assert plugin_for(parser, "run") is None and plugin_for(parser, "dump") is None
    found = plugin_commands.plugin_commands({"run", "dump"})
    assert "built-in glow command" in (found["run"].error or "")
    assert main(["dump", "--list-steps"]) == 0  # still glow's own dump
    assert "ignored command plugin 'run' (hello_plugin:main" in parser.format_help()
    import hello_plugin

    assert hello_plugin.CALLS == []


def test_two_plugins_with_one_name_are_both_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    _module(tmp_path, "hello_plugin", RECORDING)
    points = [_entry_point("hello", "hello_plugin:main"), _entry_point("hello", "other_plugin:main")]
    monkeypatch.setattr(plugin_commands.importlib.metadata, "entry_points", lambda group: points)
    assert main(["hello"]) == 2
    err = capsys.readouterr().err
    assert "also taken by entry point(s) ['other_plugin:main']; neither is used" in err

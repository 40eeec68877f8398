"""Plugin discovery: failures are kept per plugin and never stop the others."""

from __future__ import annotations

import importlib.metadata
import types

import numpy as np
import pytest

from glow_core import plugins
from glow_core.backend import Backend, BackendInfo
from glow_core.errors import BackendError
from glow_core.plugins import BackendRegistry, hookimpl


def _entry_point(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=plugins.ENTRY_POINT_GROUP)


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch):
    """Entry points: the real interpreter, one that raises on import, one with a bad hook."""
    broken = types.ModuleType("glow_test_broken_hook")

    @hookimpl
    def glow_backends():
        return ["not a backend"]

    broken.glow_backends = glow_backends
    import sys

    monkeypatch.setitem(sys.modules, "glow_test_broken_hook", broken)
    eps = [
        _entry_point("interpreter", "glow_interpreter.plugin"),
        _entry_point("exploding", "glow_test_no_such_module_xyz"),
        _entry_point("badhook", "glow_test_broken_hook"),
    ]
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group]
    )
    reg = BackendRegistry()
    reg.load_entry_points()
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg


def test_broken_plugins_are_listed_and_the_interpreter_still_works(fake_entry_points):
    reg = fake_entry_points
    assert "ModuleNotFoundError" in reg.plugins["exploding"].error
    assert "not a Backend subclass" in reg.plugins["badhook"].error
    assert reg.plugins["interpreter"].error is None
    assert list(reg.backends()) == ["interpreter"]
    assert reg.get().info().name == "interpreter"


def test_glow_backends_command_shows_the_errors(fake_entry_points, capsys):
    from glow_core.cli import main

    assert main(["backends"]) == 1  # a broken plugin is worth a non-zero status
    captured = capsys.readouterr()
    assert "exploding" in captured.out and "FAILED: ModuleNotFoundError" in captured.out
    assert "interpreter" in captured.out and "ok (reference)" in captured.out
    assert "2 plugin(s) failed: exploding, badhook" in captured.err


def test_misspelled_hook_is_an_error():
    reg = BackendRegistry()
    module = types.ModuleType("typo_plugin")

    @hookimpl
    def glow_backend():  # missing the s
        return []

    module.glow_backend = glow_backend
    record = reg.register(module, "typo")
    assert record.error and "glow_backend" in record.error
    assert not reg.pm.is_registered(module)


def test_missing_backend_names_what_is_installed(registry):
    with pytest.raises(BackendError, match=r"no backend named 'tpu'; installed: \['interpreter'\]"):
        registry.get("tpu")


def test_empty_registry_says_how_to_install():
    with pytest.raises(BackendError, match="pip install glow-interpreter"):
        BackendRegistry().get()


def test_best_backend_is_the_highest_priority_that_works(registry):
    """A plugin with a huge priority that cannot compile is passed over; a working one with
    a higher priority than the interpreter's wins."""
    registry.register(_plugin_of(_backend_class("fancy", 99)), "fancy")
    registry.register(_plugin_of(_backend_class("hollow", 10**9, supports_nothing=True)), "hollow")
    assert registry.get().info().name == "fancy"
    assert registry.get("interpreter").info().name == "interpreter"


# ---- helpers: plugins made on the spot ---------------------------------------------------


def _backend_class(name: str, priority: int, supports_nothing: bool = False) -> type[Backend]:
    """The interpreter under another name and priority; ``supports_nothing`` claims no
    primitive at all (and so cannot compile even ``x + x``)."""
    from glow_interpreter.backend import InterpreterBackend

    class Renamed(InterpreterBackend):
        def info(self) -> BackendInfo:
            update = {"name": name, "priority": priority}
            if supports_nothing:
                update["supports"] = {}
            return super().info().model_copy(update=update)

    Renamed.name = name
    Renamed.__qualname__ = f"Renamed[{name}]"
    return Renamed


def _plugin_of(*classes: type[Backend]) -> types.ModuleType:
    plugin = types.ModuleType("made_plugin")
    plugin.glow_backends = hookimpl(lambda: list(classes))
    return plugin


def _module_file(tmp_path, monkeypatch, name: str, body: str) -> str:
    """A module ``name`` on sys.path whose import runs ``body``."""
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _install_entry_points(monkeypatch, *eps: importlib.metadata.EntryPoint) -> BackendRegistry:
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group]
    )
    reg = BackendRegistry()
    reg.load_entry_points()
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg


def _tiny_onnx(tmp_path) -> str:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    path = tmp_path / "tiny.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


# ---- a plugin never ends the process ----------------------------------------------------


def test_sys_exit_at_import_is_one_plugin_error(tmp_path, monkeypatch, capsys, rng):
    quitter = _module_file(tmp_path, monkeypatch, "glow_test_quitter", "import sys\nsys.exit('gave up')\n")
    reg = _install_entry_points(
        monkeypatch,
        _entry_point("quitter", quitter),
        _entry_point("interpreter", "glow_interpreter.plugin"),
    )
    assert reg.plugins["quitter"].error.startswith("SystemExit: gave up")
    assert list(reg.backends()) == ["interpreter"]

    import glow_core
    from glow_core.cli import main
    from glow_core.graph import Module

    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (3, 5))
    b.save(b.relu(x), "y")
    feed = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(glow_core.compile(m).run({"x": feed})["y"], np.maximum(feed, 0))

    assert main(["backends"]) == 1
    captured = capsys.readouterr()
    assert "FAILED: SystemExit: gave up" in captured.out and "1 plugin(s) failed: quitter" in captured.err
    assert main(["dump", _tiny_onnx(tmp_path), "--stage", "graph"]) == 0
    assert "Relu" in capsys.readouterr().out


def test_sys_exit_and_other_base_exceptions_inside_the_hook_are_recorded():
    reg = BackendRegistry()

    @hookimpl
    def exits():
        raise SystemExit(3)

    class Broken(Backend):
        name = "broken"

        def info(self) -> BackendInfo:
            raise GeneratorExit("info() gave up")

        def compile(self, ir, options):
            raise NotImplementedError

    exiting = types.ModuleType("exiting")
    exiting.glow_backends = exits
    assert reg.register(exiting, "exiting").error.startswith("SystemExit: 3")
    assert reg.register(_plugin_of(Broken), "broken").error.startswith("GeneratorExit: info() gave up")
    assert reg.backends() == {}


def test_keyboard_interrupt_is_not_swallowed(tmp_path, monkeypatch):
    name = _module_file(tmp_path, monkeypatch, "glow_test_interrupted", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        _install_entry_points(monkeypatch, _entry_point("interrupted", name))

    @hookimpl
    def interrupted():
        raise KeyboardInterrupt

    plugin = types.ModuleType("interrupted_hook")
    plugin.glow_backends = interrupted
    with pytest.raises(KeyboardInterrupt):
        BackendRegistry().register(plugin, "interrupted_hook")


# ---- the default backend is one that works ----------------------------------------------


def test_no_working_backend_names_every_plugin_and_its_error(install_registry, monkeypatch):
    reg = install_registry(hollow=_plugin_of(_backend_class("hollow", 50, supports_nothing=True)))
    reg.register(types.ModuleType("empty"), "empty")  # no hook at all: it provides nothing
    reg.register(_plugin_of("not a class"), "confused")
    with pytest.raises(BackendError) as caught:
        reg.get()
    message = str(caught.value)
    assert "no installed glow backend works" in message
    assert "backend 'hollow' (priority 50) fails its self-test: UnsupportedOpError" in message
    assert "plugin 'confused': BackendError: glow_backends() returned 'not a class'" in message
    assert "pip install glow-interpreter" in message


def test_self_test_runs_once_per_backend_per_process(install_registry, monkeypatch):
    from glow_core.runtime import self_test as module

    monkeypatch.setattr(module, "_RESULTS", {})
    cls = _backend_class("counted", 40)
    compiles = []
    original = cls.compile

    def counting(self, ir, options):
        compiles.append(ir.name)
        return original(self, ir, options)

    cls.compile = counting
    reg = install_registry(counted=_plugin_of(cls))
    assert reg.get().info().name == "counted"
    assert reg.get().info().name == "counted"
    assert len(compiles) == 1


def test_a_self_test_with_a_wrong_answer_fails(install_registry, monkeypatch):
    from glow_core.runtime import self_test as module

    monkeypatch.setattr(module, "_RESULTS", {})
    cls = _backend_class("liar", 40)
    original = cls.compile

    def lying(self, ir, options):
        compiled = original(self, ir, options)
        run = compiled.run
        compiled.run = lambda feeds: {k: v * 3 for k, v in run(feeds).items()}
        return compiled

    cls.compile = lying
    reg = install_registry(liar=_plugin_of(cls))
    with pytest.raises(
        BackendError, match=r"'liar' \(priority 40\) fails its self-test: y = x \+ x computed"
    ):
        reg.get()


# ---- one backend name, one plugin -------------------------------------------------------


def test_duplicate_backend_names_are_an_error_of_both_plugins(install_registry, capsys):
    reg = install_registry(
        interpreter=_plugin_of(_backend_class("interpreter", 10)),
        first=_plugin_of(_backend_class("twin", 20), _backend_class("solo", 5)),
        second=_plugin_of(_backend_class("twin", 30)),
    )
    assert set(reg.duplicates()) == {"twin"}
    errors = reg.errors()
    assert set(errors) == {"first", "second"}
    assert "backend name 'twin' is also provided by 'second'" in errors["first"]
    assert "backend name 'twin' is also provided by 'first'" in errors["second"]
    assert sorted(reg.backends()) == ["interpreter", "solo"]  # the other names still work
    with pytest.raises(BackendError, match=r"'twin' is provided by several plugins: 'first'.*'second'"):
        reg.get("twin")
    assert reg.get().info().name == "interpreter"  # not either twin, whatever their priority

    from glow_core.cli import main

    assert main(["backends"]) == 1
    captured = capsys.readouterr()
    twin_rows = [line for line in captured.out.splitlines() if line.startswith("twin")]
    assert len(twin_rows) == 2 and all("FAILED: backend name also provided by" in r for r in twin_rows)
    assert "2 plugin(s) failed: first, second" in captured.err


def test_two_entry_points_with_one_name_are_both_loaded(monkeypatch):
    reg = _install_entry_points(
        monkeypatch,
        _entry_point("interpreter", "glow_interpreter.plugin"),
        _entry_point("interpreter", "glow_cpu.plugin"),
    )
    assert set(reg.plugins) == {"interpreter", "interpreter (unknown distribution)"}
    assert all(r.error is None for r in reg.plugins.values())
    assert sorted(reg.backends()) == ["cpu", "interpreter"]


# ---- info() is asked when needed, and a broken one is still reported ---------------------


def _counting_class(name: str, calls: list[str], fails: bool = False) -> type[Backend]:
    """The interpreter under ``name``, noting each info() call; ``fails``: info() raises."""
    base = _backend_class(name, 5)

    class Counting(base):  # type: ignore[valid-type, misc]
        def info(self) -> BackendInfo:
            calls.append(name)
            if fails:
                raise RuntimeError(f"{name}: no device driver")
            return super().info()

    return Counting


def test_choosing_a_backend_asks_no_other_backend_for_its_info(install_registry):
    calls: list[str] = []
    import glow_interpreter.plugin

    reg = install_registry(interpreter=glow_interpreter.plugin)
    reg.register(_plugin_of(_counting_class("costly", calls)), "costly")
    reg.register(_plugin_of(_counting_class("broken", calls, fails=True)), "broken")
    assert reg.get("interpreter").info().name == "interpreter"
    assert calls == []  # neither other plugin's info() ran
    assert reg.get("costly").info().name == "costly" and calls.count("costly") == 2  # resolve + the call here
    assert "broken" not in calls


def test_a_broken_info_is_reported_as_when_it_was_asked_at_load(install_registry, capsys):
    calls: list[str] = []
    import glow_interpreter.plugin

    reg = install_registry(interpreter=glow_interpreter.plugin)
    record = reg.register(_plugin_of(_counting_class("broken", calls, fails=True)), "broken")
    assert calls == []  # registered without asking
    assert record.error.startswith("RuntimeError: broken: no device driver")  # asked on the first look
    assert record.backends == {} and record.infos == {}
    assert sorted(reg.backends()) == ["interpreter"]
    assert set(reg.errors()) == {"broken"}
    missing = r"no backend named 'broken'; installed: \['interpreter'\]; failed plugins"
    with pytest.raises(BackendError, match=missing):
        reg.get("broken")

    from glow_core.cli import main

    assert main(["backends"]) == 1
    captured = capsys.readouterr()
    assert "FAILED: RuntimeError: broken: no device driver" in captured.out
    assert "1 plugin(s) failed: broken" in captured.err
    assert calls == ["broken"]  # asked once, however often the registry was looked at


def test_glow_backends_lists_a_plugin_whose_info_fails_with_the_others(install_registry, capsys):
    """The CLI is the first to look: the error shows there, not only after a get()."""
    calls: list[str] = []
    import glow_interpreter.plugin

    install_registry(interpreter=glow_interpreter.plugin)
    from glow_core import plugins as module

    module.registry().register(_plugin_of(_counting_class("broken", calls, fails=True)), "broken")
    from glow_core.cli import main

    assert main(["backends"]) == 1
    out = capsys.readouterr().out
    assert "broken" in out and "FAILED: RuntimeError: broken: no device driver" in out
    assert "interpreter" in out and "ok (reference)" in out


def test_a_class_named_unlike_its_info_is_a_plugin_error(install_registry):
    cls = _backend_class("alias", 5)
    cls.name = "other"
    reg = install_registry()
    record = reg.register(_plugin_of(cls), "mismatched")
    assert "named 'other' but its info() says 'alias'" in record.error
    assert reg.backends() == {}


def test_a_class_without_a_name_is_asked_at_load(install_registry):
    from glow_interpreter.backend import InterpreterBackend

    calls: list[str] = []

    class Nameless(Backend):
        def info(self) -> BackendInfo:
            calls.append("nameless")
            return InterpreterBackend().info().model_copy(update={"name": "nameless"})

        def compile(self, ir, options):
            raise NotImplementedError

    reg = install_registry()
    reg.register(_plugin_of(Nameless), "nameless")
    assert calls == ["nameless"]
    assert list(reg.backends()) == ["nameless"]


def test_a_cpu_process_never_asks_opencl_for_its_device():
    """With the real entry points: choosing cpu leaves glow-opencl's info() (the OpenCL
    driver's default device, 60 MB resident) unasked, and pyopencl unimported (its import
    was 0.1 s of every cold cpu compile)."""
    pytest.importorskip("glow_opencl.backend")
    pytest.importorskip("glow_cpu.backend")
    script = (
        "import sys, glow_core, glow_opencl.backend as ocl\n"
        "glow_core.plugins.get_backend('cpu')\n"
        "print(ocl._info.cache_info().currsize, 'pyopencl' in sys.modules)\n"
        "glow_core.plugins.registry().errors()\n"
        "print(ocl._info.cache_info().currsize)\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False", "1"]  # asked only when every plugin's state was wanted

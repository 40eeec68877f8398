"""Device selection and the plugin's declared facts: clear errors, never a crash at load."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from glow_opencl import runtime
from glow_opencl.emit import EMIT
from glow_opencl.runtime import ENV_VAR, select_device

import glow_core
from glow_core.errors import BackendError
from glow_core.graph import Module
from glow_core.spec import NODES, PRIMITIVES


def _tiny_module() -> Module:
    m = Module()
    b = m.create_function().builder()
    b.save(b.Exp(b.placeholder("x", (3,))), "y")
    return m


def test_plugin_loads_and_derives_support_from_emit(registry, backend):
    record = registry.plugins["opencl"]
    assert record.error is None
    info = registry.infos()["opencl"]
    assert set(info.supports) == {k for k in EMIT if k in PRIMITIVES or k in NODES}  # NODES: int8 layers
    assert info.priority == 20 and info.memory_bytes
    fp16 = select_device().target.fp16
    assert ("float16" in info.supports["MatMul"]) == fp16
    assert {"int8", "int16", "uint8", "uint64"} <= set(info.supports["Add"])
    assert "bool" in info.supports["Gather"] and "bfloat16" not in info.supports["Gather"]
    fp64 = select_device().target.fp64
    assert ("float64" in info.supports["Exp"]) == fp64


def test_device_by_index_by_platform_and_by_name(backend):
    first = select_device("0:0")
    assert select_device("0") is first
    assert select_device(first.ref.device.name[-8:].upper()) is first


def test_a_spec_matching_nothing_lists_the_devices(backend):
    with pytest.raises(BackendError, match=r"matches no device; available: \[0:0\]"):
        select_device("no-such-device")
    with pytest.raises(BackendError, match="matches no device"):
        select_device("7:3")


def test_environment_variable_is_the_fallback(backend, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "no-such-device")
    with pytest.raises(BackendError, match="'no-such-device' matches no device"):
        glow_core.compile(_tiny_module(), backend=backend)
    # The option wins over the environment.
    compiled = glow_core.compile(_tiny_module(), backend=backend, options={"device": "0:0"})
    x = np.array([0.0, 1.0, -1.0], np.float32)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], np.exp(x), rtol=1e-6)


def test_a_device_that_cannot_build_is_skipped_with_a_note(backend, monkeypatch, caplog):
    monkeypatch.setattr(runtime, "_RUNTIMES", {})
    monkeypatch.setattr(runtime, "_FAILED", {})

    def broken(self):
        raise RuntimeError("error: unknown target CPU 'generic'")

    monkeypatch.setattr(runtime.Runtime, "probe", broken)
    with caplog.at_level(logging.WARNING, logger="glow_opencl"), pytest.raises(BackendError) as err:
        select_device()
    message = str(err.value)
    assert "no OpenCL device could build a trivial kernel; tried: [0:0]" in message
    assert "unknown target CPU 'generic'" in message and "apt-get install pocl-opencl-icd" in message
    assert "skipping OpenCL device [0:0]" in caplog.text


def test_without_any_platform_the_plugin_loads_and_compile_explains(tmp_path):
    """An ICD loader that finds no vendor: info() still answers (priority 0), compile says how to fix."""
    script = textwrap.dedent(
        """
        import glow_core, glow_opencl.plugin
        from glow_core import plugins
        from glow_core.errors import BackendError
        reg = plugins.BackendRegistry()
        record = reg.register(glow_opencl.plugin, "opencl")
        assert record.error is None, record.error
        info = reg.infos()["opencl"]
        assert info.priority == 0 and info.device == "none" and info.supports["MatMul"] == ["float32"]
        m = glow_core.Module(); b = m.create_function().builder()
        b.save(b.Exp(b.placeholder("x", (3,))), "y")
        try:
            glow_core.compile(m, backend=reg.get("opencl"))
        except BackendError as err:
            print("ERROR:", err)
        """
    )
    env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path)}
    env.pop(ENV_VAR, None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR: no OpenCL platform found" in done.stdout
    assert "apt-get install pocl-opencl-icd" in done.stdout


class _FakeDevice:
    def __init__(self, config: int):
        self.single_fp_config = config


def test_programs_ask_for_correct_rounding_where_the_device_offers_it():
    """A GPU's float division may be off by 2.5 ulp unless asked: quantizing -2.5 / (5/255) then
    lands on the wrong integer (ONNX's DynamicQuantizeLinear test, seen on an NVIDIA H200)."""
    exact = runtime.cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
    assert runtime.exact_math_options(_FakeDevice(exact | 1)) == (runtime.CORRECTLY_ROUNDED,)
    assert runtime.exact_math_options(_FakeDevice(1)) == ()
    device = select_device()
    wants = bool(device.ref.device.single_fp_config & exact)
    assert (runtime.CORRECTLY_ROUNDED in device.build_options) == wants


def test_division_rounds_as_ieee_does(backend, rng):
    """Every float quotient equals numpy's correctly rounded one, bit for bit (ties of the
    quantizer's rounding depend on it)."""
    m = Module()
    b = m.create_function().builder()
    b.save(b.Div(b.placeholder("x", (4096,)), b.placeholder("d", (4096,))), "y")
    x = rng.standard_normal(4096).astype(np.float32) * 100
    d = (rng.random(4096).astype(np.float32) + 0.01) * rng.choice([-1, 1], 4096).astype(np.float32)
    x[:2], d[:2] = np.float32(-2.5), np.float32(5 / 255)
    fn = glow_core.compile(m, backend=backend)
    (y,) = fn.run({"x": x, "d": d}).values()
    np.testing.assert_array_equal(y, x / d)

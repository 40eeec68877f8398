"""The disk cache of object code: it never hands one function's code to another, and a cache
that cannot be read or written, or holds a broken entry, costs a compile, never a failure."""

from __future__ import annotations

import errno
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from cpu_cases import one_primitive_ir
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.codegen import build_program
from glow_cpu.jit import CacheWarning
from onnx import TensorProto, helper

import glow_core
from glow_core.graph import Module
from glow_core.spec import PRIMITIVES


def _compile(model, cache_dir: Path | str, **options):
    options.setdefault("parallel_work", 0)
    return glow_core.compile(
        model, backend=CpuBackend(), options=CpuOptions(cache_dir=str(cache_dir), **options)
    )


def _scale_by(factor: float) -> Module:
    """y = x * splat(factor): the factor lives only in the Splat's attribute."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (4, 16))
    b.save(b.mul(x, b.splat(factor, x)), "y")
    return m


def test_splat_values_that_print_alike_get_their_own_code(tmp_path, rng):
    """``1.5`` and ``1.500001`` print alike to 6 digits; the cache must still tell them apart."""
    x = (rng.standard_normal((4, 16)) * 1000).astype(np.float32)
    for factor in (1.5, 1.500001):
        got = _compile(_scale_by(factor), tmp_path).run({"x": x})["y"]
        expected = x.astype(np.float64) * np.float64(np.float32(factor))
        np.testing.assert_allclose(got, expected, rtol=2e-7, atol=0, err_msg=f"factor {factor}")
    assert len(list(tmp_path.glob("*.o"))) == 2


def _leaky_relu(alpha: float):
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha)
    return node, {}


def _clip(high: float):
    node = helper.make_node("Clip", ["x", "low", "high"], ["y"])
    bounds = {"low": -0.5, "high": high}
    return node, bounds


def _one_op_model(node, bounds: dict[str, float]):
    inits = [helper.make_tensor(name, TensorProto.FLOAT, [], [v]) for name, v in bounds.items()]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 40])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "build, values",
    [(_leaky_relu, (0.1, 0.1000001)), (_clip, (2.0, 2.000001))],
    ids=["LeakyRelu-alpha", "Clip-max"],
)
def test_attributes_differing_in_the_7th_digit_get_their_own_code(build, values, tmp_path, rng):
    """Two ONNX models whose only difference is an attribute's 7th significant digit, compiled
    into one cache directory, each give onnxruntime's answer."""
    x = (rng.standard_normal((3, 40)) * 4).astype(np.float32)
    for value in values:
        model = _one_op_model(*build(value))
        got = _compile(model, tmp_path).run({"x": x})["y"]
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=0, err_msg=f"{build.__name__}({value})")
    assert len(list(tmp_path.glob("*.o"))) == 2


# ---- a cache that cannot be used costs a compile, never a failure ------------------------


def _run_checked(cache_dir: Path | str, rng: np.random.Generator, factor: float = 2.5):
    """Compile ``x * factor`` with ``cache_dir`` and check its answer; returns the function."""
    compiled = _compile(_scale_by(factor), cache_dir)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], x * np.float32(factor), rtol=1e-7)
    return compiled


def _cache_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, CacheWarning)]


def _compile_twice_warning_once(cache_dir: Path | str, rng: np.random.Generator) -> str:
    """Two compiles with an unusable ``cache_dir`` both work; one warning names the directory."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _run_checked(cache_dir, rng)
        _run_checked(cache_dir, rng, factor=3.5)
    said = _cache_warnings(record)
    assert len(said) == 1, said
    assert "compiling without it" in said[0] and str(cache_dir) in said[0]
    return said[0]


def test_cache_path_that_is_a_file(tmp_path, rng):
    path = tmp_path / "cache"
    path.write_text("not a directory")
    said = _compile_twice_warning_once(path, rng)
    assert "cannot be read" in said and "NotADirectoryError" in said
    assert path.read_text() == "not a directory"


def test_cache_path_under_a_file(tmp_path, rng):
    (tmp_path / "file").write_text("x")
    _compile_twice_warning_once(tmp_path / "file" / "cache", rng)


def test_cache_under_proc(rng):
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system")
    said = _compile_twice_warning_once("/proc/glow-cpu-cache-test", rng)
    assert "cannot be written" in said


def test_read_only_cache(tmp_path, rng, monkeypatch):
    """A read-only directory, as EACCES from creating the temporary file (tests run as root,
    which writes to a chmod-ed directory anyway): nothing is written, the compile works."""
    real_mkstemp = tempfile.mkstemp

    def refuse(*args, dir=None, **kw):
        if dir is not None and Path(dir) == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))
        return real_mkstemp(*args, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    said = _compile_twice_warning_once(tmp_path, rng)
    assert "cannot be written" in said and "PermissionError" in said
    assert not list(tmp_path.iterdir())


def test_unreadable_cache(tmp_path, rng, monkeypatch):
    """Entries that exist but cannot be read (EACCES) are not used; nothing fails."""
    _run_checked(tmp_path, rng)
    real_read_bytes = Path.read_bytes

    def refuse(self):
        if self.parent == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not _run_checked(tmp_path, rng).cache_hit
    said = _cache_warnings(record)
    assert len(said) == 1 and "cannot be read" in said[0]


def _entry(cache_dir: Path) -> tuple[Path, Path]:
    (obj,) = cache_dir.glob("*.o")
    return obj, obj.with_suffix(".json")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda obj, meta: meta.write_text("[1, 2, 3]"), id="metadata-a-list"),
        pytest.param(lambda obj, meta: meta.write_text('{"object_sha256": 5'), id="metadata-truncated"),
        pytest.param(lambda obj, meta: meta.write_bytes(b"\xff\xfe\x00"), id="metadata-not-utf8"),
        pytest.param(lambda obj, meta: obj.write_bytes(obj.read_bytes()[:100]), id="object-truncated"),
        pytest.param(
            lambda obj, meta: meta.write_text(json.dumps({**json.loads(meta.read_text()), "layout": [1]})),
            id="layout-wrong-shape",
        ),
        pytest.param(
            lambda obj, meta: meta.write_text(
                json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "steps"})
            ),
            id="steps-missing",
        ),
        pytest.param(
            lambda obj, meta: meta.write_text(
                json.dumps({**json.loads(meta.read_text()), "object_sha256": "0" * 64})
            ),
            id="checksum-mismatch",
        ),
    ],
)
def test_malformed_entry_is_discarded_and_rebuilt(damage, tmp_path, rng):
    assert not _run_checked(tmp_path, rng).cache_hit
    obj, meta = _entry(tmp_path)
    damage(obj, meta)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # a broken entry is not worth a warning
        rebuilt = _run_checked(tmp_path, rng)
    assert not rebuilt.cache_hit
    assert _run_checked(tmp_path, rng).cache_hit  # the rebuilt entry is whole again
    assert [p.name for p in _entry(tmp_path)] == [obj.name, meta.name]


# ---- what the key leaves out: constant values ----------------------------------------------


def _constant_cases():
    """Every primitive's first example, with each operand in turn (and all at once) a constant:
    the shapes in which emitters ask whether an operand is a constant (packing, layouts)."""
    for kind, spec in sorted(PRIMITIVES.items()):
        if not spec.examples:
            continue
        example = spec.examples[0]
        count = len(example.operands)
        subsets = [(i,) for i in range(count)] + ([tuple(range(count))] if count > 1 else [])
        for subset in subsets:
            yield pytest.param(kind, subset, id=f"{kind}-const{''.join(map(str, subset))}")


@pytest.mark.parametrize(("kind", "constant"), list(_constant_cases()))
def test_generated_code_does_not_depend_on_constant_values(kind, constant):
    """The cache key leaves constant values out (packed copies are recomputed at load time),
    which is right only while no emitter bakes a value into the code: two draws of the
    constants must give the same LLVM module and layout."""
    spec = PRIMITIVES[kind]
    example = spec.examples[0]
    types = example.types()
    attrs = spec.complete_attrs(example.attrs)
    programs = []
    for seed in (1, 2):
        arrays = spec.sample_inputs(np.random.default_rng(seed), types, attrs)
        ir = one_primitive_ir(kind, types, example.attrs, {i: arrays[i] for i in constant})
        programs.append(build_program(ir, threads=2, profile=False, parallel_work=0))
    first, second = programs
    assert first.llvm_ir == second.llvm_ir
    assert first.layout == second.layout

"""AOT bundles: the C example and load_bundle against the JIT (bit for bit) and onnxruntime."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from bundle_helpers import assert_bit_identical, build_runner, run_c

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.bundles.code import join_weights
from glow_core.cli import main
from glow_core.errors import BundleError, InputError
from glow_core.graph import Module
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.types import ElemKind

pytest.importorskip("onnxruntime")


def _jit(model) -> glow_core.CompiledFunction:
    """The JIT's code for ``model`` as a bundle compiles it by default: one thread."""
    return glow_core.compile(model, backend="cpu", options={"threads": 1})


# What the objects may leave for the linker: libc, libm and (threaded code) libpthread.
_ALLOWED_UNDEFINED = {
    "memset", "memcpy", "memmove", "getpid", "sched_yield",
    "expf", "logf", "powf", "sinf", "cosf", "atanf", "floorf",
    "exp", "log", "pow", "sin", "cos", "atan", "tanh", "erf", "floor",
    # libm calls LLVM makes where a generic CPU lacks the instruction (FMA, SSE4.1 rounding)
    "fmaf", "fma", "rintf", "rint", "nearbyintf", "roundf", "truncf", "ceilf", "sqrtf",
    "pthread_create", "pthread_join", "pthread_mutex_lock", "pthread_mutex_unlock",
    "pthread_cond_wait", "pthread_cond_broadcast",
}  # fmt: skip


def _symbols(obj) -> tuple[set[str], set[str]]:
    """(undefined, defined global) symbols of an object file, by nm."""
    listing = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in listing.splitlines()]
    undefined = {r[1] for r in rows if len(r) == 2 and r[0] == "U"}
    defined = {r[2] for r in rows if len(r) == 3 and r[1].isupper() and r[1] != "U"}
    return undefined, defined


def _check_c_program(name: str, tmp_path) -> None:
    """Bundle zoo model ``name``, run it from C, compare with the JIT and onnxruntime."""
    model = MODELS[name]()
    inputs = random_inputs(model, seed=0)
    manifest = glow_core.bundle({name: model}, tmp_path, name=name)
    undefined, defined = _symbols(tmp_path / f"{name}.o")
    assert undefined <= _ALLOWED_UNDEFINED and defined == {name}, (undefined, defined)
    exe = build_runner(tmp_path, manifest)
    got = run_c(exe, tmp_path, manifest, manifest.entries[0], inputs)
    assert_bit_identical(got, _jit(model).run(inputs))
    error = max_relative_error(got, onnxruntime_outputs(model, inputs))
    assert error < 1e-4, f"{name}: relative error {error:.3g} against onnxruntime"


def test_c_program_matches_the_jit_bit_for_bit(registry, tmp_path):
    _check_c_program("small_cnn", tmp_path)
    header = (tmp_path / "small_cnn.h").read_text()
    assert (
        "void small_cnn(const uint8_t *constants, uint8_t *mutable_weights, uint8_t *activations);" in header
    )
    assert "#define SMALL_CNN_IN_INPUT_OFFSET" in header
    manifest = json.loads((tmp_path / "small_cnn.json").read_text())
    (entry,) = manifest["entries"]
    assert entry["inputs"][0]["shape"] == [1, 3, 32, 32] and entry["inputs"][0]["elem"] == "float32"
    assert (tmp_path / "small_cnn.weights.bin").stat().st_size == manifest["weights_bytes"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2", "bert_mini"])
def test_c_program_on_whole_models(registry, tmp_path, name):
    _check_c_program(name, tmp_path)


def test_odd_tensor_names_scalars_and_no_weights(registry, tmp_path, rng):
    """Names that are no C identifiers (or clash once made one) stay reachable by index."""
    module = Module("odd")
    b = module.create_function("main").builder()
    x, k, s = b.placeholder("x:0", (2, 3)), b.placeholder("X-0", (4,), ElemKind.int32), b.placeholder("s", ())
    b.save(b.relu(x), "y/out")
    b.save(b.Add(k, k), '2d"q')
    b.save(b.Mul(s, s), "s2")
    manifest = glow_core.bundle(module, tmp_path, name="odd", shared=True)
    header = (tmp_path / "odd.h").read_text()
    assert "ODD_IN_X_0_OFFSET" not in header and "#define ODD_OUT_Y_OUT_OFFSET" in header
    assert '"2d\\042q"' in header and manifest.weights_bytes == 0
    inputs = {
        "x:0": rng.standard_normal((2, 3)).astype(np.float32),
        "X-0": rng.integers(-1000, 1000, 4).astype(np.int32),
        "s": np.array(rng.standard_normal(), np.float32),
    }
    expected = _jit(module).run(inputs)
    exe = build_runner(tmp_path, manifest)
    assert_bit_identical(run_c(exe, tmp_path, manifest, manifest.entries[0], inputs), expected)
    assert_bit_identical(glow_core.load_bundle(tmp_path)["odd"].run(inputs), expected)
    np.testing.assert_array_equal(expected['2d"q'], inputs["X-0"] * 2)


def test_several_models_share_one_weights_file(registry, tmp_path):
    models = {"cnn": MODELS["small_cnn"](), "mlp": MODELS["mlp"](), "cnn_again": MODELS["small_cnn"]()}
    manifest = glow_core.bundle(models, tmp_path, name="pair")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pair.h", "pair.json", "pair.o", "pair.weights.bin"]
    cnn, mlp, again = manifest.entries
    assert again.constant_offset == cnn.constant_offset  # identical constants are stored once
    assert mlp.constant_offset >= cnn.constant_bytes and mlp.constant_offset % 64 == 0
    assert manifest.weights_bytes == mlp.constant_offset + mlp.constant_bytes
    exe = build_runner(tmp_path, manifest)
    for entry in manifest.entries:
        model = models[entry.name]
        inputs = random_inputs(model, seed=1)
        expected = _jit(model).run(inputs)
        assert_bit_identical(run_c(exe, tmp_path, manifest, entry, inputs), expected)
        # -l reads the weights file into private memory instead of mapping it: same results
        assert_bit_identical(run_c(exe, tmp_path, manifest, entry, inputs, flags=("-l",)), expected)


def test_embedded_weights(registry, tmp_path):
    model = MODELS["small_cnn"]()
    manifest = glow_core.bundle(model, tmp_path, name="cnn", weights="embedded")
    assert not (tmp_path / "cnn.weights.bin").exists()
    symbols = subprocess.run(
        ["nm", str(tmp_path / "cnn.o")], capture_output=True, text=True, check=True
    ).stdout
    assert " R cnn_weights" in symbols and " T cnn" in symbols
    inputs = random_inputs(model, seed=2)
    exe = build_runner(tmp_path, manifest)
    assert_bit_identical(run_c(exe, tmp_path, manifest, manifest.entries[0], inputs), _jit(model).run(inputs))
    assert_bit_identical(glow_core.load_bundle(tmp_path)["cnn"].run(inputs), _jit(model).run(inputs))


def test_threaded_bundle_matches_the_threaded_jit(registry, tmp_path):
    model = MODELS["small_cnn"]()
    options = {"threads": 2, "parallel_work": 0}  # every kernel shared by the worker pool
    manifest = glow_core.bundle(model, tmp_path, name="cnn", options=options)
    (entry,) = manifest.entries
    assert entry.threads == 2 and entry.shutdown == "cnn_shutdown" and "pthread" in manifest.libraries
    inputs = random_inputs(model, seed=4)
    expected = glow_core.compile(model, backend="cpu", options=options).run(inputs)
    assert_bit_identical(run_c(build_runner(tmp_path, manifest), tmp_path, manifest, entry, inputs), expected)


_ELF_MACHINES = {"aarch64-linux-gnu": 183, "x86_64-linux-gnu": 62}  # e_machine: EM_AARCH64, EM_X86_64


@pytest.mark.parametrize("triple", sorted(_ELF_MACHINES))
def test_cross_compiled_object_is_an_elf_object_for_the_target(registry, tmp_path, triple):
    manifest = glow_core.bundle(MODELS["small_cnn"](), tmp_path, name="cnn", target=triple)
    assert manifest.triple == triple and manifest.cpu == "generic"
    header = (tmp_path / "cnn.o").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 2 and header[5] == 1  # 64-bit, little endian
    assert int.from_bytes(header[16:18], "little") == 1  # ET_REL: relocatable
    assert int.from_bytes(header[18:20], "little") == _ELF_MACHINES[triple]
    undefined, defined = _symbols(tmp_path / "cnn.o")
    assert undefined <= _ALLOWED_UNDEFINED and defined == {"cnn"}


_AARCH64_TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64")
_AARCH64_ROOT = "/usr/aarch64-linux-gnu"  # where Debian's cross libc lives, for qemu's -L


def _check_under_qemu(name: str, tmp_path) -> None:
    """Bundle ``name`` for aarch64, run the C example under qemu, compare with this machine's JIT."""
    model = MODELS[name]()
    inputs = random_inputs(model, seed=0)
    manifest = glow_core.bundle(model, tmp_path, name="net", target="aarch64-linux-gnu")
    exe = build_runner(tmp_path, manifest, compiler=_AARCH64_TOOLS[0])
    got = run_c(
        exe, tmp_path, manifest, manifest.entries[0], inputs, (_AARCH64_TOOLS[1], "-L", _AARCH64_ROOT)
    )
    error = max_relative_error(got, _jit(model).run(inputs))
    assert error < 1e-4, f"{name} on aarch64: relative error {error:.3g} against the x86-64 JIT"
    assert max_relative_error(got, onnxruntime_outputs(model, inputs)) < 1e-4


_needs_aarch64_tools = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in _AARCH64_TOOLS) or platform.machine() == "aarch64",
    reason="needs an x86-64 machine with the Debian packages gcc-aarch64-linux-gnu and qemu-user",
)


@_needs_aarch64_tools
def test_aarch64_bundle_runs_under_qemu(registry, tmp_path):
    _check_under_qemu("small_cnn", tmp_path)


@pytest.mark.slow
@_needs_aarch64_tools
@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2", "bert_mini"])
def test_aarch64_bundle_of_whole_models_under_qemu(registry, tmp_path, name):
    _check_under_qemu(name, tmp_path)


def test_a_bundle_for_another_machine_is_not_loaded(registry, tmp_path):
    other = "x86_64-linux-gnu" if platform.machine() in ("aarch64", "arm64") else "aarch64-linux-gnu"
    glow_core.bundle(MODELS["mlp"](), tmp_path, name="mlp", target=other)
    with pytest.raises(BundleError, match=f"is for {other}"):
        glow_core.load_bundle(tmp_path)


_LOAD_WITHOUT_LLVMLITE = """
import sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import glow_core
bundle = glow_core.load_bundle(sys.argv[1])
inputs = dict(np.load(sys.argv[2]))
outputs = bundle["cnn"].run(inputs)
np.savez(sys.argv[3], **outputs)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("llvmlite", "glow_cpu", "onnxruntime"))
print(",".join(loaded))
"""


@pytest.mark.parametrize("shared", [True, False], ids=["shared-library", "linked-on-load"])
def test_load_bundle_runs_without_llvmlite(registry, tmp_path, shared):
    model = MODELS["small_cnn"]()
    bundle_dir = tmp_path / "bundle"
    glow_core.bundle(model, bundle_dir, name="cnn", shared=shared)
    assert (bundle_dir / "cnn.so").exists() == shared
    inputs = random_inputs(model, seed=3)
    np.savez(tmp_path / "inputs.npz", **inputs)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _LOAD_WITHOUT_LLVMLITE,
            str(bundle_dir),
            str(tmp_path / "inputs.npz"),
            str(tmp_path / "out.npz"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"the loader imported {done.stdout.strip()}"
    got = dict(np.load(tmp_path / "out.npz"))
    assert_bit_identical(got, _jit(model).run(inputs))
    assert not (bundle_dir / "cnn.so").exists() or shared  # linking on load writes nothing there


def test_a_library_of_an_earlier_bundle_is_never_loaded(registry, tmp_path):
    glow_core.bundle(MODELS["mlp"](), tmp_path, name="net", shared=True)
    assert (tmp_path / "net.so").exists()
    model = MODELS["small_cnn"]()
    glow_core.bundle(model, tmp_path, name="net")  # same name, another model, no library
    assert not (tmp_path / "net.so").exists()
    inputs = random_inputs(model, seed=5)
    assert_bit_identical(glow_core.load_bundle(tmp_path)["net"].run(inputs), _jit(model).run(inputs))


def test_a_library_path_loaded_before_loads_the_new_bundle_there(registry, tmp_path, monkeypatch):
    """The dynamic loader hands back the library it first opened from a path: the same
    relative path from another directory, or a bundle written again in place, must still
    load the new code (before: the old code ran on the new weights, giving NaN rows)."""
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "first")
    glow_core.bundle(MODELS["small_cnn"](), "cnn_bundle", name="cnn", shared=True)
    glow_core.load_bundle("cnn_bundle")["cnn"].run(random_inputs(MODELS["small_cnn"](), seed=1))
    monkeypatch.chdir(tmp_path / "second")
    for batch in (4, 2):  # a new directory at the same relative path, then rewritten in place
        model = MODELS["small_cnn"](batch=batch)
        glow_core.bundle(model, "cnn_bundle", name="cnn", shared=True)
        inputs = random_inputs(model, seed=batch)
        got = glow_core.load_bundle("cnn_bundle")["cnn"].run(inputs)
        assert_bit_identical(got, _jit(model).run(inputs))


@pytest.mark.parametrize("threads", [1, 2])
def test_load_bundle_runs_from_several_threads(registry, tmp_path, threads):
    model = MODELS["small_cnn"]()
    options = {"threads": threads, "parallel_work": 0}
    glow_core.bundle(model, tmp_path, name="cnn", options=options, shared=True)
    function = glow_core.load_bundle(tmp_path)["cnn"]
    assert function.concurrent_runs == (threads == 1)  # a worker pool takes one call at a time
    jit = glow_core.compile(model, backend="cpu", options=options)
    cases = [random_inputs(model, seed=10 + i) for i in range(4)]
    expected = [jit.run(inputs) for inputs in cases]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: [function.run(cases[i]) for _ in range(3)], range(4)))
    for runs, want in zip(results, expected, strict=True):
        for got in runs:
            assert_bit_identical(got, want)


def test_load_bundle_checks_inputs_and_weights(registry, tmp_path):
    model = MODELS["small_cnn"]()
    glow_core.bundle(model, tmp_path, name="cnn", shared=True)
    bundle = glow_core.load_bundle(tmp_path)
    with pytest.raises(InputError, match="shape"):
        bundle["cnn"].run({"input": np.zeros((1, 3, 16, 16), np.float32)})
    with pytest.raises(BundleError, match="no entry point 'other'"):
        bundle["other"]
    weights = tmp_path / "cnn.weights.bin"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="checksum"):
        glow_core.load_bundle(tmp_path)
    weights.write_bytes(bytes(data[:-64]))
    with pytest.raises(BundleError, match="truncated"):
        glow_core.load_bundle(tmp_path)


def _nothing_written(path) -> bool:
    return not path.exists() or not any(path.iterdir())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "interpreter"}, "backend 'interpreter' cannot write AOT bundles"),
        ({"target": "nosucharch-linux-gnu"}, "unknown target triple 'nosucharch-linux-gnu'"),
        ({"target": "aarch64-linux-gnu", "cpu": "no-such-cpu"}, "unknown CPU 'no-such-cpu'"),
        ({"name": "int"}, "'int' is not usable as a C symbol"),
        ({"name": "9lives"}, "'9lives' is not usable as a C symbol"),
        ({"weights": "inline"}, "weights 'inline'"),
        ({"options": {"profile": True}}, "profile"),
        ({"target": "aarch64-linux-gnu", "options": {"threads": 2}}, "spin loop is written for x86-64"),
    ],
)
def test_bad_requests_are_refused_and_write_nothing(registry, tmp_path, kwargs, message):
    out = tmp_path / "out"
    with pytest.raises(BundleError, match=message):
        glow_core.bundle(MODELS["mlp"](), out, **{"name": "mlp", **kwargs})
    assert _nothing_written(out)


def test_without_a_c_compiler_the_library_is_refused_by_name(registry, tmp_path, monkeypatch):
    glow_core.bundle(MODELS["mlp"](), tmp_path / "plain", name="mlp")
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(BundleError, match=r"no C compiler .*'no-such-cc'.*-shared"):
        glow_core.bundle(MODELS["mlp"](), tmp_path / "out", name="mlp", shared=True)
    assert _nothing_written(tmp_path / "out")
    with pytest.raises(BundleError, match=r"no mlp\.so and there is no C compiler"):
        glow_core.load_bundle(tmp_path / "plain")


def test_an_output_directory_that_is_a_file_is_refused(registry, tmp_path):
    out = tmp_path / "taken"
    out.write_text("not a directory")
    with pytest.raises(BundleError, match="exists and is not a directory"):
        glow_core.bundle(MODELS["mlp"](), out, name="mlp")
    assert out.read_text() == "not a directory"


def test_entry_points_that_would_clash_in_c_are_refused(registry, tmp_path):
    with pytest.raises(BundleError, match="same macros"):
        glow_core.bundle({"net": MODELS["mlp"](), "NET": MODELS["mlp"]()}, tmp_path / "out", name="b")
    with pytest.raises(BundleError, match="C symbol 'b_weights'"):
        glow_core.bundle({"b_weights": MODELS["mlp"]()}, tmp_path / "out", name="b")
    assert _nothing_written(tmp_path / "out")


def test_join_weights_aligns_and_stores_repeats_once():
    blob, offsets = join_weights([b"abc", b"defgh", b"abc", b""])
    assert offsets == (0, 64, 0, 128)
    assert blob == b"abc" + bytes(61) + b"defgh" + bytes(59)


def test_cli_bundle(registry, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["bundle", "zoo:mlp", "zoo:small_cnn", "-o", str(out), "--name", "nets"]) == 0
    printed = capsys.readouterr().out
    assert "entry    mlp:" in printed and "entry    small_cnn:" in printed
    assert sorted(p.name for p in out.iterdir()) == ["nets.h", "nets.json", "nets.o", "nets.weights.bin"]
    assert main(["bundle", "zoo:mlp", "-o", str(out / "nets.h")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert main(["bundle", "zoo:mlp", "-o", str(tmp_path / "x"), "--backend", "interpreter"]) == 2
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("bound", [0, None])
def test_bundle_modules_past_the_quick_bound_skip_the_o3_pipeline(registry, tmp_path, monkeypatch, bound):
    """As the JIT does, a bundle runs LLVM's O0 pipeline on a module past ``QUICK_MODULE_BYTES``
    (an unrolled recurrence's body; the bound lowered to 0 sends every module that way), O1
    on the body and O3 on the kernels otherwise, and the C program still matches the JIT bit
    for bit and onnxruntime."""
    from glow_cpu import jit

    if bound is not None:
        monkeypatch.setattr(jit, "QUICK_MODULE_BYTES", bound)
    pipelines: list[jit.Level] = []
    real_builder = jit._pipeline_builder

    def builder(machine, level=jit.FULL):
        pipelines.append(level)
        return real_builder(machine, level)

    monkeypatch.setattr(jit, "_pipeline_builder", builder)
    _check_c_program("small_cnn", tmp_path)
    assert pipelines and set(pipelines) == ({jit.QUICK} if bound == 0 else {jit.FULL, jit.DISPATCH})

"""Building and running the C example of docs/bundles.md against a bundle, for the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from glow_core.bundles import EntryPoint, Manifest
from glow_core.types import ElemKind

RUNNER = Path(__file__).parents[3] / "examples" / "bundle" / "run_bundle.c"


def c_compiler() -> str:
    """The system C compiler ($CC, else cc); scripts/setup installs gcc where it is missing."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    assert compiler, "no C compiler (cc) on PATH: run scripts/setup, which installs gcc"
    return compiler


def build_runner(directory: Path, manifest: Manifest, compiler: str | None = None) -> Path:
    """examples/bundle/run_bundle.c linked with the bundle's object, warnings as errors
    (``compiler``: a cross compiler for a bundle of another target; default the system's)."""
    exe = directory / f"run_{manifest.name}"
    command = [
        compiler or c_compiler(),
        "-O2",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-DBUNDLE={manifest.name}",
        "-I",
        str(directory),
        str(RUNNER),
        str(directory / manifest.files["object"]),
        *(f"-l{lib}" for lib in manifest.libraries),
        "-o",
        str(exe),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stderr}"
    return exe


def run_c(
    exe: Path,
    directory: Path,
    manifest: Manifest,
    entry: EntryPoint,
    inputs: dict[str, np.ndarray],
    emulator: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
    """The entry point's outputs for ``inputs``, computed by the C program from raw files
    (run under ``emulator``, e.g. qemu-aarch64, for a bundle of another target; ``flags``
    are more options of the program, e.g. ``-l``)."""
    work = directory / f"io_{entry.name}"
    work.mkdir(exist_ok=True)
    files = []
    for i, slot in enumerate(entry.inputs):
        path = work / f"in{i}.bin"
        value = inputs[slot.name]
        assert value.dtype == ElemKind[slot.elem].dtype and value.shape == slot.shape
        np.ascontiguousarray(value).tofile(path)
        files.append(str(path))
    outputs = [work / f"out{i}.bin" for i in range(len(entry.outputs))]
    weights = ["-w", str(directory / manifest.files["weights"])] if manifest.weights == "file" else []
    command = [*emulator, str(exe), *flags, "-m", entry.name, *weights, *files, *map(str, outputs)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stderr}"
    return {
        slot.name: np.fromfile(path, ElemKind[slot.elem].dtype).reshape(slot.shape)
        for slot, path in zip(entry.outputs, outputs, strict=True)
    }


def assert_bit_identical(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """Same names, dtypes, shapes and bytes (NaNs included: the same code gives the same bits)."""
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        same = _bytes(got[name]) == _bytes(value)
        assert same.all(), f"{name}: {np.count_nonzero(~same)} bytes differ from the JIT's"


def _bytes(value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(value).reshape(-1).view(np.uint8)


def bundles_compile_in_a_child(script: str, directory: Path, objects: int) -> None:
    """Run ``script`` (Python that bundles models into ``directory`` and prints "compiled") in
    a child process and check it wrote ``objects`` object files: LLVM aborts the process on
    some IR for some CPUs (test_cpu_pool_window.py), and in a child that fails one test
    instead of ending the test run."""
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]
    written = list(directory.rglob("*.o"))
    assert len(written) == objects, sorted(p.name for p in directory.rglob("*"))


def onnx_models_compile_for_cpu_in_a_child(models: list, directory: Path, cpu: str) -> None:
    """Save each ONNX model in ``models`` into ``directory`` and bundle them all for the x86-64
    CPU named ``cpu`` (an AVX-512 one such as "emeraldrapids" compiles here without running)
    in a child process (``bundles_compile_in_a_child``): one object file per model."""
    import onnx

    for index, model in enumerate(models):
        onnx.save(model, directory / f"m{index}.onnx")
    script = f"""
import onnx
import glow_core
for index in range({len(models)}):
    model = onnx.load({str(directory)!r} + f"/m{{index}}.onnx")
    glow_core.bundle(model, {str(directory)!r} + f"/b{{index}}", name="model",
                     target="x86_64-unknown-linux-gnu", cpu={cpu!r})
print("compiled")
"""
    bundles_compile_in_a_child(script, directory, objects=len(models))

"""LLVM's code pages handed back around a compile (``jit.llvm_in_use``; docs/performance.md,
"Footprint, round four").

``import llvmlite.binding`` makes most of LLVM's library resident; the first compile in
and the last out unmap its clean pages (``glow_core.heap.release_file_pages``), which fault
back from the page cache if LLVM runs again. These tests check, in a fresh process, that
the library's pages are gone when the weights are packed and after the compile and a run,
and that compiles stay correct while its pages are dropped under them: on two threads at
once, and again in the same process afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.jit import llvm_library

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.heap import file_mappings, release_file_pages
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import compile_stages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's smaps and madvise")

MODEL = "resnet_bottleneck"

_CHILD = """
import json, sys
import numpy as np
import glow_core
from glow_cpu import backend, jit
from glow_core.heap import file_mappings

def library_mb():
    return sum(m.resident for m in file_mappings(jit.llvm_library())) / 2**20

glow_core.plugins.get_backend("cpu")
facts = {"after the imports": library_mb()}
region = backend.constant_region

def recorded(*args):
    facts["when the weights are packed"] = library_mb()
    return region(*args)

backend.constant_region = recorded
options = {"cache": False, "threads": 1, "compile_threads": 2}
compiled = glow_core.compile(sys.argv[1], backend="cpu", options=options)
facts["after the compile"] = library_mb()
outputs = compiled.run(dict(np.load(sys.argv[2])))
facts["after a run"] = library_mb()
np.savez(sys.argv[3], **outputs)
print(json.dumps(facts))
"""


def test_llvm_is_not_resident_when_the_weights_are_packed_nor_after(tmp_path) -> None:
    """A fresh process, as a user's: LLVM's library is tens of MB resident after the imports
    (else this test would prove nothing), and at most a few MB from the packing on."""
    model = MODELS[MODEL]()
    feeds = random_inputs(model, seed=3)
    paths = [tmp_path / "model.onnx", tmp_path / "inputs.npz", tmp_path / "outputs.npz"]
    onnx.save(model, paths[0])
    np.savez(paths[1], **feeds)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, paths)], check=True, capture_output=True, text=True
    )
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["after the imports"] > 20, facts
    for stage in ("when the weights are packed", "after the compile", "after a run"):
        assert facts[stage] < 4, (stage, facts)
    got = dict(np.load(paths[2]))
    assert all(np.abs(v).max() > 0 for v in got.values())
    assert max_relative_error(got, onnxruntime_outputs(model, feeds)) < 1e-4


def test_compiles_stay_right_while_llvm_pages_are_dropped_under_them(registry) -> None:
    """Two compiles on two threads (two LLVM threads each) while a third thread drops LLVM's
    pages as fast as it can, then a compile in the same process after them all."""
    names = ["small_cnn", MODEL]
    backend = CpuBackend()
    lowered = {n: compile_stages(MODELS[n](), backend, verify_each=False).ir for n in names}
    options = CpuOptions(cache=False, threads=1, compile_threads=2)
    compiled: dict[str, object] = {}
    errors: list[BaseException] = []
    done = threading.Event()
    released: list[int] = []
    start = threading.Barrier(len(names) + 1)

    def compile_one(name: str) -> None:
        try:
            start.wait()
            compiled[name] = backend.compile(lowered[name], options)
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    def drop_pages() -> None:
        start.wait()
        while not done.is_set():
            released.append(release_file_pages(llvm_library()))

    dropper = threading.Thread(target=drop_pages)
    compilers = [threading.Thread(target=compile_one, args=(n,)) for n in names]
    for t in [dropper, *compilers]:
        t.start()
    for t in compilers:
        t.join()
    done.set()
    dropper.join()
    assert not errors, errors
    assert sum(1 for r in released if r > 0) >= 3, "the pages were hardly ever dropped under the compiles"
    again = glow_core.compile(MODELS[MODEL](), backend="cpu", options={"cache": False, "threads": 1})
    for name, fn in [*compiled.items(), ("again", again)]:
        model = MODELS[MODEL if name == "again" else name]()
        feeds = random_inputs(model, seed=5)
        got = fn.run(feeds)
        assert all(np.abs(v).max() > 0 for v in got.values()), name
        assert max_relative_error(got, onnxruntime_outputs(model, feeds)) < 1e-4, name
    assert sum(m.resident for m in file_mappings(llvm_library())) < 4 << 20

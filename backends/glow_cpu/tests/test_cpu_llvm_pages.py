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
from cpu_cases import compile_on_threads
from glow_cpu.jit import llvm_library

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.heap import file_mappings, release_file_pages
from glow_core.model_zoo import MODELS, random_inputs

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
    released: list[int] = []

    def drop_pages(done: threading.Event) -> None:
        while not done.is_set():
            released.append(release_file_pages(llvm_library()))

    compiled = compile_on_threads(["small_cnn", MODEL], beside=drop_pages)
    assert sum(1 for r in released if r > 0) >= 3, "the pages were hardly ever dropped under the compiles"
    again = glow_core.compile(MODELS[MODEL](), backend="cpu", options={"cache": False, "threads": 1})
    for name, fn in [*compiled.items(), ("again", again)]:
        model = MODELS[MODEL if name == "again" else name]()
        feeds = random_inputs(model, seed=5)
        got = fn.run(feeds)
        assert all(np.abs(v).max() > 0 for v in got.values()), name
        assert max_relative_error(got, onnxruntime_outputs(model, feeds)) < 1e-4, name
    assert sum(m.resident for m in file_mappings(llvm_library())) < 4 << 20

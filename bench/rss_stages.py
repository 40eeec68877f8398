"""Resident memory of one glow-cpu compile + runs, stage by stage, in a fresh child process.

Where does a process that compiles and runs a model peak, and on what? The child records
``VmRSS`` (resident now) and the stage's own peak (sampled by a thread) after: the imports,
each top-level pipeline step (the
ONNX load is in ``import``), and inside code generation the kernels' emission (with the
LLVM work that threads do meanwhile), the rest of LLVM's work, loading the object, handing
LLVM's code pages back, and packing the constant region; then the first run and ``--runs``
more. With ``--tracemalloc`` it also
reports the Python-side memory (numpy arrays included) traced at each stage end, and the
largest allocation sites alive at the end of code generation, while the graph, the IR and
the packed region are all still alive (slower; the RSS then includes tracemalloc's own).

``--engine onnxruntime`` stages an onnxruntime child the same way (its imports, the
session made from the same file, one thread, the first run and ``--runs`` more), for the
side-by-side table in docs/performance.md.

    .venv/bin/python bench/rss_stages.py resnet50 [--runs 10] [--winograd off] [--tracemalloc]
    .venv/bin/python bench/rss_stages.py resnet50 --engine onnxruntime
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


class _Recorder:
    """One row per stage: RSS at its end and the most it reached during the stage.

    The stage's peak is sampled (every 2 ms, by a thread: compiling is Python that releases
    the GIL every few ms, LLVM releases it) rather than read from ``VmHWM`` reset through
    ``/proc/self/clear_refs``: the kernel updates that high-water mark lazily, and missed
    LLVM's transient working set. The process's own ``VmHWM`` is the last row.
    """

    def __init__(self, traced: bool):
        self.rows: list[dict] = []
        self.traced = traced
        self.snapshot = None
        self.peak = _status_mb("VmRSS")
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, _status_mb("VmRSS"))
            time.sleep(0.002)

    def record(self, stage: str) -> None:
        rss = _status_mb("VmRSS")
        row = {"stage": stage, "rss": rss, "peak": max(self.peak, rss)}
        if self.traced:
            import tracemalloc

            current, peak = tracemalloc.get_traced_memory()
            row["traced"], row["traced_peak"] = current / 2**20, peak / 2**20
            if stage == "codegen: constant packing":
                self.snapshot = tracemalloc.take_snapshot()
            tracemalloc.reset_peak()
        self.rows.append(row)
        self.peak = rss


def _child(model_path: str, inputs_path: str, runs: int, winograd: bool, traced: bool) -> None:
    if traced:
        import tracemalloc

        tracemalloc.start(8)
    recorder = _Recorder(traced)
    import numpy as np

    inputs = dict(np.load(inputs_path))
    recorder.record("python, numpy, inputs")
    import glow_cpu.backend as cpu_backend
    import glow_cpu.runtime as cpu_runtime

    import glow_core
    from glow_core import progress

    glow_core.plugins.get_backend("cpu")
    recorder.record("imports (glow_core, glow_cpu)")

    class Listener:
        """Each top-level pipeline step's start is the previous one's end."""

        current: str | None = None

        def step(self, name: str) -> None:
            if self.current is not None and not self.current.startswith("codegen"):
                recorder.record(self.current)
            self.current = name

        def advance(self, done: int, total: int | None, what: str) -> None:
            pass

    def after(stage: str, fn):
        def wrapped(*args, **kwargs):
            result = fn(*args, **kwargs)
            recorder.record(stage)
            return result

        return wrapped

    # LLVM compiles each kernel's module on threads while the next kernels are emitted, so
    # "emission" includes the LLVM work done meanwhile and "LLVM" is what was left after it.
    emission = "codegen: kernel emission (+ LLVM meanwhile)"
    cpu_backend.build_program = after(emission, cpu_backend.build_program)
    compiler = cpu_backend.ModuleCompiler
    compiler.objects = after("codegen: LLVM, the rest (machine code)", compiler.objects)
    cpu_backend.LoadedObject = after("codegen: object load (MCJIT)", cpu_backend.LoadedObject)
    in_use = cpu_backend.llvm_in_use

    @contextlib.contextmanager
    def llvm_in_use():
        with in_use():
            yield
        recorder.record("codegen: LLVM's code pages handed back")

    cpu_backend.llvm_in_use = llvm_in_use
    packing = after("codegen: constant packing", cpu_runtime.constant_region)
    cpu_backend.constant_region = cpu_runtime.constant_region = packing
    options = {"cache": False, "threads": 1, "winograd": winograd}
    with progress.listening(Listener()):
        compiled = glow_core.compile(model_path, backend="cpu", options=options)
    recorder.record("compile returned (graph and IR dropped)")
    compiled.run(inputs)
    recorder.record("first run")
    for _ in range(runs):
        compiled.run(inputs)
    recorder.record(f"{runs} more runs")
    recorder.rows.append({"stage": "process VmHWM", "rss": _status_mb("VmRSS"), "peak": _status_mb("VmHWM")})
    top = []
    if recorder.snapshot is not None:
        for stat in recorder.snapshot.statistics("traceback")[:12]:
            frames = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}" for f in stat.traceback[:4])
            top.append(f"{stat.size / 2**20:7.1f} MB  {frames}")
    print(json.dumps({"rows": recorder.rows, "top": top}))


def _onnxruntime_child(model_path: str, inputs_path: str, runs: int) -> None:
    """onnxruntime's process, staged like glow's: imports, session, first run, more runs."""
    recorder = _Recorder(False)
    import numpy as np

    inputs = dict(np.load(inputs_path))
    recorder.record("python, numpy, inputs")
    import onnxruntime

    recorder.record("imports (onnxruntime)")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    recorder.record("session (load + optimize)")
    session.run(None, inputs)
    recorder.record("first run")
    for _ in range(runs):
        session.run(None, inputs)
    recorder.record(f"{runs} more runs")
    recorder.rows.append({"stage": "process VmHWM", "rss": _status_mb("VmRSS"), "peak": _status_mb("VmHWM")})
    print(json.dumps({"rows": recorder.rows, "top": []}))


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--winograd", choices=("on", "off"), default="on")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--engine", choices=("glow", "onnxruntime"), default="glow")
    args = parser.parse_args()
    import numpy as np
    import onnx

    from glow_core.model_zoo import MODELS, random_inputs

    with tempfile.TemporaryDirectory() as tmp:
        model = MODELS[args.model]()
        paths = (os.path.join(tmp, f"{args.model}.onnx"), os.path.join(tmp, "inputs.npz"))
        onnx.save(model, paths[0])
        np.savez(paths[1], **random_inputs(model, seed=0))
        del model
        flags = [str(args.runs), args.winograd, str(int(args.tracemalloc)), args.engine]
        out = subprocess.run(
            [sys.executable, __file__, "--child", *paths, *flags], check=True, capture_output=True, text=True
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    traced = args.tracemalloc
    head = "| stage | RSS after (MB) | peak in stage (MB) |" + (
        " traced (MB) | traced peak (MB) |" if traced else ""
    )
    print(head)
    print("|---|--:|--:|" + ("--:|--:|" if traced else ""))
    for r in result["rows"]:
        extra = f" {r['traced']:.1f} | {r['traced_peak']:.1f} |" if traced and "traced" in r else ""
        extra = extra or (" | |" if traced else "")
        print(f"| {r['stage']} | {r['rss']:.1f} | {r['peak']:.1f} |{extra}")
    if result["top"]:
        print("\nlargest Python allocations alive after constant packing:")
        print("\n".join(result["top"]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        model_path, inputs_path, runs, winograd, traced, engine = sys.argv[2:8]
        if engine == "onnxruntime":
            _onnxruntime_child(model_path, inputs_path, int(runs))
        else:
            _child(model_path, inputs_path, int(runs), winograd == "on", traced == "1")
    else:
        main()

"""Cold glow-cpu compile time and peak RSS of zoo models, each in a fresh child process.

Compile time is dominated by LLVM (optimization and machine code), so it grows with the
amount of distinct generated code; this script is how docs/performance.md measures it:
every compile runs in a child process of its own (nothing imported or cached in memory),
with the object cache off, and the median of ``--repeat`` children is reported with the
number of instructions and of distinct kernels (``CpuFunction.kernel_count``), and the
CPU seconds the compile used (every thread's, ``time.process_time``: with LLVM on several
threads it exceeds the wall time on a quiet machine; on a shared one it is the steadier
figure). The children
load the model from an ONNX file and the inputs from an ``.npz`` the parent writes.

    .venv/bin/python bench/compile_time.py resnet50 gru_text [--repeat 3] [--runs 10]

``--runs N`` also runs the compiled model N times in the child, and the child's peak RSS
(``VmHWM``) is reported; ``--onnxruntime`` measures onnxruntime children doing the same
(session + N runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx

from glow_core.model_zoo import MODELS, random_inputs

_CHILD = r"""
import json, sys, time
path, inputs_path, engine, runs, threads = sys.argv[1:4] + [int(a) for a in sys.argv[4:6]]
import numpy as np
inputs = dict(np.load(inputs_path))
result = {}
if engine == "glow":
    import glow_core
    start, cpu = time.perf_counter(), time.process_time()
    compiled = glow_core.compile(path, backend="cpu", options={"cache": False, "threads": threads})
    result["compile_s"] = time.perf_counter() - start
    result["compile_cpu_s"] = time.process_time() - cpu
    result["steps"], result["kernels"] = len(compiled.steps), getattr(compiled, "kernel_count", 0)
    for _ in range(runs):
        compiled.run(inputs)
else:
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    start = time.perf_counter()
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    result["compile_s"] = time.perf_counter() - start
    for _ in range(runs):
        session.run(None, inputs)
# VmHWM, not getrusage: ru_maxrss survives exec, so a child would report the parent's peak.
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
result["peak_rss_mb"] = int(hwm.split()[1]) / 1024
print(json.dumps(result))
"""


def child(paths: tuple[str, str], engine: str, runs: int, threads: int) -> dict:
    """One child process: load the model file, compile (or make a session), run ``runs`` times."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *paths, engine, str(runs), str(threads)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--onnxruntime", action="store_true", help="measure onnxruntime children too")
    args = parser.parse_args()
    engines = ["glow", "onnxruntime"] if args.onnxruntime else ["glow"]
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            # The children read the model from a file, as a user's process would (building it
            # in the child would count the builder's garbage in the child's peak).
            model = MODELS[name]()
            paths = (os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, "inputs.npz"))
            onnx.save(model, paths[0])
            np.savez(paths[1], **random_inputs(model, seed=0))
            del model
            for engine in engines:
                rows = [child(paths, engine, args.runs, args.threads) for _ in range(args.repeat)]
                measure(name, engine, rows)


def measure(name: str, engine: str, rows: list[dict]) -> None:
    """Print the medians of ``rows`` (one per child)."""
    compile_s = statistics.median(r["compile_s"] for r in rows)
    rss = statistics.median(r["peak_rss_mb"] for r in rows)
    each = ", ".join(f"{r['compile_s']:.2f}" for r in rows)
    if "compile_cpu_s" in rows[0]:  # CPU seconds of every thread: what a shared machine's load inflates least
        cpu = statistics.median(r["compile_cpu_s"] for r in rows)
        each += f"; cpu median {cpu:.2f} s: " + ", ".join(f"{r['compile_cpu_s']:.2f}" for r in rows)
    counts = f"  {rows[0]['steps']} steps, {rows[0]['kernels']} kernels" if "steps" in rows[0] else ""
    figures = f"compile median {compile_s:6.2f} s ({each})  peak RSS {rss:7.1f} MB{counts}"
    print(f"{name:12s} {engine:12s} {figures}", flush=True)


if __name__ == "__main__":
    main()

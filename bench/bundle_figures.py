"""Figures of docs/bundles.md: bundle sizes, the C example's latency against the JIT's, and
the peak memory of a C process against Python processes running the same model.

    .venv/bin/python bench/bundle_figures.py sizes   [--models resnet50,mobilenetv2,bert_mini] [--dir DIR]
    .venv/bin/python bench/bundle_figures.py latency [--model resnet50] [--rounds 5] [--runs 20] [--dir DIR]
    .venv/bin/python bench/bundle_figures.py memory  [--model resnet50] [--dir DIR]

Bundles are written to DIR/MODEL (default bundle_figures/) and reused when already there.

``sizes``: the object's code (its ``.text`` sections), its whole size, the weights file and
the model's parameters (the ONNX initializers), whose ratio says whether a weight is stored
twice. ``latency``: ``rounds`` rounds, each running examples/bundle/run_bundle.c ``runs``
times in one process (its median; the first run of a process, which faults the mapped
weights in, is in the sample), again with ``-l`` (weights read into private memory, as the
JIT holds them, instead of mapped), and then the JIT's native entry point ``runs`` times after 3
warm-up runs, with and without ``CompiledFunction.run`` around it; the medians of every round
are printed, so the noise on a shared machine is visible. Both run the same machine code on
one thread; the C outputs are checked bit for bit against the JIT's. ``memory``: the peak
resident set (``/usr/bin/time -v``) of the C program, of a Python process that
``load_bundle``s the bundle, and of one that compiles the model with the JIT (compile cache
off), each running one inference.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import glow_core
from glow_core.model_zoo import MODELS, random_inputs

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "examples" / "bundle" / "run_bundle.c"


def bundle_dir(base: Path, model: str) -> Path:
    """The bundle of zoo ``model`` (file weights, shared library, one thread), made once."""
    directory = base / model
    if not (directory / f"{model}.json").exists():
        started = time.perf_counter()
        glow_core.bundle(MODELS[model](), directory, name=model, shared=True)
        print(f"bundled {model} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return directory


def runner(directory: Path, model: str) -> Path:
    exe = directory / f"run_{model}"
    if not exe.exists():
        command = ["cc", "-O2", "-std=c11", f"-DBUNDLE={model}", "-I", str(directory), str(RUNNER)]
        subprocess.run(
            [*command, str(directory / f"{model}.o"), "-lm", "-lpthread", "-o", str(exe)], check=True
        )
    return exe


def sizes(base: Path, models: list[str]) -> None:
    print("| model | code (.text) | object | weights file | parameters | weights / parameters |")
    print("|---|--:|--:|--:|--:|--:|")
    for model in models:
        directory = bundle_dir(base, model)
        obj = directory / f"{model}.o"
        listing = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True, check=True).stdout
        text = sum(int(row.split()[1]) for row in listing.splitlines() if row.startswith(".text"))
        weights = (directory / f"{model}.weights.bin").stat().st_size
        onnx_model = MODELS[model]()
        parameters = sum(np.prod(t.dims, dtype=np.int64) * 4 for t in onnx_model.graph.initializer)
        print(
            f"| {model} | {text:,} | {obj.stat().st_size:,} | {weights:,} | {parameters:,} "
            f"| {weights / parameters:.3f} |"
        )


def latency(base: Path, model: str, rounds: int, runs: int) -> None:
    directory = bundle_dir(base, model)
    exe = runner(directory, model)
    onnx_model = MODELS[model]()
    inputs = random_inputs(onnx_model, seed=0)
    bundle = glow_core.load_bundle(directory)
    entry = bundle.manifest.entries[0]
    files = []
    for slot in entry.inputs:
        path = directory / f"latency_{slot.name.replace('/', '_')}.bin"
        np.ascontiguousarray(inputs[slot.name]).tofile(path)
        files.append(str(path))
    outputs = [directory / f"latency_out{i}.bin" for i in range(len(entry.outputs))]
    jit = glow_core.compile(onnx_model, "cpu", options={"threads": 1})
    expected = jit.run(inputs)
    for _ in range(3):
        jit.run(inputs)
    c_medians, loaded_medians, entry_medians, run_medians = [], [], [], []
    weights = str(directory / f"{model}.weights.bin")

    def c_median(*flags: str) -> float:
        command = [str(exe), *flags, "-w", weights, "-r", str(runs), *files, *map(str, outputs)]
        said = subprocess.run(command, capture_output=True, text=True, check=True).stderr
        return float(re.search(r"median ([0-9.]+) ms", said).group(1))

    for done in range(rounds):
        c_medians.append(c_median())
        loaded_medians.append(c_median("-l"))
        entry_medians.append(_entry_median(jit, inputs, runs))
        run_medians.append(_median_ms(lambda: jit.run(inputs), runs))
        print(
            f"round {done + 1}: C {c_medians[-1]:.2f} ms, C -l {loaded_medians[-1]:.2f} ms, "
            f"JIT entry {entry_medians[-1]:.2f} ms, JIT run() {run_medians[-1]:.2f} ms",
            file=sys.stderr,
        )
    for slot, path in zip(entry.outputs, outputs, strict=True):
        got = np.fromfile(path, expected[slot.name].dtype)
        assert np.array_equal(got.view(np.uint8), expected[slot.name].reshape(-1).view(np.uint8)), slot.name
    c, cl, e, r = (statistics.median(m) for m in (c_medians, loaded_medians, entry_medians, run_medians))
    print(f"{model}: {rounds} rounds x {runs} runs, median of the rounds' medians (ms)")
    print(f"  C run_bundle     {c:.2f}   rounds {', '.join(f'{m:.2f}' for m in c_medians)}")
    print(f"  C run_bundle -l  {cl:.2f}   rounds {', '.join(f'{m:.2f}' for m in loaded_medians)}")
    print(f"  JIT entry point  {e:.2f}   rounds {', '.join(f'{m:.2f}' for m in entry_medians)}")
    print(f"  JIT run()        {r:.2f}   rounds {', '.join(f'{m:.2f}' for m in run_medians)}")
    print(f"  C / JIT entry    {c / e:.3f} (weights mapped), {cl / e:.3f} (weights read, -l)")
    print("  outputs bit-identical")


def _entry_median(jit, inputs, runs: int) -> float:
    """The JIT's native entry point alone, on regions already holding the inputs."""
    with jit.states.borrow() as regions:
        for name, value in inputs.items():
            regions.inputs[name][...] = value
        return _median_ms(lambda: jit._entry(jit._constants_address, *regions.addresses), runs)


def _median_ms(call, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def memory(base: Path, model: str) -> None:
    directory = bundle_dir(base, model)
    exe = runner(directory, model)
    inputs = random_inputs(MODELS[model](), seed=0)
    entry = glow_core.load_bundle(directory).manifest.entries[0]
    files = []
    for slot in entry.inputs:
        path = directory / f"memory_{slot.name.replace('/', '_')}.bin"
        np.ascontiguousarray(inputs[slot.name]).tofile(path)
        files.append(str(path))
    outs = [str(directory / f"memory_out{i}.bin") for i in range(len(entry.outputs))]
    setup = (
        "import glow_core; from glow_core.model_zoo import MODELS, random_inputs; "
        f"m = MODELS[{model!r}](); x = random_inputs(m, seed=0); "
    )
    processes = {
        "C run_bundle": [str(exe), "-w", str(directory / f"{model}.weights.bin"), *files, *outs],
        # The inputs from the raw files: building the ONNX model would count its weights here.
        "Python, load_bundle": [
            sys.executable, "-c",
            "import numpy as np, glow_core; "
            f"f = glow_core.load_bundle({str(directory)!r})[{model!r}]; "
            f"f.run({{s.name: np.fromfile(p, s.elem).reshape(s.shape) "
            f"for s, p in zip(f.entry.inputs, {files!r})}})",
        ],
        "Python, JIT (compile + run)": [
            sys.executable, "-c",
            setup + "glow_core.compile(m, 'cpu', options={'threads': 1, 'cache': False}).run(x)",
        ],
    }  # fmt: skip
    print("| process running one inference | peak resident memory |")
    print("|---|--:|")
    for what, command in processes.items():
        said = subprocess.run(
            ["/usr/bin/time", "-v", *command], capture_output=True, text=True, check=True
        ).stderr
        kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", said).group(1))
        print(f"| {what} | {kib / 1024:,.0f} MiB |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["sizes", "latency", "memory"])
    parser.add_argument("--models", default="resnet50,mobilenetv2,bert_mini")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=Path("bundle_figures"))
    args = parser.parse_args()
    if args.what == "sizes":
        sizes(args.dir, args.models.split(","))
    elif args.what == "latency":
        latency(args.dir, args.model, args.rounds, args.runs)
    else:
        memory(args.dir, args.model)


if __name__ == "__main__":
    main()

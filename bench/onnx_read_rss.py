"""Resident memory of reading an ONNX model's weights, one way per fresh child process.

Why the ONNX import peaks at about twice a model's weights, and which cheap fix would
help: each child reads a zoo model's file one way and reports ``VmRSS`` / ``VmHWM`` (MB)
after each step. The ways:

- ``load``: ``onnx.load`` (reads the file's bytes, then parses them), then every initializer
  made an array (``numpy_helper.to_array``), as the loader does today;
- ``load-clear``: the same, clearing each initializer's ``raw_data`` once its array exists;
- ``mmap``: ``ModelProto.ParseFromString`` on a memoryview of the file mapped read-only.

    .venv/bin/python bench/onnx_read_rss.py resnet50
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import subprocess
import sys
import tempfile

WAYS = ("load", "load-clear", "mmap")


def _memory() -> str:
    """This process's resident and peak-resident memory, in MB."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return f"{fields['VmRSS']:.0f} / {fields['VmHWM']:.0f}"


def _child(path: str, way: str) -> None:
    import onnx
    from onnx import numpy_helper

    print(f"| {way} | start | {_memory()} |")
    if way == "mmap":
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            proto = onnx.ModelProto()
            with memoryview(mapped) as view:
                proto.ParseFromString(view)
            print(f"| {way} | parsed (file still mapped) | {_memory()} |")
    else:
        proto = onnx.load(path)
    print(f"| {way} | parsed | {_memory()} |")
    arrays = []
    for tensor in proto.graph.initializer:
        arrays.append(numpy_helper.to_array(tensor))
        if way == "load-clear":
            tensor.ClearField("raw_data")
    del tensor
    print(f"| {way} | every initializer an array | {_memory()} |")
    del proto
    gc.collect()
    print(f"| {way} | ModelProto dropped | {_memory()} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    args = parser.parse_args()
    import onnx
    from google.protobuf.internal import api_implementation

    from glow_core.model_zoo import MODELS

    print(f"onnx {onnx.__version__}, protobuf implementation {api_implementation.Type()}\n")
    print("| way | after | RSS / peak MB |\n|---|---|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        onnx.save(MODELS[args.model](), path)
        for way in WAYS:
            out = subprocess.run(
                [sys.executable, __file__, "--child", path, way], check=True, capture_output=True, text=True
            )
            print(out.stdout, end="")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        main()

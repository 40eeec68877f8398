"""Time per training epoch: glow-cpu (one thread) vs PyTorch eager (one thread), same network.

    .venv/bin/python bench/train_vs_torch.py [--epochs 7] [--batch 32] [--seed 0]

The network is examples/train_digits.py's LeNet-like CNN, the data scikit-learn's 8x8
digits (the 1347 training images, the last partial batch left out), the optimizer SGD with
momentum 0.9, both starting from the same weights. Epochs alternate between the two
(round-robin in one process, so a change in the machine's load hits both alike); the
figure is the median epoch of each and their ratio (glow / torch: below 1 means glow is
faster). The first glow epoch after compiling is timed like the others: the compile itself
is reported apart. Needs torch (``pip install torch``) and scikit-learn.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.train_digits import digits, lenet
from glow_core import SGD, Trainer


def torch_lenet(weights: dict[str, np.ndarray]):  # -> torch.nn.Module
    """examples/train_digits.py's network in PyTorch, holding ``weights`` (glow's names and
    layouts: convolution filters are [Cout, Cin, kh, kw] in both, dense weights [in, out] in
    glow and [out, in] in torch)."""
    import torch
    from torch import nn

    net = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )
    layers = {"conv1": net[0], "conv2": net[3], "fc1": net[7], "fc2": net[9]}
    with torch.no_grad():
        for name, layer in layers.items():
            w = weights[f"{name}_w"]
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T if name.startswith("fc") else w)))
            layer.bias.copy_(torch.from_numpy(weights[f"{name}_b"]))
    return net


def torch_gradients(
    weights: dict[str, np.ndarray], images: np.ndarray, classes: np.ndarray
) -> dict[str, np.ndarray]:
    """The gradient of the mean cross-entropy at ``weights``, in glow's names and layouts."""
    import torch

    net = torch_lenet(weights)
    loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(images)), torch.from_numpy(classes))
    loss.backward()
    grads = {}
    for name, index in (("conv1", 0), ("conv2", 3), ("fc1", 7), ("fc2", 9)):
        w = net[index].weight.grad.numpy()
        grads[f"{name}_w"] = w.T if name.startswith("fc") else w
        grads[f"{name}_b"] = net[index].bias.grad.numpy()
    return grads


def machine() -> str:
    """``uptime`` and the CPU's model and core count: the load the figure was taken under."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    return f"{model}, {os.cpu_count()} cores; uptime: {uptime}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=7, help="timed epochs of each")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    x_train, _, y_train, _ = digits(args.seed)
    model = lenet(args.batch, rng)
    initial = {c.name: np.array(c.value) for c in model.constants.values()}
    start = time.perf_counter()
    trainer = Trainer(model, optimizer=SGD(0.05, momentum=0.9), backend="cpu", options={"threads": 1})
    trainer.step((x_train[: args.batch], y_train[: args.batch]))
    compile_seconds = time.perf_counter() - start
    net = torch_lenet(initial)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    steps = len(x_train) // args.batch

    def batches(epoch: int):
        order = np.random.default_rng(epoch).permutation(len(x_train))[: steps * args.batch]
        return [(x_train[i], y_train[i]) for i in np.split(order, steps)]

    def glow_epoch(data) -> None:
        for batch in data:
            trainer.step(batch)

    def torch_epoch(data) -> None:
        for images, classes in data:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(images)), torch.from_numpy(classes))
            loss.backward()
            optimizer.step()

    times: dict[str, list[float]] = {"glow-cpu": [], "torch": []}
    for epoch in range(args.epochs + 1):  # epoch 0 warms both up and is not counted
        data = batches(epoch)
        for name, run in (("glow-cpu", glow_epoch), ("torch", torch_epoch)):
            start = time.perf_counter()
            run(data)
            if epoch:
                times[name].append(time.perf_counter() - start)
    glow_s, torch_s = (statistics.median(times[k]) for k in ("glow-cpu", "torch"))
    print(machine())
    print(f"torch {torch.__version__}, one thread each; batch {args.batch}, {steps} steps per epoch")
    print(f"glow-cpu compile (training function, first step): {compile_seconds:.1f} s")
    print("| | median epoch | per step | epochs timed |")
    print("|---|--:|--:|--:|")
    for name, seconds in (("glow-cpu", glow_s), ("torch eager", torch_s)):
        print(f"| {name} | {seconds * 1e3:.1f} ms | {seconds / steps * 1e3:.2f} ms | {args.epochs} |")
    print(f"ratio glow / torch: {glow_s / torch_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

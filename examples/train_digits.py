"""Train a small LeNet-like CNN on scikit-learn's 8x8 digits with glow_core.Trainer.

    python examples/train_digits.py [--backend cpu] [--epochs N] [--batch N] [--seed N] [--export F]

The network (conv 3x3 -> relu -> maxpool -> conv 3x3 -> relu -> maxpool -> dense -> relu ->
dense) starts from weights drawn with ``--seed``, trains with Adam on 75% of the
1797 images, and ends by printing its accuracy on the other 25%: ``test accuracy: 0.9xx``.
Needs scikit-learn (``pip install scikit-learn``: the images ship in its wheel).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from glow_core import Adam, Module, Trainer, progress
from glow_core.graph.node import Node

CLASSES = 10


def lenet(batch: int, rng: np.random.Generator) -> Module:
    """The inference network for ``batch`` images of 1x8x8, weights He-initialized from ``rng``:
    conv 3x3 (16) -> relu -> maxpool 2 -> conv 3x3 (32) -> relu -> maxpool 2 -> dense 64 ->
    relu -> dense 10 (logits)."""

    def weights(name: str, shape: tuple[int, ...], fan_in: int) -> tuple[Node, Node]:
        w = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return b.constant(w, name=f"{name}_w"), b.constant(
            np.zeros(shape[0] if len(shape) == 4 else shape[1], np.float32), name=f"{name}_b"
        )

    module = Module("lenet_digits")
    b = module.create_function().builder()
    x = b.placeholder("images", (batch, 1, 8, 8))
    x = b.Relu(b.conv(x, *weights("conv1", (16, 1, 3, 3), 9), pads=(1, 1, 1, 1)))
    x = b.MaxPool(x, kernel=(2, 2), strides=(2, 2))  # 16 x 4x4
    x = b.Relu(b.conv(x, *weights("conv2", (32, 16, 3, 3), 16 * 9), pads=(1, 1, 1, 1)))
    x = b.MaxPool(x, kernel=(2, 2), strides=(2, 2))  # 32 x 2x2
    x = b.Relu(b.FullyConnected(b.reshape(x, (batch, 128)), *weights("fc1", (128, 64), 128)))
    b.save(b.FullyConnected(x, *weights("fc2", (64, CLASSES), 64)), "logits")
    return module


def digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test images [N, 1, 8, 8] (scaled to [0, 1]) and their class ids, split 75/25
    with every class in both parts in proportion."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("this example needs scikit-learn: pip install scikit-learn")
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_train, x_test, y_train, y_test = train_test_split(
        images, data.target, test_size=0.25, random_state=seed, stratify=data.target
    )
    return x_train, x_test, y_train.astype(np.int64), y_test.astype(np.int64)


def train(backend: str | None, epochs: int, batch: int, seed: int, lr: float = 3e-3) -> tuple[Trainer, float]:
    """Train with Adam, halving the learning rate every 5 epochs; return the trainer and its
    test accuracy, printing one line per epoch."""
    rng = np.random.default_rng(seed)
    x_train, x_test, y_train, y_test = digits(seed)
    trainer = Trainer(lenet(batch, rng), loss="softmax_cross_entropy", optimizer=Adam(lr), backend=backend)
    steps = len(x_train) // batch  # every batch is full: the last partial one is left out
    for epoch in range(1, epochs + 1):
        trainer.learning_rate = lr * 0.5 ** ((epoch - 1) // 5)  # an input: nothing recompiles
        order = rng.permutation(len(x_train))
        batches = ((x_train[idx], y_train[idx]) for idx in np.split(order[: steps * batch], steps))
        progress.step(f"epoch {epoch}/{epochs}")
        start = time.perf_counter()
        loss = trainer.train_epoch(batches, total=steps)
        seconds = time.perf_counter() - start
        accuracy = float(np.mean(np.argmax(trainer.predict(x_test), axis=1) == y_test))
        print(
            f"epoch {epoch:2d}/{epochs}  loss {loss:.4f}  test accuracy {accuracy:.3f}  ({seconds:.1f} s)",
            flush=True,
        )
    return trainer, accuracy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="glow backend (default: the best installed)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's first learning rate")
    parser.add_argument("--export", metavar="PATH", help="write the trained model as ONNX")
    parser.add_argument(
        "--report", action="store_true", help="print the training function's compile figures and stop"
    )
    args = parser.parse_args(argv)
    if args.report:
        trainer = Trainer(
            lenet(args.batch, np.random.default_rng(args.seed)), optimizer=Adam(args.lr), backend=args.backend
        )
        print(trainer.report().as_table(), end="")
        return 0
    from glow_core.commands.progress import shown

    with shown():  # a progress bar per epoch, when stderr is a terminal
        trainer, accuracy = train(args.backend, args.epochs, args.batch, args.seed, args.lr)
    if args.export:
        trainer.export_onnx(args.export)
        print(f"wrote {args.export}")
    print(f"test accuracy: {accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

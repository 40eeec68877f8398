"""Train a small LeNet-like CNN on scikit-learn's 8x8 digits with glow_core.Trainer.

    python examples/train_digits.py [--backend cpu] [--epochs N] [--batch N] [--seed N] [--export F]

The network (conv 3x3 -> relu -> maxpool -> conv 3x3 -> relu -> maxpool -> dense -> relu ->
dense) starts from weights drawn with ``--seed``, trains with SGD + momentum on 75% of the
1797 images, and ends by printing its accuracy on the other 25%: ``test accuracy: 0.9xx``.
Needs scikit-learn (``pip install scikit-learn``: the images ship in its wheel).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from glow_core import SGD, Module, Trainer, progress

CLASSES = 10


def lenet(batch: int, rng: np.random.Generator) -> Module:
    """The inference network for ``batch`` images of 1x8x8, weights He-initialized from ``rng``."""

    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    module = Module("lenet_digits")
    b = module.create_function().builder()
    images = b.placeholder("images", (batch, 1, 8, 8))
    x = b.Relu(b.conv(images, b.constant(he((8, 1, 3, 3), 9), name="conv1_w"),
                      b.constant(np.zeros(8, np.float32), name="conv1_b"), pads=(1, 1, 1, 1)))  # fmt: skip
    x = b.MaxPool(x, kernel=(2, 2), strides=(2, 2))  # 8x4x4
    x = b.Relu(b.conv(x, b.constant(he((16, 8, 3, 3), 72), name="conv2_w"),
                      b.constant(np.zeros(16, np.float32), name="conv2_b"), pads=(1, 1, 1, 1)))  # fmt: skip
    x = b.MaxPool(x, kernel=(2, 2), strides=(2, 2))  # 16x2x2
    x = b.reshape(x, (batch, 64))
    x = b.Relu(
        b.FullyConnected(
            x, b.constant(he((64, 32), 64), name="fc1_w"), b.constant(np.zeros(32, np.float32), name="fc1_b")
        )
    )
    logits = b.FullyConnected(
        x,
        b.constant(he((32, CLASSES), 32), name="fc2_w"),
        b.constant(np.zeros(CLASSES, np.float32), name="fc2_b"),
    )
    b.save(logits, "logits")
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


def train(backend: str | None, epochs: int, batch: int, seed: int, lr: float = 0.05) -> tuple[Trainer, float]:
    """Train and return the trainer and its test accuracy, printing one line per epoch."""
    rng = np.random.default_rng(seed)
    x_train, x_test, y_train, y_test = digits(seed)
    trainer = Trainer(
        lenet(batch, rng), loss="softmax_cross_entropy", optimizer=SGD(lr=lr, momentum=0.9), backend=backend
    )
    steps = len(x_train) // batch  # every batch is full: the last partial one is left out
    for epoch in range(1, epochs + 1):
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
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--export", metavar="PATH", help="write the trained model as ONNX")
    args = parser.parse_args(argv)
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

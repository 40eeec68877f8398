"""Quantize the digits CNN to int8 from a calibration profile; compare its test accuracy with float32.

    python examples/quantize_digits.py [--model digits.onnx] [--backend cpu] [--calibration N] [--seed N]

``--model`` is the network ``examples/train_digits.py --export`` wrote; without it the
network is trained first (15 epochs, as train_digits.py does). The profile is recorded on
``--calibration`` batches of training images (never test images), then the model is compiled
in float32 and in int8 with several schemas and calibration rules, and each compile's
accuracy on all 450 test images is printed with its difference to float32::

    float32                            test accuracy 0.976
    int8 asymmetric per-channel minmax test accuracy 0.976 (+0.000)  10 layer(s) quantized, 0 kept float

Needs scikit-learn (the images ship in its wheel).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

import glow_core
from glow_core.plugins import get_backend
from glow_core.runtime import compile_stages

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_digits import digits, train  # the example beside this one

MODES = {
    "int8 asymmetric per-channel minmax": {"per_channel": True},
    "int8 symmetric per-channel minmax": {"schema": "symmetric", "per_channel": True},
    "int8 asymmetric per-tensor minmax": {},
    "int8 asymmetric per-channel percentile": {"per_channel": True, "calibration": "percentile"},
}
"""Mode name -> the ``glow_core.Quantize`` options it compiles with."""


def accuracy(fn: glow_core.CompiledFunction, images: np.ndarray, labels: np.ndarray, batch: int) -> float:
    """Share of ``images`` classified as ``labels``; the last partial batch is padded with
    repeats of its own rows, and only the real rows count."""
    predicted = []
    for start in range(0, len(images), batch):
        chunk = images[start : start + batch]
        padded = np.concatenate([chunk, np.resize(chunk, (batch - len(chunk), *chunk.shape[1:]))])
        (logits,) = fn.run({"images": padded}).values()
        predicted.append(np.argmax(logits[: len(chunk)], axis=1))
    return float(np.mean(np.concatenate(predicted) == labels))


def compare(
    model: onnx.ModelProto, backend: str | None, calibration: int, seed: int
) -> dict[str, tuple[float, str]]:
    """Test accuracy of the float32 compile and of every int8 mode, by mode name, each with
    what the quantization pass did (which layers became integer)."""
    x_train, x_test, _, y_test = digits(seed)
    batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    batches = [{"images": x_train[i * batch : (i + 1) * batch]} for i in range(calibration)]
    profile = glow_core.profile(model, batches, backend)
    results = {"float32": (accuracy(glow_core.compile(model, backend), x_test, y_test, batch), "")}
    for mode, options in MODES.items():
        precision = glow_core.Quantize(profile, **options)
        fn = glow_core.compile(model, backend, precision=precision)
        report = compile_stages(model, get_backend(backend), precision=precision).precision.quantization
        results[mode] = (accuracy(fn, x_test, y_test, batch), report.summary())
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the ONNX file train_digits.py --export wrote (default: train one)")
    parser.add_argument("--backend", default=None, help="glow backend (default: the best installed)")
    parser.add_argument("--calibration", type=int, default=8, help="training batches profiled")
    parser.add_argument("--seed", type=int, default=0, help="the train/test split (and training) seed")
    args = parser.parse_args(argv)
    if args.model:
        model = onnx.load(args.model)
    else:
        trainer, _ = train(args.backend, epochs=15, batch=32, seed=args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            model = trainer.export_onnx(Path(tmp) / "digits.onnx")
    results = compare(model, args.backend, args.calibration, args.seed)
    width = max(map(len, results))
    reference = results["float32"][0]
    for mode, (value, layers) in results.items():
        delta = "" if mode == "float32" else f" ({value - reference:+.3f})  {layers}"
        print(f"{mode:<{width}} test accuracy {value:.3f}{delta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

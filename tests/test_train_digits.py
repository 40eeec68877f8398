"""examples/train_digits.py end to end: the LeNet-like CNN reaches 97% test accuracy on
scikit-learn's digits, its ONNX export predicts the same classes in onnxruntime, and
examples/quantize_digits.py's int8 compiles of it stay within half a point of float32."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"
QUANTIZE = EXAMPLE.parent / "quantize_digits.py"


@pytest.mark.slow  # the cpu backend compiles the training function first: a minute or two
def test_digits_cnn_reaches_97_percent_and_exports(tmp_path) -> None:
    pytest.importorskip("sklearn")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("glow_cpu")
    exported = tmp_path / "digits.onnx"
    args = ["--backend", "cpu", "--epochs", "15", "--seed", "0", "--export", str(exported)]
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len([line for line in lines if line.startswith("epoch ")]) == 15
    last = re.fullmatch(r"test accuracy: (0\.\d{3}|1\.000)", lines[-1])
    assert last is not None, lines[-3:]
    assert float(last.group(1)) >= 0.97, done.stdout

    # The exported model classifies the test images as the trained trainer did.
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        from train_digits import digits
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    _, x_test, _, y_test = digits(0)
    session = ort.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    batch = session.get_inputs()[0].shape[0]
    rows = len(x_test) // batch * batch
    logits = np.concatenate(
        [session.run(None, {"images": x_test[i : i + batch]})[0] for i in range(0, rows, batch)]
    )
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test[:rows]))
    assert accuracy >= 0.97, accuracy

    # int8 from a profile of training images: every layer integer, accuracy within 0.5 points.
    args = ["--model", str(exported), "--backend", "cpu", "--seed", "0"]
    done = subprocess.run([sys.executable, str(QUANTIZE), *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = dict(re.findall(r"^(.+?)\s+test accuracy (\d\.\d{3})", done.stdout, re.MULTILINE))
    assert set(found) == {"float32", *QUANTIZED_MODES}, done.stdout
    assert abs(float(found["float32"]) - accuracy) < 0.01, done.stdout  # the same model, all 450 images
    for mode in QUANTIZED_MODES:
        assert float(found[mode]) >= float(found["float32"]) - 0.005, done.stdout
    assert done.stdout.count(", 0 kept float") == len(QUANTIZED_MODES), done.stdout


QUANTIZED_MODES = {
    "int8 asymmetric per-channel minmax",
    "int8 symmetric per-channel minmax",
    "int8 asymmetric per-tensor minmax",
    "int8 asymmetric per-channel percentile",
}

"""examples/train_digits.py end to end: the LeNet-like CNN reaches 97% test accuracy on
scikit-learn's digits, and its ONNX export predicts the same classes in onnxruntime."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"


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

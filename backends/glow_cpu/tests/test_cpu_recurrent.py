"""Recurrent layers kept whole on cpu (``kernels/recurrent.py``): one instruction, a loop over
the steps, against onnxruntime (sequence-first layouts) and the interpreter's unrolled
lowering (every layout), for every direction, cell option and ONNX activation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from glow_cpu.backend import CpuBackend
from glow_interpreter.backend import InterpreterBackend
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.accuracy import onnxruntime_outputs, relative_error
from glow_core.frontends.onnx import load_onnx
from glow_core.model_zoo import gru_text, random_inputs
from glow_core.runtime.pipeline import compile_stages

F = TensorProto.FLOAT
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
TOLERANCE = 1e-5


def _layer(op: str, rng: np.random.Generator, dims: tuple[int, int, int, int], **opts) -> tuple:
    """A one-layer model and its feeds: W, R and B as initializers (``weights_as_inputs``:
    as graph inputs), every optional input the options ask for."""
    seq, batch, width, hidden = dims
    direction, layout = opts.get("direction", "forward"), opts.get("layout", 0)
    dirs, gates = 2 if direction == "bidirectional" else 1, GATES[op] * hidden
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    arrays = {
        "x": rng.standard_normal((batch, seq, width) if layout else (seq, batch, width)),
        "w": rng.standard_normal((dirs, gates, width)) * 0.5,
        "r": rng.standard_normal((dirs, gates, hidden)) * 0.5,
        "b": rng.standard_normal((dirs, 2 * gates)) * 0.5,
        "h0": rng.standard_normal(state),
        "c0": rng.standard_normal(state),
        "p": rng.standard_normal((dirs, 3 * hidden)) * 0.5,
    }
    arrays = {name: a.astype(np.float32) for name, a in arrays.items()}
    arrays["lens"] = rng.integers(0 if opts.get("empty_rows") else 1, seq + 1, batch).astype(np.int32)
    names = ["x", "w", "r", "b" if opts.get("bias", True) else "", "lens" if opts.get("lens") else ""]
    names.append("h0" if opts.get("initial") else "")
    if op == "LSTM":
        names += ["c0" if opts.get("initial") else "", "p" if opts.get("peepholes") else ""]
    inputs = ["x", "lens", "h0", "c0"] + (["w", "r"] if opts.get("weights_as_inputs") else [])
    graph_inputs = [n for n in names if n in inputs]
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    given = ("activations", "activation_alpha", "activation_beta", "clip")
    attrs |= {key: opts[key] for key in given if key in opts}
    if op == "GRU":
        attrs["linear_before_reset"] = opts.get("linear_before_reset", 0)
    if op == "LSTM":
        attrs["input_forget"] = opts.get("input_forget", 0)
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph(
        [node],
        "layer",
        [
            helper.make_tensor_value_info(n, TensorProto.INT32 if n == "lens" else F, arrays[n].shape)
            for n in graph_inputs
        ],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
        [numpy_helper.from_array(arrays[n], n) for n in names if n and n not in graph_inputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return model, {n: arrays[n] for n in graph_inputs}


def _cpu_kinds(model: onnx.ModelProto) -> Counter[str]:
    stages = compile_stages(load_onnx(model), CpuBackend(), verify_each=True)
    assert stages.ir is not None
    return Counter(i.kind for i in stages.ir.compute_instrs())


def _check(op: str, model: onnx.ModelProto, feeds: dict, threads: int = 1, ort: bool = True) -> None:
    """Kept as one instruction on cpu; its outputs within tolerance of the interpreter's
    unrolled lowering and (sequence-first) onnxruntime's."""
    kinds = _cpu_kinds(model)
    assert kinds[op] == 1 and kinds["MatMul"] == 0, kinds
    options = {"cache": False, "threads": threads, "parallel_work": 0}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)
    oracles = [glow_core.compile(model, backend=InterpreterBackend()).run(feeds)]
    if ort:
        oracles.append(onnxruntime_outputs(model, feeds))
    for expected in oracles:
        for name, want in expected.items():
            assert got[name].shape == want.shape, name
            assert relative_error(got[name], want) <= TOLERANCE, (name, relative_error(got[name], want))


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru(rng, direction, linear_before_reset):
    opts = {"direction": direction, "linear_before_reset": linear_before_reset, "lens": True, "initial": True}
    model, feeds = _layer("GRU", rng, (7, 3, 5, 20), **opts)
    _check("GRU", model, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("peepholes", "input_forget"), [(False, 0), (True, 0), (True, 1)])
def test_lstm(rng, direction, peepholes, input_forget):
    opts = {"direction": direction, "peepholes": peepholes, "input_forget": input_forget}
    model, feeds = _layer("LSTM", rng, (6, 2, 4, 35), lens=True, initial=True, **opts)
    _check("LSTM", model, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_rnn(rng, direction):
    model, feeds = _layer("RNN", rng, (9, 4, 3, 16), direction=direction, lens=True, initial=True)
    _check("RNN", model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_batch_first_layout(rng, op):
    """layout 1: input, states and outputs batch first (onnxruntime has no such kernels)."""
    opts = {"direction": "bidirectional", "layout": 1, "lens": True, "initial": True, "peepholes": True}
    model, feeds = _layer(op, rng, (5, 3, 4, 6), **opts)
    _check(op, model, feeds, ort=False)


ACTIVATIONS = [
    ("Relu", None, None),
    ("Affine", 0.7, -0.2),
    ("LeakyRelu", 0.3, None),
    ("ScaledTanh", 1.5, 0.5),
    ("HardSigmoid", 0.3, 0.4),
    ("Softsign", None, None),
    ("Softplus", None, None),
    ("Sigmoid", None, None),
    ("Tanh", None, None),
]


@pytest.mark.parametrize(("name", "alpha", "beta"), ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_every_activation_with_clip(rng, name, alpha, beta):
    """An RNN whose forward direction applies ``name`` (alpha/beta by position) and whose
    reverse one applies Tanh, pre-activations clipped."""
    opts = {"direction": "bidirectional", "activations": [name, "Tanh"], "clip": 1.3}
    if alpha is not None or beta is not None:
        opts["activation_alpha"] = [alpha if alpha is not None else 0.01, 0.0]
    if beta is not None:
        opts["activation_beta"] = [beta, 0.0]
    model, feeds = _layer("RNN", rng, (6, 2, 3, 17), initial=True, **opts)
    _check("RNN", model, feeds, ort=name not in ("Affine", "ScaledTanh"))  # removed from onnxruntime


def test_gru_and_lstm_with_other_activations_and_no_bias(rng):
    gru, feeds = _layer(
        "GRU", rng, (5, 2, 3, 9), activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3], bias=False
    )
    _check("GRU", gru, feeds)
    lstm, feeds = _layer(
        "LSTM", rng, (5, 2, 3, 9), activations=["HardSigmoid", "Tanh", "Softsign"], clip=0.8, bias=False
    )
    _check("LSTM", lstm, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_weights_given_as_inputs_are_packed_at_run_time(rng, op):
    opts = {"direction": "bidirectional", "weights_as_inputs": True, "lens": True}
    model, feeds = _layer(op, rng, (4, 2, 6, 19), **opts)
    _check(op, model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_lengths_outside_the_sequence_are_clamped(rng, op):
    """A sequence of length 0 outputs zeros and keeps its initial state; lengths beyond the
    sequence (undefined in ONNX) run the whole sequence and read nothing outside the input:
    the same results as lengths clamped into [0, seq] by the caller."""
    seq = 5
    model, feeds = _layer(op, rng, (seq, 6, 3, 8), direction="bidirectional", lens=True, initial=True)
    feeds["lens"][:3] = [0, seq, seq + 4]
    clamped = {**feeds, "lens": np.minimum(feeds["lens"], seq)}
    options = {"cache": False}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)
    want = glow_core.compile(model, backend=InterpreterBackend()).run(clamped)
    for name in want:
        assert relative_error(got[name], want[name]) <= TOLERANCE, name
    assert not np.any(got["y"][:, :, 0]), "a row of length 0 outputs zeros"
    np.testing.assert_array_equal(got["y_h"][:, 0], feeds["h0"][:, 0])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_directions_split_between_threads_give_the_same_bits(rng, threads):
    model, feeds = _layer("GRU", rng, (8, 2, 6, 24), direction="bidirectional", lens=True, initial=True)
    options = {"cache": False, "parallel_work": 0}
    one = glow_core.compile(model, backend="cpu", options={**options, "threads": 1}).run(feeds)
    many = glow_core.compile(model, backend="cpu", options={**options, "threads": threads}).run(feeds)
    for name in one:
        np.testing.assert_array_equal(one[name], many[name])


def test_compile_does_not_grow_with_the_sequence():
    """gru_text over 8 or 400 steps: the same instructions, one kernel per distinct layer."""
    short, long = (_cpu_kinds(gru_text(seq=seq, layers=2)) for seq in (8, 400))
    assert short == long and short["GRU"] == 2, short


def test_gru_text_matches_onnxruntime(rng):
    model = gru_text(seq=30, layers=3, batch=2)
    inputs = random_inputs(model, seed=int(rng.integers(1 << 30)))
    got = glow_core.compile(model, backend="cpu", options={"cache": False}).run(inputs)
    for name, want in onnxruntime_outputs(model, inputs).items():
        assert relative_error(got[name], want) <= 1e-4, name


def test_a_bundle_runs_the_kept_layers_like_the_jit(registry, tmp_path, rng):
    """A bundle packs W and R by the packer's name when it loads, as the JIT does."""
    model, feeds = _layer("LSTM", rng, (6, 2, 4, 10), direction="bidirectional", lens=True, initial=True)
    options = {"threads": 2, "parallel_work": 0}
    glow_core.bundle(model, tmp_path, name="lstm", options=options, shared=True)
    got = glow_core.load_bundle(tmp_path)["lstm"].run(feeds)
    want = glow_core.compile(model, backend="cpu", options={**options, "cache": False}).run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])

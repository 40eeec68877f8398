"""One generated kernel per distinct piece of work: instructions that do the same work on
different buffers call the same LLVM functions with their own pointers (and their own packed
weights), and ``check_sharing`` proves the shared code is what each would have had alone."""

from __future__ import annotations

import numpy as np
import pytest
from glow_cpu import codegen
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.codegen import SharingError, build_program
from glow_cpu.packing import PACKERS, pack, packed_nbytes

import glow_core
from glow_core.graph import Module
from glow_core.lowering.evaluate import evaluate
from glow_core.model_zoo import gru_text, random_inputs, transformer_encoder
from glow_core.runtime.pipeline import compile_stages


def _repeated_layers(rng: np.random.Generator, layers: int = 4) -> Module:
    """``layers`` x relu(conv3x3(x) + bias), then ``layers`` x tanh(x @ w): same shapes, other weights."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (1, 16, 10, 10))
    y = x
    for i in range(layers):
        w = b.constant(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.12, f"w{i}")
        bias = b.constant(rng.standard_normal(16).astype(np.float32) * 0.1, f"bias{i}")
        y = b.relu(b.conv(y, w, bias, pads=(1, 1, 1, 1)))
    z = b.reshape(y, (16, 100))
    for i in range(layers):
        w = b.constant(rng.standard_normal((100, 100)).astype(np.float32) * 0.1, f"dense{i}")
        z = b.Tanh(b.matmul(z, w))
    b.save(z, "y")
    return m


def _program(module, **options) -> codegen.Program:
    stages = compile_stages(module, CpuBackend())
    return build_program(stages.ir, options.get("threads", 1), False, 0, check_sharing=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_repeated_layers_share_code_and_read_their_own_weights(threads, rng):
    """Each conv and each dense layer has its own weights, packed at compile time: sharing
    the code must not share the packed copy (each instruction passes its own block)."""
    module = _repeated_layers(rng)
    program = _program(module, threads=threads)
    kinds = [kind for _, kind in program.steps]
    # The last convolution's result is reshaped (a view) later: its chain is fused too, in
    # place, since the chain's value stays in the buffer the view reads.
    assert kinds.count("Convolution+Add+Max") == 4
    assert kinds.count("MatMul+Tanh") == 4
    assert program.kernels == len(program.steps) - 3 - 3  # one kernel for 4 convs, one for 4 dense
    # Every weight is read packed only: the constant region does not store the unpacked copy.
    weights = {f"w{i}" for i in range(4)} | {f"dense{i}" for i in range(4)}
    assert weights.isdisjoint(program.layout.constant_offsets)
    x = rng.standard_normal((1, 16, 10, 10)).astype(np.float32)
    options = CpuOptions(threads=threads, parallel_work=0, cache=False)
    got = glow_core.compile(module, backend=CpuBackend(), options=options).run({"x": x})["y"]
    want = evaluate(module, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "model",
    [lambda: gru_text(seq=6, layers=4), lambda: transformer_encoder(layers=2)],
    ids=["gru_text", "transformer_encoder"],
)
def test_zoo_kernels_are_shared_exactly(model):
    """Every instruction that reuses a kernel also emitted alone gives the same code."""
    program = _program(model())
    assert program.kernels < len(program.steps) / 2


def test_check_sharing_catches_a_key_that_misses_what_an_emitter_reads(rng, monkeypatch):
    """A key without the attributes puts a 3x3 and a 1x1 convolution of one shape together:
    the check must refuse that (so its passing on the zoo means something)."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (1, 16, 8, 8))
    w3 = b.constant(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w3")
    w5 = b.constant(rng.standard_normal((16, 16, 5, 5)).astype(np.float32), "w5")
    bias = b.constant(np.zeros(16, np.float32), "bias")
    b.save(b.conv(x, w3, bias, pads=(1, 1, 1, 1)), "a")
    b.save(b.conv(x, w5, bias, pads=(2, 2, 2, 2)), "b")
    real = codegen.kernel_key

    def without_attributes_or_weights(instr, values, args, noalias, fused):
        key = real(instr, values, args, noalias, fused)
        return (key[0], key[4][0])  # the kind and the destination's type only

    monkeypatch.setattr(codegen, "kernel_key", without_attributes_or_weights)
    with pytest.raises(SharingError, match="shares a kernel"):
        _program(m)


def test_gru_text_matches_onnxruntime_on_cpu(registry):
    """Every unrolled step of every direction and layer runs the same few kernels."""
    from glow_core.accuracy import max_relative_error, onnxruntime_outputs

    model = gru_text(seq=12, layers=3)
    inputs = random_inputs(model, seed=5)
    compiled = glow_core.compile(model, backend="cpu", options={"cache": False, "parallel_work": 0})
    error = max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs))
    assert error < 1e-4, f"relative error {error:.3g} against onnxruntime"


@pytest.mark.parametrize(
    ("name", "shape", "params"),
    [
        ("a_panels", (37, 11), {"mr": 6}),
        ("b_panels", (13, 50), {"nr": 16}),
        ("conv_a_panels", (24, 5, 3, 3), {"group": 2, "mr": 5}),
        ("conv_a_panels", (7, 3, 1, 1), {"group": 1, "mr": 4}),
        ("conv_blocked_filter", (64, 32, 3, 3), {"blocks": 2}),
        ("recurrent_panels", (2, 21, 9), {"nr": 16, "start": 7, "stop": 21}),
    ],
)
def test_packed_sizes_match_the_packers(name, shape, params, rng):
    """Code generation places packed weights by size alone, without packing them."""
    assert name in PACKERS
    value = rng.standard_normal(shape).astype(np.float32)
    assert packed_nbytes(name, shape, params) == pack(name, value, params).nbytes


def test_the_key_reads_which_operands_are_known_constants_without_making_them(rng):
    """``kernel_key`` records ``_known_constant`` per operand instead of building each
    constant's array: the two must agree on every operand (constants, views of them,
    placeholders, activations)."""
    stages = compile_stages(_repeated_layers(rng, layers=2), CpuBackend())
    operands = [v for instr in stages.ir.instrs for v, _ in instr.operands]
    flags = [codegen._known_constant(v) for v in operands]
    assert flags == [codegen.constant_value(v) is not None for v in operands]
    assert True in flags and False in flags


def test_attribute_keys_tell_none_apart_from_its_look_alikes():
    """None takes the ``repr`` path of ``_attrs_key`` (a Slice's absent steps): its key must
    differ from a string "None", from the attribute missing, and from the JSON path's."""
    keys = [
        codegen._attrs_key({"steps": None}),
        codegen._attrs_key({"steps": "None"}),
        codegen._attrs_key({}),
        codegen._attrs_key({"steps": None, "scale": 0.5}),  # a float: the JSON path
        codegen._attrs_key({"steps": "None", "scale": 0.5}),
    ]
    assert len(set(keys)) == len(keys)
    assert codegen._attrs_key({"starts": (0, 1), "steps": None}) == codegen._attrs_key(
        {"steps": None, "starts": (0, 1)}
    )


def test_an_operand_span_is_its_address_and_size_found_once_per_value(rng):
    """``_Spans`` memoizes (region, first byte, end byte) by value: each answer must be
    ``address_of`` and the value's size, and asking again must not recompute it."""
    stages = compile_stages(_repeated_layers(rng, layers=2), CpuBackend())
    ir_fn, plan = stages.ir, stages.ir.memory_plan
    spans = codegen._Spans(plan)
    values = [v for i in ir_fn.instrs if i.kind not in codegen.MEMORY_KINDS for v, _ in i.operands]
    for value in values:
        region, offset = codegen.address_of(value, plan)
        assert spans.span(value) == (region, offset, offset + value.type.nbytes)
    assert len(spans) == len({id(v) for v in values})
    first = values[0]
    spans[id(first)] = (9, 9, 9)  # a second ask reads the memo
    assert spans.span(first) == (9, 9, 9)

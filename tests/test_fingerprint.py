"""The IR fingerprint: lossless (every bit of every fact changes it) and deterministic (the
same in every process), so a cache keyed by it cannot hand one function's code to another."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend

from glow_core.errors import VerifyError
from glow_core.graph import Module
from glow_core.ir.fingerprint import encode, ir_fingerprint, serialize_ir
from glow_core.ir.instructions import IRFunction, TensorView, WeightKind, WeightVar, make_copy
from glow_core.runtime.pipeline import compile_stages
from glow_core.types import ElemKind, Type


def _module(factor: float = 1.5, seed: int = 0) -> Module:
    """relu(x @ w + b) * factor, reshaped: constants, a splat attribute, a view."""
    rng = np.random.default_rng(seed)
    m = Module("fp")
    b = m.create_function().builder()
    x = b.placeholder("x", (2, 8))
    w = b.constant(rng.standard_normal((8, 6)).astype(np.float32), "w")
    bias = b.constant(rng.standard_normal(6).astype(np.float32), "bias")
    h = b.relu(b.fully_connected(x, w, bias))
    b.save(b.reshape(b.mul(h, b.splat(factor, h)), (12,)), "y")
    return m


def _weight(ir: IRFunction, name: str) -> WeightVar:
    (found,) = [w for w in ir.weights if w.name == name]
    return found


def _ir(factor: float = 1.5, seed: int = 0) -> IRFunction:
    ir = compile_stages(_module(factor, seed), InterpreterBackend()).ir
    assert ir is not None
    return ir


def test_the_same_function_built_twice_has_one_fingerprint():
    assert serialize_ir(_ir()) == serialize_ir(_ir())
    assert ir_fingerprint(_ir(), {"threads": 4}) == ir_fingerprint(_ir(), {"threads": 4})


def test_fingerprint_is_the_same_in_another_process():
    """No id(), hash() or set order leaks in: another interpreter with another hash seed agrees."""
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from test_fingerprint import _ir
        from glow_core.ir.fingerprint import ir_fingerprint
        print(ir_fingerprint(_ir(), {"options": {"a": 1.5}}))
        """
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    here = os.path.dirname(__file__)
    other = subprocess.run(
        [sys.executable, "-c", code, here], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert other == ir_fingerprint(_ir(), {"options": {"a": 1.5}})


def test_a_float_attribute_is_keyed_by_every_bit():
    """1.5 and 1.500001 print alike to 6 digits; so do 1.5 and the next double after it."""
    base = ir_fingerprint(_ir(1.5))
    assert ir_fingerprint(_ir(1.500001)) != base
    assert ir_fingerprint(_ir(float(np.nextafter(1.5, 2.0)))) != base


@pytest.mark.parametrize(
    "a, b",
    [
        (0.0, -0.0),
        (1, 1.0),
        (1, True),
        (0, False),
        (float("nan"), float("inf")),
        ("1.5", 1.5),
        (("float", "0x1.8000000000000p+0"), 1.5),
        ((1, 2), [1, 2]),
        ((1, 2), (2, 1)),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # an offsets dict's order is the layout
        (np.float32(1.5), 1.5),
        (ElemKind.int8, "int8"),
        (Type((2,), ElemKind.int8, 0.1, 0), Type((2,), ElemKind.int8, 0.1000001, 0)),
        (Type((2, 3)), Type((3, 2))),
        (np.zeros(3, np.float32), np.zeros(3, np.int32)),
        (np.array([1.0, 2.0]), np.array([1.0, 2.0000001])),
    ],
    ids=repr,
)
def test_values_that_differ_encode_differently(a, b):
    assert encode(a) != encode(b)


def test_quantization_scale_is_keyed_exactly():
    """Type's text shows scale with %g: two int8 scales 7 digits apart must still differ."""
    ir = _ir()
    other = _ir()
    weight = _weight(other, "w")
    weight.type = Type(weight.type.shape, ElemKind.int8, 0.1000001, 3)
    _weight(ir, "w").type = Type(weight.type.shape, ElemKind.int8, 0.1, 3)
    assert ir_fingerprint(ir) != ir_fingerprint(other)


def test_view_offset_and_memory_plan_are_keyed():
    base = ir_fingerprint(_ir())
    moved = _ir()
    view = next(i for i in moved.instrs if isinstance(i, TensorView))
    view.offset += 1
    assert ir_fingerprint(moved) != base
    replanned = _ir()
    plan = replanned.memory_plan
    name = next(iter(plan.activations))
    plan.activations[name] = dataclasses.replace(plan.activations[name], offset=plan.arena_bytes)
    assert ir_fingerprint(replanned) != base


def test_constant_values_are_keyed_only_when_asked():
    """Different weights, same code: by default only whether a constant has a value counts;
    a backend that bakes values in names the constants to key by value."""
    assert ir_fingerprint(_ir(seed=0)) == ir_fingerprint(_ir(seed=1))

    def every_constant(weight: WeightVar) -> bool:
        return weight.kind is WeightKind.CONSTANT

    assert ir_fingerprint(_ir(seed=0), constant_values=every_constant) != ir_fingerprint(
        _ir(seed=1), constant_values=every_constant
    )
    no_value = _ir()
    _weight(no_value, "w").value = None
    assert ir_fingerprint(no_value) != ir_fingerprint(_ir())


def test_extra_facts_are_keyed():
    ir = _ir()
    assert ir_fingerprint(ir, {"threads": 1}) != ir_fingerprint(ir, {"threads": 2})
    assert ir_fingerprint(ir, {"glow-cpu": "0.1.0"}) != ir_fingerprint(ir, {"glow-cpu": "0.1.1"})


def test_a_value_without_an_exact_form_is_refused():
    ir = _ir()
    compute = ir.compute_instrs()[0]
    compute.attrs["odd"] = object()
    with pytest.raises(TypeError, match=r"cannot serialize a builtins\.object"):
        serialize_ir(ir)


def test_an_operand_from_another_function_is_refused():
    ir = _ir()
    stranger = WeightVar("stranger", Type((12,)), WeightKind.INPUT)
    ir.instrs.append(make_copy("copy_stranger", _weight(ir, "y"), stranger))
    with pytest.raises(VerifyError, match="uses %stranger, which is not a weight or instruction"):
        serialize_ir(ir)

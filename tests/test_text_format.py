"""The graph and IR text forms: exact, complete, and parsed back to the same function.

Round trips run over every primitive and node example (constants drawn by the declaration's
own sampler, so the data section holds realistic values), over the zoo models, and over the
IR, where the fingerprint's serialization (every field of every instruction and weight, and
the constants' bytes) must come back identical too.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import glow_core
from glow_core.errors import TextParseError
from glow_core.graph import Module
from glow_core.graph.printer import function_to_text
from glow_core.ir.fingerprint import serialize_ir
from glow_core.ir.printer import ir_to_text
from glow_core.model_zoo import LARGE_MODELS, MODELS
from glow_core.plugins import get_backend
from glow_core.runtime.pipeline import compile_stages, load_model
from glow_core.spec import NODES, PRIMITIVES, OpSpec
from glow_core.types import ElemKind, Type

SMALL_MODELS = [name for name in MODELS if name not in LARGE_MODELS]


def _example_cases(registry: dict[str, OpSpec]) -> list:
    return [
        pytest.param(spec, example, id=f"{name}-{index}")
        for name, spec in registry.items()
        for index, example in enumerate(spec.examples)
    ]


def _example_module(spec: OpSpec, example, rng: np.random.Generator) -> Module:
    """The example as a one-node function: operand 0 a placeholder, the others constants."""
    types = example.types()
    attrs = spec.complete_attrs(example.attrs)
    arrays = spec.sample_inputs(rng, types, attrs)
    module = Module(f"example_{spec.name}")
    b = module.create_function("main").builder()
    operands = [b.placeholder("in0", types[0].shape, types[0].elem)] if types else []
    operands += [b.constant(a, name=f"in{i}", dtype=a.dtype) for i, a in enumerate(arrays[1:], 1)]
    b.save(b.create(spec.name, *operands, **example.attrs), "out")
    return module


def _assert_round_trip(text: str) -> None:
    again = function_to_text(glow_core.parse_function(text))
    assert again == text


@pytest.mark.parametrize(("spec", "example"), _example_cases(PRIMITIVES))
def test_every_primitive_example_round_trips(spec: OpSpec, example, rng) -> None:
    _assert_round_trip(function_to_text(_example_module(spec, example, rng).function))


@pytest.mark.parametrize(("spec", "example"), _example_cases(NODES))
def test_every_node_example_round_trips(spec: OpSpec, example, rng) -> None:
    _assert_round_trip(function_to_text(_example_module(spec, example, rng).function))


def test_every_declaration_has_an_example_to_round_trip() -> None:
    """The two tests above cover every kind: none is skipped for lack of an example."""
    assert [name for name, spec in {**PRIMITIVES, **NODES}.items() if not spec.examples] == []


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_zoo_models_round_trip_as_graph_and_ir(name: str, interpreter, rng) -> None:
    """Imported and lowered graphs print, parse and print identically; the optimized IR
    comes back with every fact the compile cache keys by (constant bytes included)."""
    module = load_model(MODELS[name](seed=int(rng.integers(1 << 30))))
    _assert_round_trip(function_to_text(module.function))
    stages = compile_stages(module, get_backend(interpreter), stop_before="plan-memory")
    _assert_round_trip(function_to_text(stages.function))
    text = ir_to_text(stages.ir)
    parsed = glow_core.parse_ir(text)
    assert ir_to_text(parsed) == text
    every_constant = lambda weight: True  # noqa: E731 - hash every constant's bytes
    assert serialize_ir(parsed, every_constant) == serialize_ir(stages.ir, every_constant)


def test_floats_are_exact_in_attributes_types_and_data() -> None:
    """Values that print alike at 6 digits stay apart, and odd floats come back bit for bit."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (2, 3))
    odd = np.array([1.500001, -0.0, np.inf, -np.inf, np.nan, 1e-45], np.float32)  # 1e-45: subnormal
    c = b.constant(odd.reshape(2, 3), name="odd")
    y = b.Clip(b.Add(x, c), low=-1.0000001, high=math.inf)
    b.save(b.Mul(y, b.splat(1.5000001, y)), "y")
    text = function_to_text(m.function)
    assert "low=-1.0000001" in text and "1.5000001" in text
    parsed = glow_core.parse_function(text)
    got = parsed.module.constants["odd"].value
    assert got.dtype == np.float32 and got.tobytes() == odd.reshape(2, 3).tobytes()
    clip = next(parsed.nodes_of("Clip"))
    assert clip.attrs["low"] == -1.0000001 and clip.attrs["high"] == math.inf
    _assert_round_trip(text)


def test_int_float_and_bool_attributes_stay_distinct() -> None:
    """Splat value 1, 1.0 and True are three different attributes, and stay three."""
    m = Module()
    b = m.create_function().builder()
    for name, value, elem in (("i", 1, "int32"), ("f", 1.0, "float32"), ("t", True, "bool")):
        b.save(b.create("Splat", name=f"splat_{name}", value=value, elem=elem, shape=(2,)), name)
    parsed = glow_core.parse_function(function_to_text(m.function))
    values = {n.name: n.attrs["value"] for n in parsed.nodes_of("Splat")}
    assert [(v, type(v)) for v in values.values()] == [(1, int), (1.0, float), (True, bool)]


def test_quantized_scale_is_exact_in_the_type() -> None:
    t = Type((4,), ElemKind.int8, scale=0.1 + 1e-12, offset=-3)
    text = str(t)
    assert "scale=0.100000000001" in text
    from glow_core.text_syntax import parse_type

    assert parse_type(text) == t


def test_odd_names_are_quoted_and_read_back() -> None:
    m = Module()
    b = m.create_function("main graph").builder()
    x = b.placeholder('in "x", 1', (3,))
    b.save(b.create("Tanh", x, name="layer 1/tanh,0"), "out=1")
    text = function_to_text(m.function)
    assert '%"layer 1/tanh,0" = Tanh %"in \\"x\\", 1"' in text
    parsed = glow_core.parse_function(text)
    assert parsed.name == "main graph"
    _assert_round_trip(text)


SMALL_TEXT = """
function main
  %x = placeholder : f32<2x3>
  %y = output : f32<3x2>
  %w = constant : f32<2x3>
  %sum = Add %x, %w
  %t = Transpose %sum {shuffle=(1,0)}
  %act = Clip %t {low=0.0, high=6.0}
  %save_y = Save %act, %y
data
  %w = [1.0, -2.0, 3.5, 0.25, 7.0, -0.5]
"""


def test_a_hand_written_graph_compiles_and_runs(interpreter, rng) -> None:
    """Types and default attributes may be left out; the result runs like numpy says."""
    fn = glow_core.parse_function(SMALL_TEXT)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w = np.array([[1.0, -2.0, 3.5], [0.25, 7.0, -0.5]], np.float32)
    got = glow_core.compile(fn.module, backend=interpreter).run({"x": x})["y"]
    np.testing.assert_allclose(got, np.clip((x + w).T, 0.0, 6.0), rtol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("%sum = Add %x, %w", "line 6: %sum is defined twice"),
        ("%t = Transpose %sum {shuffle=(1,0)} : f32<2x3>", "written f32<2x3> but its operands give f32<3x2>"),
        ("%t = Transpose %nope {shuffle=(1,0)}", "%nope is read before it is defined"),
        ("%t = Frobnicate %sum", "no operator kind 'Frobnicate'"),
        ("%t = Transpose %sum {shuffle=(1,0), spin=2}", "unknown attribute"),
        ("%t = Transpose %sum {shuffle=(1,0)", "expected"),
    ],
)
def test_bad_text_names_the_line_and_the_problem(change: str, message: str) -> None:
    lines = SMALL_TEXT.strip().splitlines()
    if change.startswith("%sum"):
        lines.insert(5, "  " + change)
    else:
        lines[5] = "  " + change
    with pytest.raises(TextParseError, match=re.escape(message)):
        glow_core.parse_function("\n".join(lines))


def test_missing_or_extra_data_is_refused() -> None:
    without = SMALL_TEXT.split("data")[0]
    with pytest.raises(TextParseError, match="no data for constant"):
        glow_core.parse_function(without)
    with pytest.raises(TextParseError, match="5 values for f32<2x3>"):
        glow_core.parse_function(SMALL_TEXT.replace("7.0, -0.5", "7.0"))
    with pytest.raises(TextParseError, match="not a constant"):
        glow_core.parse_function(SMALL_TEXT + "  %x = [1.0]\n")


PREDICATED_TEXT = """
function main
  %x = placeholder : f32<3>
  %p = placeholder : bool<1>
  %y = output : f32<3>
  %e = Exp %x if %p
  %save_y = Save %e, %y if %p
"""


def test_predicates_round_trip_in_graph_and_ir(interpreter) -> None:
    """``if %p`` on a node, ``@pred %p`` on its instruction: both read back to the same."""
    fn = glow_core.parse_function(PREDICATED_TEXT)
    assert {n.kind: n.predicate.name for n in fn.nodes} == {"Exp": "p", "Save": "p"}
    _assert_round_trip(function_to_text(fn))
    ir = compile_stages(fn.module, get_backend(interpreter), stop_before="plan-memory").ir
    text = ir_to_text(ir)
    assert "@pred %p" in text
    assert serialize_ir(glow_core.parse_ir(text)) == serialize_ir(ir)

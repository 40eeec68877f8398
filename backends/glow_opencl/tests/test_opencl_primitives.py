"""Every primitive, compiled alone for OpenCL, against its float64 numpy reference.

Cases are the declared examples (retyped to every integer kind the backend claims) plus odd
sizes that hit the edges of the tiled kernels (partial tiles in M, N and K, both GEMM
kernels, every convolution path).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from glow_opencl.codegen import supported_kinds
from glow_opencl.runtime import BASE_KINDS, default_target

import glow_core
from glow_core.accuracy import relative_error
from glow_core.errors import ShapeError
from glow_core.graph import Module
from glow_core.spec import PRIMITIVES, ex
from glow_core.types import ElemKind, Type

TOLERANCE = 1e-5
_TARGET = default_target(None)
SUPPORTS = {  # with float64 on cl_khr_fp64; the int8 layers (high-level nodes): test_opencl_int8.py
    k: v for k, v in supported_kinds(_TARGET.kinds if _TARGET else BASE_KINDS).items() if k in PRIMITIVES
}

ODD = {
    "Add": [ex("f32[3,7,13]", "f32[3,7,13]")],
    "Exp": [ex("f32[1000]")],
    "Max": [ex("f32[5,11]", "f32[5,11]")],
    "MatMul": [
        ex("f32[37,29]", "f32[29,41]"),  # tiled: partial tiles in M, N and K
        ex("f32[130,70]", "f32[70,67]"),  # 4x4 register blocks, partial edges
        ex("f32[64,64]", "f32[64,128]"),  # exact tiles: no guards at all
        ex("f32[3,300]", "f32[300,70]"),  # skinny, K not a multiple of its tile
        ex("f32[9,5]", "f32[5,3]"),  # just above the skinny limit
    ],
    "BatchMatMul": [ex("f32[3,17,33]", "f32[3,33,65]"), ex("f32[2,1,40]", "f32[2,40,9]")],
    "Convolution": [
        ex("f32[2,3,13,11]", "f32[20,3,3,3]", strides=(2, 2), pads=(1, 0, 2, 1)),
        ex("f32[1,24,7,7]", "f32[40,24,1,1]"),  # pointwise: a plain GEMM over pixels
        ex("f32[1,12,9,9]", "f32[12,1,3,3]", pads=(1, 1, 1, 1), group=12),  # depthwise
        ex("f32[2,8,16,16]", "f32[8,1,3,3]", pads=(1, 1, 1, 1), group=8),  # whole vector rows
        ex(  # depthwise with stride and dilation: per-lane gathers, a partial last block
            "f32[1,6,11,13]", "f32[6,1,5,5]", strides=(2, 2), dilations=(1, 2), pads=(2, 3, 1, 2), group=6
        ),
        ex("f32[1,4,10,10]", "f32[6,4,5,5]", dilations=(2, 1), pads=(2, 2, 2, 2)),
        ex("f32[1,8,6,6]", "f32[36,4,3,3]", strides=(1, 2), group=2),
    ],
    "MaxPool": [ex("f32[1,3,11,13]", kernel=(3, 2), strides=(2, 3), pads=(1, 1, 0, 1))],
    "AvgPool": [ex("f32[2,3,9,7]", kernel=(2, 3), strides=(2, 2), pads=(1, 1, 1, 1))],
    "ReduceSum": [ex("f32[3,5,7,2]", axes=(1, 3)), ex("f32[1000]", axes=(0,))],
    "ReduceMax": [ex("f32[3,5,7]", axes=(0, 1))],
    "Transpose": [ex("f32[3,5,7]", shuffle=(2, 0, 1))],
    "Slice": [ex("f32[7,9]", starts=(6, 1), ends=(-1, 8), steps=(-3, 2))],
    "Concat": [ex("f32[2,3,5]", "f32[2,1,5]", "f32[2,4,5]", axis=1)],
    "Pad": [ex("f32[3,5,2]", pads=(0, 2, 1, 3, 0, 1), value=2.5)],
    "Gather": [ex("f32[4,7,3]", "i32[2,3]", axis=1), ex("f32[9,2]", "i64[5]", axis=0)],
    "Broadcast": [ex("f32[1,1,5]", shape=(3, 4, 5))],
    "Convert": [ex("f32[13]", elem="int8"), ex("f32[9]", elem="bool"), ex("i32[7]", elem="int64")],
    "TopK": [ex("f32[3,300]", k=40), ex("f32[4,5,6]", k=5, axis=1, largest=False)],
    "ScatterElements": [
        ex("f32[6,5,4]", "i64[3,5,2]", "f32[3,5,2]", axis=1, reduction="max"),
        ex("f32[300]", "i32[1000]", "f32[1000]", reduction="add"),  # many duplicates, in order
    ],
}


def _cases() -> list[Any]:
    """Declared examples as they are, and the first one retyped to each other element kind the
    backend claims (the kind that selects the kernel: the result's, or ``kind_operand``'s);
    odd sizes in float32 only."""
    cases = []
    for name in sorted(SUPPORTS):
        spec = PRIMITIVES[name]
        claimed = [ElemKind.parse(k) for k in SUPPORTS[name]]
        seen: set[str] = set()
        for index, example in enumerate([*spec.examples, *ODD.get(name, [])]):
            retypes = [None, *claimed] if index == 0 else [None]  # other kinds: first example
            for elem in retypes:
                attrs = dict(example.attrs)
                if name == "Splat":
                    attrs["elem"] = (elem or ElemKind.float32).name
                types = example.types(elem)
                try:
                    result = spec.infer_type(types, spec.complete_attrs(attrs))
                except ShapeError:
                    continue
                selecting = spec.selecting_kind(result, types)
                if selecting not in claimed or (elem is not None and selecting is not elem):
                    continue
                label = "_".join(f"{t.elem.value}{'x'.join(map(str, t.shape))}" for t in types)
                label = f"{label or result.elem.value}-{index}"
                if label not in seen:
                    seen.add(label)
                    cases.append(pytest.param(name, types, attrs, id=f"{name}[{label}]"))
    return cases


def _inputs(name: str, types: list[Type], attrs: dict, rng: np.random.Generator) -> list[np.ndarray]:
    """The declaration's own sampling: valid indices, nonzero divisors, no wrapped negatives."""
    spec = PRIMITIVES[name]
    return spec.sample_inputs(rng, types, spec.complete_attrs(attrs))


def run_alone(backend, name: str, types: list[Type], attrs: dict, arrays: list[np.ndarray], **options):
    """(OpenCL result, float64 reference) of one primitive compiled as a whole function."""
    m = Module()
    b = m.create_function().builder()
    inputs = [b.placeholder(f"x{i}", t.shape, t.elem) for i, t in enumerate(types)]
    b.save(b.create(name, *inputs, **attrs), "out")
    compiled = glow_core.compile(m, backend=backend, options=options, verify_each=True)
    got = compiled.run({f"x{i}": a for i, a in enumerate(arrays)})["out"]
    spec = PRIMITIVES[name]
    return got, np.asarray(spec.evaluate(arrays, spec.complete_attrs(attrs)))


@pytest.mark.parametrize(("name", "types", "attrs"), _cases())
def test_primitive_matches_reference(backend, name, types, attrs, rng):
    arrays = _inputs(name, types, attrs, rng)
    got, expected = run_alone(backend, name, types, attrs, arrays)
    assert got.shape == expected.shape
    if got.dtype.kind == "f":
        assert relative_error(got, expected) < TOLERANCE
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))


GEMM_CASES = [c for c in _cases() if c.values[0] in ("MatMul", "BatchMatMul", "Convolution")]


@pytest.mark.parametrize(("name", "types", "attrs"), GEMM_CASES)
def test_other_gemm_kernel_shape(backend, name, types, attrs, rng):
    """The GEMM kernels this device does not pick by itself (the GPU's local-memory tiles on a
    CPU, the CPU's SIMD blocks on a GPU) are right too."""
    from glow_opencl.runtime import select_device

    other = "tiled" if select_device().target.gemm == "vector" else "vector"
    arrays = _inputs(name, types, attrs, rng)
    got, expected = run_alone(backend, name, types, attrs, arrays, gemm=other)
    assert relative_error(got, expected) < TOLERANCE


def test_every_primitive_has_a_case():
    assert {c.values[0] for c in _cases()} == set(SUPPORTS)


def test_every_primitive_in_the_tables_runs_on_every_device_for_float32_and_its_integer_kinds():
    """Each primitive the emitter tables list (today every one), float32 wherever declared,
    and every 8- to 64-bit integer and bool kind the declaration allows outside GEMM,
    convolution, pooling and float maths. A primitive the tables leave out is refused at
    compile time and counted unsupported by conformance, so a new primitive in the core
    needs no edit here (docs/new-primitive.md)."""
    every_device = {k: v for k, v in supported_kinds(BASE_KINDS).items() if k in PRIMITIVES}
    assert set(every_device) == set(SUPPORTS)
    for name in every_device:
        spec = PRIMITIVES[name]
        kinds = set(every_device[name])
        if ElemKind.float32 in spec.kinds:
            assert "float32" in kinds, name
        if spec.elementwise and name != "Pow" and ElemKind.int16 in spec.kinds:
            assert {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"} <= kinds, name


@pytest.mark.parametrize("largest", [True, False])
def test_topk_keeps_index_order_on_ties_and_ranks_nan_above_numbers(backend, largest):
    x = np.array([[2.0, np.nan, 2.0, -1.0, 5.0, 2.0, np.nan, -1.0]], np.float32)
    attrs = {"k": 8, "axis": 1, "largest": largest}
    got, expected = run_alone(backend, "TopK", [Type((1, 8))], attrs, [x])
    np.testing.assert_array_equal(got, expected)
    # NaN above every number (first of the largest, last of the smallest), lower index first
    nans = list(got[0, :2]) if largest else list(got[0, -2:])
    assert nans == [1, 6]


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_applies_duplicates_in_order(backend, reduction, rng):
    """Every index hits one of 3 slots many times: the last write wins, reductions combine in
    order; negative indices count from the end."""
    data = rng.standard_normal((4, 3)).astype(np.float32)
    updates = rng.uniform(0.5, 1.5, (4, 40)).astype(np.float32)
    indices = rng.integers(-3, 3, (4, 40)).astype(np.int64)
    types = [Type((4, 3)), Type((4, 40), ElemKind.int64), Type((4, 40))]
    attrs = {"axis": 1, "reduction": reduction}
    got, expected = run_alone(backend, "ScatterElements", types, attrs, [data, indices, updates])
    assert relative_error(got, expected) < TOLERANCE


def test_integer_division_by_zero_gives_zero_instead_of_trapping(backend):
    x = np.array([7, -7, 5, -128, 0, 100], np.int8)
    y = np.array([2, 2, 0, -1, 0, -3], np.int8)
    with np.errstate(all="ignore"):  # the reference itself divides by zero
        got, _ = run_alone(backend, "Div", [Type((6,), ElemKind.int8)] * 2, {}, [x, y])
    np.testing.assert_array_equal(got, np.array([3, -3, 0, -128, 0, -33], np.int8))


def test_scalar_and_nan_semantics(backend):
    """Max/Min propagate NaN as numpy does (fmax would drop it); rank-0 tensors work."""
    x = np.array([np.nan, 1.0, -2.0, np.nan], np.float32)
    y = np.array([0.0, np.nan, 3.0, np.nan], np.float32)
    t = [Type((4,)), Type((4,))]
    for name in ("Max", "Min"):
        got, expected = run_alone(backend, name, t, {}, [x, y])
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_equal(got[2], expected[2])
    got, expected = run_alone(backend, "Exp", [Type(())], {}, [np.array(0.5, np.float32)])
    assert got.shape == () and relative_error(got, expected) < TOLERANCE


def test_operand_kinds_no_kernel_reads_are_refused_at_compile_time(backend):
    """The core checks result kinds; a Convert from bfloat16 has a float32 result."""
    from glow_core.errors import UnsupportedOpError

    m = Module()
    b = m.create_function().builder()
    b.save(b.Convert(b.placeholder("x", (3,), ElemKind.bfloat16), elem="float32"), "y")
    with pytest.raises(UnsupportedOpError, match="cannot run Convert 'convert' on bfloat16"):
        glow_core.compile(m, backend=backend)


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": (1, 1, 1, 1)},
        {"strides": (2, 2), "pads": (3, 3, 2, 2)},  # stride 2, a 7x7 window, uneven pads
        {"group": 2, "dilations": (2, 1), "pads": (0, 1, 2, 0)},
    ],
)
def test_convolution_with_a_constant_filter(backend, attrs, rng):
    """A constant filter is repacked at compile time for the CPU's channel-vector kernel."""
    kernel = (7, 7) if attrs.get("strides") else (3, 3)
    x = rng.standard_normal((2, 8, 11, 9)).astype(np.float32)
    w = rng.standard_normal((16, 8 // attrs.get("group", 1), *kernel)).astype(np.float32)
    m = Module()
    b = m.create_function().builder()
    b.save(b.create("Convolution", b.placeholder("x", x.shape), b.constant(w, "w"), **attrs), "out")
    got = glow_core.compile(m, backend=backend).run({"x": x})["out"]
    spec = PRIMITIVES["Convolution"]
    expected = spec.evaluate([x, w], spec.complete_attrs(attrs))
    assert relative_error(got, expected) < TOLERANCE


def test_float64_is_refused_where_the_device_lacks_cl_khr_fp64(backend):
    """float64 kernels are generated only for a device with the extension; others refuse at
    compile time and name the missing extension."""
    import dataclasses

    from glow_opencl.codegen import generate
    from glow_opencl.runtime import select_device

    from glow_core.errors import UnsupportedOpError
    from glow_core.runtime.pipeline import compile_stages

    runtime = select_device()
    if not runtime.target.fp64:
        pytest.skip("this device has no cl_khr_fp64: the core already refuses float64")
    m = Module()
    b = m.create_function().builder()
    b.save(b.Exp(b.placeholder("x", (3,), ElemKind.float64)), "y")
    ir = compile_stages(m, backend).ir
    without = dataclasses.replace(runtime.target, fp64=False)
    with pytest.raises(UnsupportedOpError, match=r"on float64 \(the device lacks cl_khr_fp64\)"):
        generate(ir, without)

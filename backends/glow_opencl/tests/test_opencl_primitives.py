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
from glow_opencl.runtime import BASE_KINDS

import glow_core
from glow_core.accuracy import relative_error
from glow_core.errors import ShapeError
from glow_core.graph import Module
from glow_core.spec import PRIMITIVES, ex
from glow_core.types import ElemKind, Type

TOLERANCE = 1e-5
SUPPORTS = supported_kinds(BASE_KINDS)  # what every device runs (float16 needs cl_khr_fp16)

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
    spec = PRIMITIVES[name]
    if spec.sample is not None:
        return list(spec.sample(rng, *types, **spec.complete_attrs(attrs)))
    out = []
    for t in types:
        if t.elem.is_float:
            out.append(rng.standard_normal(t.shape).astype(t.dtype))
        elif t.elem is ElemKind.bool:
            out.append(rng.integers(0, 2, t.shape).astype(bool))
        else:
            out.append(rng.integers(-50, 50, t.shape).astype(t.dtype))
    return out


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

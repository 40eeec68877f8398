"""Footprint: the packed constant region is the one copy of each weight once compiled.

``glow_core.compile`` drops the graph before code generation and the backend drops each IR
constant after its last copy into the region (``IRFunction.release_constants``); packers
write into the region without full-size intermediates (``packing.WRITERS``). These tests
check the structure (what is still referenced), never time or RSS figures (those are in
``bench/rss_stages.py`` and docs/performance.md).
"""

from __future__ import annotations

import gc
import itertools
import threading
import types

import llvmlite.binding as llvm
import numpy as np
import pytest
from glow_cpu.codegen import build_program
from glow_cpu.packing import WRITERS, pack, pack_into, packed_nbytes
from glow_cpu.runtime import constant_region
from glow_cpu.winograd_transforms import VARIANTS
from llvmlite import ir as llvm_ir

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.graph.function import Module
from glow_core.graph.node import Node
from glow_core.ir.instructions import IRFunction, WeightKind, WeightVar
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import choose_backend, compile_stages, load_model

pytest.importorskip("onnxruntime")

_OPTIONS = {"threads": 1, "cache": False}

_WRITER_CASES = {
    "winograd_filter": [
        ((40, 20, 3, 3), {"m": 4, "nr": 16, "cin_padded": 24}),
        ((64, 64, 3, 3), {"m": 2, "nr": 32, "cin_padded": 64}),
        ((3, 5, 3, 3), {"m": 4, "nr": 16, "cin_padded": 8}),
    ],
    "conv_blocked_filter": [((64, 32, 3, 3), {"blocks": 2}), ((32, 16, 1, 1), {"blocks": 1})],
    "a_panels": [((20, 7), {"mr": 6}), ((24, 5), {"mr": 8}), ((3, 4), {"mr": 8})],
    "conv_a_panels": [
        ((30, 4, 3, 3), {"group": 1, "mr": 8}),
        ((12, 2, 1, 1), {"group": 3, "mr": 3}),
        ((10, 3, 3, 3), {"group": 2, "mr": 4}),
    ],
}


def test_every_writer_is_covered_here():
    assert set(WRITERS) == set(_WRITER_CASES)


@pytest.mark.parametrize(
    "name,shape,params", [(n, s, p) for n, cases in _WRITER_CASES.items() for s, p in cases]
)
def test_writing_in_place_gives_the_packers_bytes(rng, name, shape, params):
    value = rng.standard_normal(shape).astype(np.float32)
    out = np.full(packed_nbytes(name, shape, params), 0xA5, np.uint8)  # garbage where unwritten
    pack_into(name, value, params, out)
    assert np.array_equal(out, pack(name, value, params).reshape(-1).view(np.uint8))
    # And both are the layout the kernels read, built here another way (float64 oracle).
    expected = _ORACLES[name](value.astype(np.float64), **params)
    got = out.view(np.float32).astype(np.float64)
    assert got.shape == expected.shape
    assert np.max(np.abs(got - expected)) <= 2**-22 * np.max(np.abs(expected))


def _winograd_oracle(filter: np.ndarray, m: int, nr: int, cin_padded: int) -> np.ndarray:
    """Per position (a, b): U^T = (G g G^T)[a, b]^T, zero rows to ``cin_padded``, in column
    panels of ``nr`` (padded with zero columns), k-major inside a panel."""
    g = np.asarray(VARIANTS[m].g, np.float64)
    cout, cin = filter.shape[:2]
    panels = -(-cout // nr)
    blocks = []
    for a, b in itertools.product(range(VARIANTS[m].alpha), repeat=2):
        ut = np.zeros((cin_padded, panels * nr))
        for o, c in itertools.product(range(cout), range(cin)):
            ut[c, o] = g[a] @ filter[o, c] @ g[b]
        blocks.append(np.stack([ut[:, p * nr : (p + 1) * nr] for p in range(panels)]).reshape(-1))
    return np.concatenate(blocks)


def _blocked_oracle(filter: np.ndarray, blocks: int) -> np.ndarray:
    """[Cout/(16 blocks), Cin/16, kh, kw, 16 in, blocks, 16 out], element by element."""
    cout, cin, kh, kw = filter.shape
    out = np.empty((cout // (16 * blocks), cin // 16, kh, kw, 16, blocks, 16))
    for index in np.ndindex(out.shape):
        tile, cblock, y, x, ci, block, co = index
        out[index] = filter[(tile * blocks + block) * 16 + co, cblock * 16 + ci, y, x]
    return out.reshape(-1)


def _a_panels_oracle(a: np.ndarray, mr: int) -> np.ndarray:
    """[ceil(M/mr), K, mr], element by element, zeros past row M."""
    m, k = a.shape
    out = np.zeros((-(-m // mr), k, mr))
    for panel, column, row in np.ndindex(out.shape):
        if panel * mr + row < m:
            out[panel, column, row] = a[panel * mr + row, column]
    return out.reshape(-1)


def _conv_a_panels_oracle(filter: np.ndarray, group: int, mr: int) -> np.ndarray:
    """Each group's [Cout/g, Cin/g * kh * kw] matrix as row panels, group after group."""
    per_group = filter.reshape(group, filter.shape[0] // group, -1)
    return np.concatenate([_a_panels_oracle(w, mr) for w in per_group])


_ORACLES = {
    "winograd_filter": _winograd_oracle,
    "conv_blocked_filter": _blocked_oracle,
    "a_panels": _a_panels_oracle,
    "conv_a_panels": _conv_a_panels_oracle,
}


def _ir(name: str) -> IRFunction:
    backend, _ = choose_backend("cpu", None)
    return compile_stages(load_model(MODELS[name]()), backend).ir


@pytest.mark.parametrize("name", ["mlp", "resnet_bottleneck", "mobilenetv2_block"])
def test_released_constants_leave_the_same_region_and_none_in_the_ir(name):
    ir = _ir(name)
    layout = build_program(ir, 1, False).layout
    kept = constant_region(ir, layout)
    constants = [w for w in ir.weights if w.kind is WeightKind.CONSTANT]
    assert all(w.value is not None for w in constants), "without the flag nothing is released"
    ir.release_constants = True
    released = constant_region(ir, layout)
    assert np.array_equal(kept, released)
    assert [w.name for w in constants if w.value is not None] == []


def _reachable(root: object, limit: int = 200_000) -> list[object]:
    """Objects reachable from ``root`` through references, not entering modules, classes or
    functions (whose globals reach the whole process)."""
    seen: dict[int, object] = {id(root): root}
    todo = [root]
    skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)
    while todo and len(seen) < limit:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) not in seen and not isinstance(ref, skip):
                seen[id(ref)] = ref
                todo.append(ref)
    return list(seen.values())


def _owner(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test_the_compiled_function_holds_no_graph_ir_llvm_module_or_unpacked_weight():
    model = MODELS["resnet_bottleneck"]()
    compiled = glow_core.compile(model, backend="cpu", options=_OPTIONS)
    reachable = _reachable(compiled)
    held = (IRFunction, WeightVar, Node, Module, llvm_ir.Module)
    assert [type(o).__name__ for o in reachable if isinstance(o, held)] == []
    # MCJIT's engine owns one module: the empty one it was created with (the code is an object).
    modules = [o for o in reachable if isinstance(o, llvm.ModuleRef)]
    assert [list(m.functions) for m in modules] == [[]] * len(modules)
    assert [len(o) for o in reachable if isinstance(o, str | bytes) and len(o) > 1 << 16] == []
    # The only big arrays are the constant region and one run's placeholders and activations.
    big = {id(_owner(a)) for a in reachable if isinstance(a, np.ndarray) and a.nbytes >= 1 << 14}
    regions = [compiled.constants, *(a for a in _reachable(compiled.states) if isinstance(a, np.ndarray))]
    assert id(_owner(compiled.constants)) in big
    assert big <= {id(_owner(r)) for r in regions}, "an array beside the regions (an unpacked weight?)"


def test_a_module_compiles_again_after_its_weights_were_released_and_runs_from_threads(rng):
    model = MODELS["resnet_bottleneck"]()
    module = load_model(model)  # what a session keeps to specialize again
    inputs = random_inputs(model, seed=5)
    expected = onnxruntime_outputs(model, inputs)
    first = glow_core.compile(module, backend="cpu", options=_OPTIONS)
    # The caller's module is the compile's source: its constants must stay whole.
    assert all(c.value is not None for c in module.constants.values())
    second = glow_core.compile(module, backend="cpu", options=_OPTIONS)
    results: list[dict[str, np.ndarray]] = []

    def run(fn) -> None:
        for _ in range(3):
            results.append(fn.run(inputs))

    threads = [threading.Thread(target=run, args=(fn,)) for fn in (first, second, first)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 9
    for got in results:
        assert all(np.abs(v).max() > 0 for v in got.values())
        assert max_relative_error(got, expected) < 1e-4


def test_stages_kept_for_dumps_keep_the_graph_and_the_weights():
    backend, options = choose_backend("cpu", _OPTIONS)
    stages = compile_stages(load_model(MODELS["mlp"]()), backend, options=options)
    assert stages.compiled is not None and stages.module is not None and stages.function is not None
    assert all(w.value is not None for w in stages.ir.weights if w.kind is WeightKind.CONSTANT)

"""Counted loops for llvmlite's IRBuilder (llvmlite has none; after numba's cgutils).

Every loop is a plain counted loop with a phi index in i64: the shape LLVM's vectorizer and
unroller recognize, so element-wise kernels written as scalar loops over contiguous memory
come out as 512-bit vector code. Kernels already written as explicit vector code build their
loops under ``explicit_vector_loops``: LLVM's unroller and loop vectorizer are told to leave
those loops alone, which saves compile time and changes nothing at run time.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def i64(value: int) -> ir.Constant:
    """An i64 constant (indices and byte offsets are i64 everywhere)."""
    return ir.Constant(I64, value)


def i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def as_i64(b: ir.IRBuilder, value: ir.Value | int) -> ir.Value:
    """``value`` as an i64 value (Python ints become constants)."""
    return i64(value) if isinstance(value, int) else value


def float_at(b: ir.IRBuilder, ptr: ir.Value, elements: ir.Value | int) -> ir.Value:
    """The pointer ``elements`` floats past ``ptr``."""
    return b.gep(ptr, [as_i64(b, elements)], source_etype=F32)


def shuffle_mask(lanes: Sequence[int]) -> ir.Constant:
    """A ``shufflevector`` lane-index constant for 16-lane vectors."""
    return vector_constant(I32, tuple(int(lane) for lane in lanes))


def vector_constant(element: ir.Type, lanes: tuple[Hashable, ...] | None, count: int = 16) -> ir.Constant:
    """The vector constant of ``lanes`` (values of ``element``), or of ``count`` zeros for
    None, made once per process and reused by every instruction that needs it.

    llvmlite builds a vector constant as one constant per lane and formats every lane each
    time an instruction using it is printed; a ``Constant`` caches its own text, so reusing
    the object is what saves the work (a fifth of the Python emission of ResNet-50's
    Winograd and blocked kernels, docs/performance.md). The text is exactly what a fresh
    constant prints. Floats are keyed by their bits (0.0 and -0.0 differ).
    """
    if lanes is None:
        return _vector_constant(str(element), element, count, None, None)
    key = tuple(v.hex() if isinstance(v, float) else v for v in lanes)
    return _vector_constant(str(element), element, len(lanes), key, lanes)


def undefined_vector(element: ir.Type, count: int = 16) -> ir.Constant:
    """``undef`` of ``<count x element>``, made once per process (see ``vector_constant``)."""
    return _undefined_vector(str(element), element, count)


@functools.lru_cache(maxsize=4096)
def _vector_constant(
    element_text: str, element: ir.Type, count: int, key: tuple | None, lanes: tuple | None
) -> ir.Constant:
    return ir.Constant(ir.VectorType(element, count), None if lanes is None else list(lanes))


@functools.lru_cache(maxsize=64)
def _undefined_vector(element_text: str, element: ir.Type, count: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(element, count), ir.Undefined)


@contextmanager
def for_range(
    b: ir.IRBuilder,
    stop: ir.Value | int,
    start: ir.Value | int = 0,
    step: int = 1,
    name: str = "i",
    vectorize: bool = True,
) -> Iterator[ir.Value]:
    """``for i in range(start, stop, step)`` (step > 0); the body is built inside the ``with``.

    The trip test sits at the top, so an empty range runs no iteration. ``vectorize=False``
    tells LLVM's loop vectorizer to leave the loop alone (``scalar_loop_id``); within
    ``explicit_vector_loops`` its unroller too.
    """
    start_v, stop_v = as_i64(b, start), as_i64(b, stop)
    entry = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    index = b.phi(I64, name=name)
    index.add_incoming(start_v, entry)
    b.cbranch(b.icmp_signed("<", index, stop_v), body, done)
    b.position_at_end(body)
    yield index
    latch = b.block
    index.add_incoming(b.add(index, i64(step), flags=["nsw"]), latch)
    back_edge = b.branch(head)
    _mark_loop(back_edge, name, vectorize)
    b.position_at_end(done)


_T = TypeVar("_T")


@contextmanager
def set_within(var: contextvars.ContextVar[_T], value: _T) -> Iterator[None]:
    """``var`` holds ``value`` within the block and its earlier value after: how the backend
    hands the emitters a setting for one program (an option, the int8 dot product chosen,
    these loop hints) without passing it through every call."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


_EXPLICIT_VECTORS = contextvars.ContextVar("glow_cpu_explicit_vector_loops", default=False)


def explicit_vector_loops() -> AbstractContextManager[None]:
    """Loops built within the block hold explicit vector code (register tiles, Winograd
    transforms, 16-lane blocked rows): LLVM's unroller and loop vectorizer have nothing
    to add there but compile time, so each such loop says so in its metadata
    (``scalar_loop_id``). On ResNet-50's convolution modules this cut LLVM's time by about
    a fifth with the same run time (docs/performance.md); element-wise and depthwise kernels,
    written as scalar loops, keep both (MobileNetV2 ran 5% slower without them)."""
    return set_within(_EXPLICIT_VECTORS, True)


def scalar_code_loops() -> AbstractContextManager[None]:
    """Loops built within the block are scalar code for LLVM to vectorize and unroll, even
    inside ``explicit_vector_loops``: a fused element-wise pass a convolution runs after its
    explicit vector products."""
    return set_within(_EXPLICIT_VECTORS, False)


def _mark_loop(back_edge: ir.Instruction, name: str, vectorize: bool) -> None:
    """Loop metadata on a loop's back edge: the vectorizer off where ``vectorize`` is False,
    the vectorizer and unroller off within ``explicit_vector_loops``."""
    explicit = _EXPLICIT_VECTORS.get()
    if explicit or not vectorize:
        back_edge.set_metadata("llvm.loop", scalar_loop_id(back_edge.module, name, unroll=not explicit))


def scalar_loop_id(module: ir.Module, name: str, unroll: bool = True) -> ir.MDValue:
    """Loop metadata that keeps LLVM's loop vectorizer off one loop (and its unrollers, where
    ``unroll`` is False): for loops of a few iterations that vectorizing cannot speed up,
    such as a pooling window's taps, where LLVM 20's vectorizer (llvmlite 0.50, built with
    assertions) aborts the process planning a float16 MaxPool's window (its VPlan and legacy
    cost models disagree), and for loops of explicit vector code (``explicit_vector_loops``).
    A loop ID is a node whose first operand is itself, one per loop (the name and count make
    it new)."""
    no_vectors = [ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 0)]
    options = [module.add_metadata(no_vectors)]
    if not unroll:
        options.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    unique = ir.MetaDataString(module, f"glow.loop.{name}.{len(module.metadata)}")
    loop_id = module.add_metadata([unique, *options])
    loop_id.operands = (loop_id, *options)  # llvmlite has no self-reference: set it once made
    return loop_id


@contextmanager
def loop_nest(b: ir.IRBuilder, shape: Sequence[int], name: str = "d") -> Iterator[list[ir.Value]]:
    """Nested counted loops over ``shape`` (outermost first), yielding the index list."""
    with _nest(b, list(shape), [], name) as indices:
        yield indices


@contextmanager
def _nest(b: ir.IRBuilder, shape: list[int], outer: list[ir.Value], name: str) -> Iterator[list[ir.Value]]:
    if not shape:
        yield outer
        return
    with (
        for_range(b, shape[0], name=f"{name}{len(outer)}") as index,
        _nest(b, shape[1:], [*outer, index], name) as indices,
    ):
        yield indices


def linear_index(b: ir.IRBuilder, indices: Sequence[ir.Value], strides: Sequence[int]) -> ir.Value:
    """``sum(index * stride)`` in i64; zero strides (broadcast dims) are skipped."""
    total: ir.Value | None = None
    for index, stride in zip(indices, strides, strict=True):
        if stride == 0:
            continue
        term = index if stride == 1 else b.mul(index, i64(stride), flags=["nsw"])
        total = term if total is None else b.add(total, term, flags=["nsw"])
    return i64(0) if total is None else total


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous row-major tensor of ``shape``."""
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def carried_loop(
    b: ir.IRBuilder,
    lo: ir.Value,
    hi: ir.Value,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
) -> list[ir.Value]:
    """``for i in range(lo, hi): values = body(i, values)``, the values carried in phis (registers)."""
    entry = b.block
    head = b.append_basic_block("k.head")
    loop = b.append_basic_block("k.body")
    done = b.append_basic_block("k.end")
    b.branch(head)
    b.position_at_end(head)
    index = b.phi(I64)
    index.add_incoming(lo, entry)
    phis = []
    for value in init:
        phi = b.phi(value.type)
        phi.add_incoming(value, entry)
        phis.append(phi)
    b.cbranch(b.icmp_signed("<", index, hi), loop, done)
    b.position_at_end(loop)
    new = body(index, list(phis))
    latch = b.block
    index.add_incoming(b.add(index, i64(1)), latch)
    for phi, value in zip(phis, new, strict=True):
        phi.add_incoming(value, latch)
    _mark_loop(b.branch(head), "k", vectorize=True)
    b.position_at_end(done)
    return list(phis)

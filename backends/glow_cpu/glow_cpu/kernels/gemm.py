"""A register-blocked float32 GEMM generator: C[m, n] = A[m, K] B[K, n], specialized to shapes.

The micro-kernel keeps an ``mr x nr`` tile of C in ``mr * nr/16`` zmm accumulators; each
step of k broadcasts ``mr`` values of A and loads ``nr/16`` vectors of B, then issues one
``<16 x float>`` ``llvm.fma`` per accumulator. Around it: blocks of K small enough that the
B panel stays in L1, then the n panels (split between threads), then the m panels.

One description covers the plain and the convolution cases. k runs as ``outer x taps``: the
address of B row ``k = o * T + t`` is ``b_panel + o * b_outer + taps[t]``. A plain matrix has
one tap; a convolution on its padded, phase-split input has one tap per filter position, so
the input is read in place (an implicit GEMM, no im2col). With taps the row offsets come from
a constant table indexed by k, which keeps the k loop one small body. A constant operand is packed into
panels at compile time (``packing.a_panels`` / ``b_panels``), zero-padded to whole panels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.loops import F32, I1, I32, I64, PTR, carried_loop, for_range, i32, i64

KC = 256  # k steps per block: a 256 x 32 float panel of B is 32 KiB (L1)


@dataclass(frozen=True)
class Gemm:
    """Where A, B and C are and how to walk them; all strides in float elements."""

    m: int
    n: int
    outer: int
    taps: tuple[int, ...]
    a: ir.Value
    a_panel: int  # between consecutive mr-row panels of A
    a_row: int  # between rows inside a panel
    a_k: int  # between consecutive k
    b: ir.Value
    b_panel: int  # between consecutive nr-column panels of B
    b_outer: int  # between consecutive outer steps of k
    b_padded: bool  # reading a whole last panel is safe (packed or padded scratch)
    c: ir.Value
    ldc: int
    mr: int
    nr: int
    # Applied to each finished result vector: (row, column, vector, lanes) -> vector.
    epilogue: Callable[[ir.Value, ir.Value, ir.Value, int], ir.Value] | None = None
    row_table: ir.Value | None = None  # i32 offset of every B row k, when there are taps

    @property
    def depth(self) -> int:
        return self.outer * len(self.taps)


def tile_for(m: int, n: int) -> tuple[int, int]:
    """(mr, nr): 12 x 32 (24 of the 32 zmm registers accumulate) in general, measured best
    of 8x32, 12x32, 14x32, 6x64, 4x64 and 8x48 on ResNet-50 layers (docs/performance.md);
    rows x 64 for skinny products (a GEMV is bound by loading B anyway)."""
    if m < 4:
        return max(m, 1), 64 if n > 32 else 32
    if m <= 8:
        return m, 32
    return 12, 32


def emit_gemm(k: Kernel, g: Gemm, split: bool = True) -> None:
    """The whole product into ``g.c``; with ``split`` the panels are shared among threads."""
    b = k.b
    k.work = max(k.work, g.m * g.n * g.depth // VECTOR)
    n_full, n_rest = divmod(g.n, g.nr)
    m_full, m_rest = divmod(g.m, g.mr)
    n_panels, m_panels = n_full + (n_rest > 0), m_full + (m_rest > 0)
    split_n = n_panels >= m_panels
    j_range = k.split(n_panels) if split and split_n else (i64(0), i64(n_panels))
    i_range = k.split(m_panels) if split and not split_n else (i64(0), i64(m_panels))
    if len(g.taps) > 1:
        g = dataclasses.replace(g, row_table=_row_table(k, g))
    kc = KC
    blocks = -(-g.depth // kc)

    def block(lo: ir.Value, hi: ir.Value, flags: tuple[ir.Value | bool, ir.Value | bool]) -> None:
        with for_range(b, j_range[1], j_range[0], name="jp") as jp:
            _columns(k, g, jp, i_range, lo, hi, flags, (n_full, n_rest, m_full, m_rest))

    if blocks == 1:
        block(i64(0), i64(g.depth), (True, True))
        return
    with for_range(b, blocks, name="kb") as kb:
        lo = b.mul(kb, i64(kc))
        hi = b.add(lo, i64(kc))
        hi = b.select(b.icmp_signed("<", hi, i64(g.depth)), hi, i64(g.depth))
        block(lo, hi, (b.icmp_signed("==", kb, i64(0)), b.icmp_signed("==", kb, i64(blocks - 1))))


def _row_table(k: Kernel, g: Gemm) -> ir.Value:
    """A constant table of the B row offset of every k (``o * b_outer + taps[t]``): the k
    loop stays one small body instead of one copy per filter tap."""
    offsets = [o * g.b_outer + tap for o in range(g.outer) for tap in g.taps]
    table_type = ir.ArrayType(I32, len(offsets))
    table = ir.GlobalVariable(k.module, table_type, f"{k.name}.rows{len(k.module.globals)}")
    table.linkage = "internal"
    table.global_constant = True
    table.initializer = ir.Constant(table_type, [ir.Constant(I32, v) for v in offsets])
    return k.b.inttoptr(k.b.ptrtoint(table, I64), PTR)


def _columns(
    k: Kernel,
    g: Gemm,
    jp: ir.Value,
    i_range: tuple[ir.Value, ir.Value],
    lo: ir.Value,
    hi: ir.Value,
    flags: tuple[ir.Value | bool, ir.Value | bool],
    counts: tuple[int, int, int, int],
) -> None:
    n_full, n_rest, m_full, m_rest = counts
    b = k.b

    def rows(nr: int) -> None:
        with for_range(b, i_range[1], i_range[0], name="ip") as ip:
            if m_rest == 0:
                _tile(k, g, ip, jp, g.mr, nr, lo, hi, flags)
                return
            with b.if_else(b.icmp_signed("<", ip, i64(m_full))) as (full, partial):
                with full:
                    _tile(k, g, ip, jp, g.mr, nr, lo, hi, flags)
                with partial:
                    _tile(k, g, ip, jp, m_rest, nr, lo, hi, flags)

    if n_rest == 0:
        rows(g.nr)
        return
    with b.if_else(b.icmp_signed("<", jp, i64(n_full))) as (full, partial):
        with full:
            rows(g.nr)
        with partial:
            rows(n_rest)


def _tile(
    k: Kernel,
    g: Gemm,
    ip: ir.Value,
    jp: ir.Value,
    mr: int,
    nr: int,
    lo: ir.Value,
    hi: ir.Value,
    flags: tuple[ir.Value | bool, ir.Value | bool],
) -> None:
    """One mr x nr tile of C over k in [lo, hi)."""
    b = k.b
    a_base = b.gep(g.a, [b.mul(ip, i64(g.a_panel))], source_etype=F32)
    b_base = b.gep(g.b, [b.mul(jp, i64(g.b_panel))], source_etype=F32)
    row0 = b.mul(ip, i64(g.mr))
    c_base = b.gep(g.c, [b.add(b.mul(row0, i64(g.ldc)), b.mul(jp, i64(g.nr)))], source_etype=F32)
    nv = -(-nr // VECTOR)
    masks = [_mask(min(VECTOR, nr - v * VECTOR)) for v in range(nv)]
    load_masks = [None] * nv if g.b_padded else masks
    zero = ir.Constant(F32X16, None)

    def step(kk: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        out = list(accs)
        if g.row_table is None:
            row = b.add(b.mul(kk, i64(g.b_outer)), i64(g.taps[0]))
        else:
            row = b.sext(b.load(b.gep(g.row_table, [kk], source_etype=I32), typ=I32), I64)
        b_row = b.gep(b_base, [row], source_etype=F32)
        vectors = [
            _load(k, b.gep(b_row, [i64(v * VECTOR)], source_etype=F32), load_masks[v]) for v in range(nv)
        ]
        a_col = b.gep(a_base, [b.mul(kk, i64(g.a_k))], source_etype=F32)
        for r in range(mr):
            scalar = b.load(b.gep(a_col, [i64(r * g.a_row)], source_etype=F32), typ=F32)
            splat = _splat(b, scalar)
            for v in range(nv):
                out[r * nv + v] = _fma(k, splat, vectors[v], out[r * nv + v])
        return out

    accs = carried_loop(b, lo, hi, [zero] * (mr * nv), step)
    col0 = b.mul(jp, i64(g.nr))
    for r in range(mr):
        for v in range(nv):
            ptr = b.gep(c_base, [i64(r * g.ldc + v * VECTOR)], source_etype=F32)
            lanes = min(VECTOR, nr - v * VECTOR)
            where = (b.add(row0, i64(r)), b.add(col0, i64(v * VECTOR)), lanes)
            _store_tile(k, g, ptr, accs[r * nv + v], masks[v], flags, where)


def _store_tile(
    k: Kernel,
    g: Gemm,
    ptr: ir.Value,
    value: ir.Value,
    mask: ir.Constant | None,
    flags: tuple[ir.Value | bool, ir.Value | bool],
    where: tuple[ir.Value, ir.Value, int],
) -> None:
    """Store one result vector: added to the partial sums of earlier K blocks, and through
    the epilogue after the last block (selects, not branches: C is valid memory anyway)."""
    b = k.b
    first, last = flags
    if first is not True:
        value = b.select(first, value, b.fadd(_load(k, ptr, mask), value))
    if g.epilogue is not None:
        done = g.epilogue(*where[:2], value, where[2])
        value = done if last is True else b.select(last, done, value)
    _store(k, ptr, value, mask)


def _mask(lanes: int) -> ir.Constant | None:
    if lanes >= VECTOR:
        return None
    return ir.Constant(ir.VectorType(I1, VECTOR), [ir.Constant(I1, int(i < lanes)) for i in range(VECTOR)])


def _splat(b: ir.IRBuilder, scalar: ir.Value) -> ir.Value:
    vector = b.insert_element(ir.Constant(F32X16, ir.Undefined), scalar, i32(0))
    return b.shuffle_vector(
        vector, ir.Constant(F32X16, ir.Undefined), ir.Constant(ir.VectorType(I32, VECTOR), None)
    )


def _fma(k: Kernel, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    return k.b.call(k.intrinsic("llvm.fma.v16f32", F32X16, [F32X16] * 3), [x, y, acc])


def _load(k: Kernel, ptr: ir.Value, mask: ir.Constant | None) -> ir.Value:
    if mask is None:
        return k.b.load(ptr, typ=F32X16, align=4)
    fn = k.intrinsic("llvm.masked.load.v16f32.p0", F32X16, [ptr.type, I32, mask.type, F32X16])
    return k.b.call(fn, [ptr, i32(4), mask, ir.Constant(F32X16, None)])


def _store(k: Kernel, ptr: ir.Value, value: ir.Value, mask: ir.Constant | None) -> None:
    if mask is None:
        k.b.store(value, ptr, align=4)
        return
    fn = k.intrinsic("llvm.masked.store.v16f32.p0", ir.VoidType(), [F32X16, ptr.type, I32, mask.type])
    k.b.call(fn, [value, ptr, i32(4), mask])


def vector_load(k: Kernel, ptr: ir.Value, lanes: int = VECTOR) -> ir.Value:
    """``lanes`` floats at ``ptr`` as a ``<16 x float>`` (masked when fewer than 16)."""
    return _load(k, ptr, _mask(lanes))


def vector_store(k: Kernel, ptr: ir.Value, value: ir.Value, lanes: int = VECTOR) -> None:
    _store(k, ptr, value, _mask(lanes))


def splat(b: ir.IRBuilder, scalar: ir.Value) -> ir.Value:
    return _splat(b, scalar)


def fma(k: Kernel, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    return _fma(k, x, y, acc)

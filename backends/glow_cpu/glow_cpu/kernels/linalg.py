"""MatMul and BatchMatMul on the GEMM generator; a constant operand is packed at compile time."""

from __future__ import annotations

import dataclasses

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, emits
from glow_cpu.kernels.chain import epilogue_pass, tile_epilogue
from glow_cpu.kernels.gemm import emit_gemm
from glow_cpu.kernels.gemm_shape import Gemm, tile_for
from glow_cpu.loops import F32, for_range, i64

F32_ONLY = frozenset({ElemKind.float32})


def matrix_gemm(
    k: Kernel,
    m: int,
    depth: int,
    n: int,
    pointers: tuple[ir.Value, ir.Value, ir.Value],
    constants: tuple[int | None, int | None] = (None, None),
) -> Gemm:
    """The Gemm of ``c[m, n] = a[m, depth] b[depth, n]`` (row-major); ``constants`` names the
    operand index of A or B when it is a weight, which is then packed into panels."""
    a, b, c = pointers
    mr, nr = tile_for(m, n, packed_a=constants[0] is not None, accumulators=k.accumulators)
    if constants[0] is not None:
        a = k.pack(constants[0], "a_panels", mr=mr)
        a_panel, a_row, a_k = depth * mr, 1, mr
    else:
        a_panel, a_row, a_k = mr * depth, depth, 1
    if constants[1] is not None:
        b = k.pack(constants[1], "b_panels", nr=nr)
        b_panel, b_outer, padded = depth * nr, nr, True
    else:
        b_panel, b_outer, padded = nr, n, False
    return Gemm(
        m=m,
        n=n,
        outer=depth,
        taps=(0,),
        a=a,
        a_panel=a_panel,
        a_row=a_row,
        a_k=a_k,
        b=b,
        b_panel=b_panel,
        b_outer=b_outer,
        b_padded=padded,
        c=c,
        ldc=n,
        mr=mr,
        nr=nr,
    )


@emits("MatMul", kinds=F32_ONLY)
def emit_matmul(k: Kernel) -> None:
    dest, (lhs, rhs) = k.dest, k.sources
    m, depth = lhs.shape
    n = rhs.shape[1]
    constants = (
        1 if lhs.value is not None and rhs.value is None else None,
        2 if rhs.value is not None else None,
    )
    gemm = matrix_gemm(k, m, depth, n, (lhs.ptr, rhs.ptr, dest.ptr), constants)
    epilogue = tile_epilogue(k, dest.shape, [], 0, i64(0)) if k.epilogue else None
    emit_gemm(k, dataclasses.replace(gemm, epilogue=epilogue))
    if k.epilogue and epilogue is None:
        epilogue_pass(k)


@emits("BatchMatMul", kinds=F32_ONLY)
def emit_batch_matmul(k: Kernel) -> None:
    """One GEMM per batch entry; parts take whole entries when there are enough of them
    (at least one per part, ``Kernel.parts``), else each GEMM is split. A fused chain (an
    attention's scale) is applied as each entry's tiles store."""
    dest, (lhs, rhs) = k.dest, k.sources
    batch, m, depth = lhs.shape
    n = rhs.shape[2]
    b = k.b
    k.work = batch * m * n * depth // 16
    by_entry = batch >= k.parts
    fused = bool(k.epilogue) and tile_epilogue(k, dest.shape, [(0, i64(0))], 1, i64(0)) is not None
    start, stop = k.split(batch) if by_entry else (i64(0), i64(batch))
    with for_range(b, stop, start, name="batch") as e:
        pointers = tuple(
            b.gep(t.ptr, [b.mul(e, i64(size))], source_etype=F32)
            for t, size in ((lhs, m * depth), (rhs, depth * n), (dest, m * n))
        )
        gemm = matrix_gemm(k, m, depth, n, pointers)  # type: ignore[arg-type]
        epilogue = tile_epilogue(k, dest.shape, [(0, e)], 1, i64(0)) if fused else None
        emit_gemm(k, dataclasses.replace(gemm, epilogue=epilogue), split=not by_entry)
    if k.epilogue and not fused:
        epilogue_pass(k)

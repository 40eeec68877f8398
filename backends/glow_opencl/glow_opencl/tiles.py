"""GEMM kernels shaped for GPUs: work-group tiles staged in local memory.

A problem is ``C[z] (M x N) = A[z] (M x K) @ B[z] (K x N)`` over a batch index ``z``; a
``Gemm`` carries the C text that loads one element of A or B and addresses C, so MatMul,
BatchMatMul and (implicit-GEMM) Convolution share these kernels (``gemm.py`` builds them).

- ``tiled`` (M > 8): a work-group of T x T work-items computes a TM x TN tile of C, each
  work-item an RM x RN register block (strided by T so local reads are conflict-free and
  global stores coalesced). A and B tiles (TK deep) are staged in local memory by all
  work-items, consecutive work-items loading consecutive addresses (coalesced).
- ``skinny`` (M <= 8: batch-1 dense layers, depthwise convolutions): one work-item per
  column n holds all M accumulators; A's TK-wide strip is shared through local memory and
  B is streamed from global memory, consecutive work-items reading consecutive columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glow_opencl.runtime import Target
from glow_opencl.source import Kernel, Param, round_up, store

Loader = Callable[[str, str, str], list[str]]  # (row, col, variable) -> statements
# (W, whether all W lanes are in range) -> (statements before the k loop, statements setting
# the floatW ``bv`` = B[k, n .. n+W) inside it); see simd.py
VectorLoader = Callable[[int, bool], tuple[list[str], list[str]]]
TK = 16  # depth of a tile step
SKINNY_M = 8
SKINNY_GROUP = 64
SKINNY_TK = 32


@dataclass
class Gemm:
    """One batched GEMM problem, with the C text that loads A and B and addresses C."""

    hint: str
    m: int
    n: int
    k: int
    batch: int
    params: list[Param]
    values: list
    prelude: list[str]  # runs first, with the batch index in ``z``: moves base pointers
    load_a: Loader  # (m, k, v): statements setting v = A[m, k]; only called in bounds
    load_b: Loader  # (k, n, v): statements setting v = B[k, n]; only called in bounds
    c_index: Callable[[str, str], str]  # C's rows are contiguous in n (vector stores rely on it)
    b_row: Callable[[str, str], str] | None = None  # &B[k, n] when B's rows are dense in memory
    row_len: int = 0  # n runs in rows of this length (0: one row); vector blocks never straddle
    vector_b: VectorLoader | None = None  # the vector kernel's B[k, n .. n+W) when b_row cannot do


def _blocks(size: int) -> int:
    """Register block (1, 2 or 4) so that a tile covers ``size`` with little waste."""
    return 1 if size <= 16 else 2 if size <= 32 else 4


def _guard(*conditions: tuple[str, int, int]) -> str:
    """``if (...)`` for (index, bound, tile) triples whose bound the tile does not divide."""
    needed = [f"{index} < {bound}" for index, bound, tile in conditions if bound % tile]
    return f"if ({' && '.join(needed)}) " if needed else ""


def tiled_kernel(g: Gemm, target: Target) -> Kernel:
    """The local-memory tiled kernel (see the module docstring)."""
    t = 16 if target.max_work_group_size >= 256 else 8
    rm, rn = _blocks(g.m), _blocks(g.n)
    tm, tn = t * rm, t * rn
    lines = [
        "const int tx = get_local_id(0); const int ty = get_local_id(1);",
        f"const int n0 = get_group_id(0) * {tn}; const int m0 = get_group_id(1) * {tm};",
        "const int z = get_group_id(2);",
        *g.prelude,
        f"__local float As[{TK}][{tm + 1}];",  # +1: the transposed store is bank-conflict free
        f"__local float Bs[{TK}][{tn}];",
        *(f"float acc{r}_{c} = 0.0f;" for r in range(rm) for c in range(rn)),
        f"const int t = ty * {t} + tx;",
        f"for (int k0 = 0; k0 < {g.k}; k0 += {TK}) {{",
        f"    for (int e = t; e < {tm * TK}; e += {t * t}) {{",
        f"        const int row = e / {TK}; const int kk = e % {TK};",
        "        const int gm = m0 + row; const int gk = k0 + kk;",
        "        float v = 0.0f;",
        f"        {_guard(('gm', g.m, tm), ('gk', g.k, TK))}{{ {' '.join(g.load_a('gm', 'gk', 'v'))} }}",
        "        As[kk][row] = v;",
        "    }",
        f"    for (int e = t; e < {TK * tn}; e += {t * t}) {{",
        f"        const int kk = e / {tn}; const int col = e % {tn};",
        "        const int gk = k0 + kk; const int gn = n0 + col;",
        "        float v = 0.0f;",
        f"        {_guard(('gk', g.k, TK), ('gn', g.n, tn))}{{ {' '.join(g.load_b('gk', 'gn', 'v'))} }}",
        "        Bs[kk][col] = v;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    #pragma unroll 4",
        f"    for (int kk = 0; kk < {TK}; ++kk) {{",
        *(f"        const float a{r} = As[kk][ty + {t * r}];" for r in range(rm)),
        *(f"        const float b{c} = Bs[kk][tx + {t * c}];" for c in range(rn)),
        *(f"        acc{r}_{c} = fma(a{r}, b{c}, acc{r}_{c});" for r in range(rm) for c in range(rn)),
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "}",
    ]
    elem = g.params[0].elem
    for r in range(rm):
        for c in range(rn):
            gm, gn = f"(m0 + ty + {t * r})", f"(n0 + tx + {t * c})"
            guard = _guard((gm, g.m, tm), (gn, g.n, tn))
            lines.append(f"{guard}{store('d', elem, g.c_index(gm, gn), f'acc{r}_{c}')}")
    groups = (round_up(g.n, tn) // tn * t, round_up(g.m, tm) // tm * t, g.batch)
    return Kernel(g.hint, g.params, g.values, lines, groups, (t, t, 1))


def skinny_kernel(g: Gemm, target: Target) -> Kernel:
    """One work-item per column, all M <= 8 rows in registers (see the module docstring)."""
    wg = min(SKINNY_GROUP, target.max_work_group_size)
    tk = SKINNY_TK
    lines = [
        "const int n = get_global_id(0); const int lid = get_local_id(0);",
        "const int z = get_group_id(1);",
        *g.prelude,
        f"__local float As[{g.m}][{tk}];",
        *(f"float acc{r} = 0.0f;" for r in range(g.m)),
        f"for (int k0 = 0; k0 < {g.k}; k0 += {tk}) {{",
        f"    for (int e = lid; e < {g.m * tk}; e += {wg}) {{",
        f"        const int row = e / {tk}; const int gk = k0 + e % {tk};",
        "        float v = 0.0f;",
        f"        {_guard(('gk', g.k, tk))}{{ {' '.join(g.load_a('row', 'gk', 'v'))} }}",
        f"        As[row][e % {tk}] = v;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        f"    {_guard(('n', g.n, wg))}{{",
        f"        for (int kk = 0; kk < {tk}; ++kk) {{",
        "            const int gk = k0 + kk;",
        "            float bv = 0.0f;",
        f"            {_guard(('gk', g.k, tk))}{{ {' '.join(g.load_b('gk', 'n', 'bv'))} }}",
        *(f"            acc{r} = fma(As[{r}][kk], bv, acc{r});" for r in range(g.m)),
        "        }",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "}",
    ]
    elem = g.params[0].elem
    guard = _guard(("n", g.n, wg))
    lines += [f"{guard}{store('d', elem, g.c_index(str(r), 'n'), f'acc{r}')}" for r in range(g.m)]
    return Kernel(g.hint, g.params, g.values, lines, (round_up(g.n, wg), g.batch), (wg, 1))

"""MatMul, BatchMatMul and Convolution as batched GEMMs.

A convolution is an *implicit* GEMM per image and group: A is the filter of one group
([Cout/g, Cin/g*kh*kw], its natural layout) and B the im2col matrix, computed on the fly
while it is loaded (padding reads as 0), so no im2col buffer is ever written.

The kernel shape follows the device: local-memory tiles on GPUs (``tiles.py``), SIMD register
blocks on CPUs (``simd.py``); the ``gemm`` field of the Target says which.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.ir.instructions import Instr
from glow_core.types import ElemKind
from glow_opencl.emit import FLOATS, emits
from glow_opencl.runtime import Target
from glow_opencl.simd import (
    channel_kernel,
    channel_width,
    conv_vector_b,
    depthwise_vector_kernel,
    packed_filter,
    vector_kernel,
)
from glow_opencl.source import Kernel, Param, ctype, linear_kernel, load, store
from glow_opencl.tiles import SKINNY_M, Gemm, Loader, skinny_kernel, tiled_kernel


def gemm_kernel(g: Gemm, target: Target) -> list[Kernel]:
    """The kernel for ``g`` on ``target`` (none for an empty result)."""
    if g.m == 0 or g.n == 0 or g.batch == 0:
        return []
    if g.k == 0:
        raise NotImplementedError("GEMM with an empty inner dimension")
    if g.params[0].elem is ElemKind.float64:
        return [direct_kernel(g)]
    if target.gemm == "vector":
        return [vector_kernel(g, target)]
    return [skinny_kernel(g, target) if g.m <= SKINNY_M else tiled_kernel(g, target)]


def direct_kernel(g: Gemm) -> Kernel:
    """One work-item per element of C and a plain loop over k, in double: float64 models are
    checks, not workloads, so they get the simple kernel rather than a tuned one."""
    body = [
        "const int col = get_global_id(0); const int row = get_global_id(1); const int z = get_global_id(2);",
        *g.prelude,
        "double acc = 0.0;",
        f"for (int kk = 0; kk < {g.k}; ++kk) {{",
        "    double av = 0.0; double bv = 0.0;",
        *(f"    {line}" for line in g.load_a("row", "kk", "av")),
        *(f"    {line}" for line in g.load_b("kk", "col", "bv")),
        "    acc = fma(av, bv, acc);",
        "}",
        store("d", ElemKind.float64, g.c_index("row", "col"), "acc"),
    ]
    return Kernel(f"{g.hint}_f64", g.params, g.values, body, (g.n, g.m, g.batch), None)


@emits("MatMul", "BatchMatMul", kinds=FLOATS)
def emit_matmul(instr: Instr, target: Target) -> list[Kernel]:
    d, a, b = instr.dest, instr.sources[0], instr.sources[1]
    batch = a.type.shape[0] if instr.kind == "BatchMatMul" else 1
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    elem = d.type.elem
    prelude = [] if batch == 1 else [f"a += z * {m * k}; b += z * {k * n}; d += z * {m * n};"]
    g = Gemm(
        hint=instr.kind.lower(),
        m=m,
        n=n,
        k=k,
        batch=batch,
        params=[Param("d", elem, writes=True), Param("a", elem), Param("b", elem)],
        values=[d, a, b],
        prelude=prelude,
        load_a=lambda r, c, v: [f"{v} = {load('a', elem, f'{r} * {k} + {c}')};"],
        load_b=lambda r, c, v: [f"{v} = {load('b', elem, f'{r} * {n} + {c}')};"],
        c_index=lambda r, c: f"{r} * {n} + {c}",
        b_row=lambda r, c: f"b + {r} * {n} + {c}",
    )
    return gemm_kernel(g, target)


@emits("Convolution", kinds=FLOATS)
def emit_convolution(instr: Instr, target: Target) -> list[Kernel]:
    d, x, w = instr.dest, instr.sources[0], instr.sources[1]
    a, elem, group = instr.attrs, d.type.elem, instr.attrs["group"]
    images, cin, h, wd = x.type.shape
    cout, cin_g, kh, kw = w.type.shape
    oh, ow = d.type.shape[2:]
    cout_g, kdim = cout // group, cin_g * kh * kw
    pointwise = _pointwise_b(a, (kh, kw), h * wd)
    if group == cin == cout and d.type.size:
        if target.gemm == "vector" and elem is not ElemKind.float64:
            return [depthwise_vector_kernel(instr, target)]
        return [depthwise_kernel(instr)]
    if target.gemm == "vector" and not pointwise and elem is not ElemKind.float64:
        # On a CPU, SIMD across output channels needs no per-lane gathers whatever the stride
        # or map size; it needs the filter repacked, so a constant one.
        width, packed = channel_width(target, cout_g), packed_filter(w, group)
        if width and packed is not None and d.type.size:
            return [channel_kernel(instr, packed, width)]
    prelude = [
        f"const int img = z / {group}; const int grp = z % {group};",
        f"x += (img * {cin} + grp * {cin_g}) * {h * wd};",
        f"w += grp * {cout_g * kdim};",
        f"d += (img * {cout} + grp * {cout_g}) * {oh * ow};",
    ]
    g = Gemm(
        hint="conv",
        m=cout_g,
        n=oh * ow,
        k=kdim,
        batch=images * group,
        params=[Param("d", elem, writes=True), Param("x", elem), Param("w", elem)],
        values=[d, x, w],
        prelude=prelude,
        load_a=lambda r, c, v: [f"{v} = {load('w', elem, f'{r} * {kdim} + {c}')};"],
        load_b=_im2col(a, elem, (h, wd), (kh, kw), ow),
        c_index=lambda r, c: f"{r} * {oh * ow} + {c}",
        b_row=pointwise,
        row_len=0 if pointwise else ow,
        vector_b=None if pointwise else conv_vector_b(a, elem, (h, wd), (kh, kw), ow),
    )
    return gemm_kernel(g, target)


def depthwise_kernel(instr: Instr) -> Kernel:
    """A depthwise convolution (one filter per channel) as what it is: a weighted window sum,
    one work-item per output element, like pooling. As a GEMM it would be one per channel
    with M = 1, which wastes every register block and tile (on PoCL both forms take the
    same time: neither is vectorized there)."""
    d, x, w = instr.dest, instr.sources[0], instr.sources[1]
    a, elem = instr.attrs, d.type.elem
    channels, (h, wd), (kh, kw) = x.type.shape[1], x.type.shape[2:], w.type.shape[2:]
    oh, ow = d.type.shape[2:]
    (sh, sw), (dh, dw), (pt, pl) = a["strides"], a["dilations"], a["pads"][:2]
    t = ctype(elem)
    lines = [
        f"const int ox = i % {ow}; const int oy = (i / {ow}) % {oh}; const int nc = i / {oh * ow};",
        f"x += nc * {h * wd}; w += (nc % {channels}) * {kh * kw};",
        f"const int y0 = oy * {sh} - {pt}; const int x0 = ox * {sw} - {pl};",
        f"{t} acc = 0;",
        f"for (int ky = 0; ky < {kh}; ++ky) {{",
        f"    const int y = y0 + ky * {dh}; const int yc = clamp(y, 0, {h - 1});",
        f"    for (int kx = 0; kx < {kw}; ++kx) {{",
        f"        const int xx = x0 + kx * {dw}; const int xc = clamp(xx, 0, {wd - 1});",
        f"        const {t} v = {load('x', elem, f'yc * {wd} + xc')};",
        # Branch-free: a tap outside the map reads a clamped, valid address and weighs 0
        # (with `continue` instead, PoCL ran it 1.8x slower).
        f"        acc = fma((y == yc && xx == xc) ? v : 0, {load('w', elem, f'ky * {kw} + kx')}, acc);",
        "    }",
        "}",
        store("d", elem, "i", "acc"),
    ]
    params = [Param("d", elem, writes=True), Param("x", elem), Param("w", elem)]
    return linear_kernel("depthwise", params, [d, x, w], d.type.size, lines)


def _pointwise_b(attrs, kernel, plane: int) -> Callable[[str, str], str] | None:
    """A 1x1, stride-1, unpadded convolution reads B = the input's channel planes as they are."""
    if kernel == (1, 1) and attrs["strides"] == (1, 1) and not any(attrs["pads"]):
        return lambda k, n: f"x + {k} * {plane} + {n}"
    return None


def _im2col(attrs, elem, size, kernel, ow) -> Loader:
    """B[k, n] of an implicit GEMM: input element (channel, y, x) for filter tap k, output pixel n."""
    (h, w), (kh, kw) = size, kernel
    (sh, sw), (dh, dw), (pt, pl) = attrs["strides"], attrs["dilations"], attrs["pads"][:2]
    pointwise = kh == kw == 1 and (sh, sw) == (1, 1) and not any(attrs["pads"])

    def loader(k: str, n: str, v: str) -> list[str]:
        if pointwise:
            return [f"{v} = {load('x', elem, f'{k} * {h * w} + {n}')};"]
        return [
            f"const int ch = {k} / {kh * kw}; const int tap = {k} % {kh * kw};",
            f"const int iy = ({n} / {ow}) * {sh} - {pt} + (tap / {kw}) * {dh};",
            f"const int ix = ({n} % {ow}) * {sw} - {pl} + (tap % {kw}) * {dw};",
            f"if (iy >= 0 && iy < {h} && ix >= 0 && ix < {w})",
            f"    {v} = {load('x', elem, f'(ch * {h} + iy) * {w} + ix')};",
        ]

    return loader

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
from glow_opencl.emit import F, emits
from glow_opencl.runtime import Target
from glow_opencl.simd import channel_kernel, channel_width, conv_vector_b, packed_filter, vector_kernel
from glow_opencl.source import Kernel, Param, load
from glow_opencl.tiles import SKINNY_M, Gemm, Loader, skinny_kernel, tiled_kernel


def gemm_kernel(g: Gemm, target: Target) -> list[Kernel]:
    """The kernel for ``g`` on ``target`` (none for an empty result)."""
    if g.m == 0 or g.n == 0 or g.batch == 0:
        return []
    if g.k == 0:
        raise NotImplementedError("GEMM with an empty inner dimension")
    if target.gemm == "vector":
        return [vector_kernel(g, target)]
    return [skinny_kernel(g, target) if g.m <= SKINNY_M else tiled_kernel(g, target)]


@emits("MatMul", "BatchMatMul", kinds=F)
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


@emits("Convolution", kinds=F)
def emit_convolution(instr: Instr, target: Target) -> list[Kernel]:
    d, x, w = instr.dest, instr.sources[0], instr.sources[1]
    a, elem, group = instr.attrs, d.type.elem, instr.attrs["group"]
    images, cin, h, wd = x.type.shape
    cout, cin_g, kh, kw = w.type.shape
    oh, ow = d.type.shape[2:]
    cout_g, kdim = cout // group, cin_g * kh * kw
    pointwise = _pointwise_b(a, (kh, kw), h * wd)
    if target.gemm == "vector" and not pointwise:
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

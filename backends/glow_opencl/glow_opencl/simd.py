"""GEMM kernels shaped for CPU devices (PoCL): SIMD in vector types, caches instead of tiles.

On a CPU, local memory is ordinary cache, and PoCL vectorizes across work-items only a
work-item loop with no inner loop inside: a GPU-style kernel runs there one lane at a time.
So the ``vector`` kernel does the SIMD itself: each work-item keeps an RM x W block of C in
``floatW`` registers (W = the device's preferred float vector width, 16 with AVX-512) and
streams one W-wide row of B per step of k, broadcasting one element of A per row.

B's W lanes are one vector load when they are adjacent in memory (MatMul; a 1x1 stride-1
convolution; a stride-1 convolution whose window row lies inside the image) and per-lane
loads otherwise. Blocks of lanes never straddle an output row of a convolution
(``Gemm.row_len``), so the adjacent case is the common one.
"""

from __future__ import annotations

import numpy as np

from glow_core.ir.instructions import Instr, Value, WeightKind, WeightVar
from glow_core.types import ElemKind, Type
from glow_opencl.runtime import Target
from glow_opencl.source import DerivedConstant, Kernel, Param, load, store
from glow_opencl.tiles import Gemm, VectorLoader


def _vload(elem: ElemKind, w: int) -> str:
    return f"vload_half{w}" if elem is ElemKind.float16 else f"vload{w}"


def _dense_b(g: Gemm, elem: ElemKind, w: int, full: bool) -> list[str]:
    """Statements setting ``bv`` = B[k, n .. n+w) for a B with dense rows (lanes past the row read 0)."""
    vtype = f"float{w}"
    if full and g.b_row is not None:
        return [f"const {vtype} bv = {_vload(elem, w)}(0, {g.b_row('k', 'n')});"]
    row = g.row_len or g.n
    lines = []
    for lane in range(w):
        guard = "" if full else f"if (nc + {lane} < {row}) "
        loads = " ".join(g.load_b("k", f"(n + {lane})", f"b{lane}"))
        lines.append(f"float b{lane} = 0.0f; {guard}{{ {loads} }}")
    lines.append(f"const {vtype} bv = ({vtype})({', '.join(f'b{lane}' for lane in range(w))});")
    return lines


def vector_width(target: Target, row: int) -> int:
    """The device's preferred float width (a power of two in [2, 16]), halved down to 4 while
    that makes it divide ``row``: a partial block at the end of every row takes the slow
    per-lane path (OW = 56 runs in 7 blocks of 8 rather than 3 of 16 and a partial one)."""
    w = max(2, min(16, 1 << (max(target.vector_width, 1).bit_length() - 1)))
    for narrower in (w, w // 2, w // 4):
        if narrower >= 4 and row % narrower == 0:
            return narrower
    return w


def vector_kernel(g: Gemm, target: Target) -> Kernel:
    """RM x W register blocks in float vectors, no local memory (see the module docstring)."""
    row, elem = g.row_len or g.n, g.params[0].elem
    w = vector_width(target, row)
    rm = min(g.m, 64 // w)  # 4 x 16 or 8 x 8 accumulators: enough independent FMAs in flight
    blocks = -(-row // w)  # vector blocks per row

    def loop(full: bool) -> list[str]:
        hoisted, load_b = g.vector_b(w, full) if g.vector_b else ([], _dense_b(g, elem, w, full))
        body = [*hoisted, f"for (int k = 0; k < {g.k}; ++k) {{", *(f"    {x}" for x in load_b)]
        for r in range(rm):
            body.append(f"    {{ float av = 0.0f; {' '.join(g.load_a(f'row{r}', 'k', 'av'))}")
            body.append(f"      acc{r} = fma((float{w})(av), bv, acc{r}); }}")
        return [*body, "}"]

    def stores(full: bool) -> list[str]:
        out = []
        for r in range(rm):
            guard = f"if (m0 + {r} < {g.m}) " if g.m % rm else ""
            if full:
                fn = f"vstore_half{w}_rte" if elem is ElemKind.float16 else f"vstore{w}"
                out.append(f"{guard}{fn}(acc{r}, 0, d + {g.c_index(f'(m0 + {r})', 'n')});")
                continue
            for lane in range(w):
                index = g.c_index(f"(m0 + {r})", f"(n + {lane})")
                value = f"acc{r}.s{lane:x}"
                out.append(f"{guard}if (nc + {lane} < {row}) {store('d', elem, index, value)}")
        return out

    lines = [
        f"const int blk = get_global_id(0); const int nr = blk / {blocks};",
        f"const int nc = (blk % {blocks}) * {w};",
        f"const int n = nr * {row} + nc; const int m0 = get_global_id(1) * {rm};",
        "const int z = get_global_id(2);",
        *g.prelude,
        # Rows past M are clamped for loading (in bounds) and skipped when storing.
        *(f"const int row{r} = min(m0 + {r}, {g.m - 1});" for r in range(rm)),
        *(f"float{w} acc{r} = 0.0f;" for r in range(rm)),
    ]
    if row % w == 0:
        lines += [*loop(True), *stores(True)]
    else:
        lines += [f"if (nc + {w} <= {row}) {{", *loop(True), *stores(True), "} else {"]
        lines += [*loop(False), *stores(False), "}"]
    sizes = (g.n // row * blocks, -(-g.m // rm), g.batch)
    return Kernel(g.hint + "_vec", g.params, g.values, lines, sizes, None)


def conv_vector_b(
    attrs: dict, elem: ElemKind, size: tuple[int, int], kernel: tuple[int, int], ow: int
) -> VectorLoader:
    """B lanes of a convolution: W adjacent pixels of output row ``nr`` (of ``ow``) for tap k."""
    (h, w_in), (kh, kw) = size, kernel
    (sh, sw), (dh, dw), (pt, pl) = attrs["strides"], attrs["dilations"], attrs["pads"][:2]
    ptr = "half" if elem is ElemKind.float16 else "float"

    def loader(w: int, full: bool) -> tuple[list[str], list[str]]:
        hoisted = [f"const int oy = nr * {sh} - {pt}; const int ox = nc * {sw} - {pl};"]
        per_k = [
            f"const int tap = k % {kh * kw};",
            f"const int iy = oy + (tap / {kw}) * {dh}; const int ix = ox + (tap % {kw}) * {dw};",
            f"__global const {ptr}* plane = x + (k / {kh * kw}) * {h * w_in};",
            f"float{w} bv = 0.0f;",
            f"if (iy >= 0 && iy < {h}) {{",
        ]
        lanes = []
        for lane in range(w):
            guard = "" if full else f"nc + {lane} < {ow} && "
            at = f"ix + {lane * sw}"
            value = load("plane", elem, f"iy * {w_in} + {at}")
            lanes.append(f"    if ({guard}{at} >= 0 && {at} < {w_in}) bv.s{lane:x} = {value};")
        if sw == 1 and full:
            per_k += [
                f"    if (ix >= 0 && ix + {w} <= {w_in})",
                f"        bv = {_vload(elem, w)}(0, plane + iy * {w_in} + ix);",
                "    else {",
                *(f"    {x}" for x in lanes),
                "    }",
            ]
        else:
            per_k += lanes
        return hoisted, [*per_k, "}"]

    return loader


CHANNEL_PIXELS = 8  # output pixels per work-item in the channel-vector convolution


def packed_filter(w: Value, group: int) -> DerivedConstant | None:
    """A constant filter [Cout, Cin/g, kh, kw] repacked as [g, Cin/g*kh*kw, Cout/g], so the
    filter values of W adjacent output channels for one tap are one vector load."""
    root = w.root
    if w is not root or not isinstance(root, WeightVar) or root.kind is not WeightKind.CONSTANT:
        return None
    cout = w.type.shape[0]
    value = np.asarray(root.value, dtype=w.type.dtype).reshape(group, cout // group, -1)
    packed = np.ascontiguousarray(value.transpose(0, 2, 1))
    return DerivedConstant(f"{root.name}/packed", Type(packed.shape, w.type.elem), packed)


def channel_width(target: Target, cout_g: int) -> int:
    """Output channels per vector: the preferred width, narrowed until it divides Cout/g (0: none)."""
    w = max(2, min(16, 1 << (max(target.vector_width, 1).bit_length() - 1)))
    while w >= 4 and cout_g % w:
        w //= 2
    return w if w >= 4 else 0


def channel_kernel(instr: Instr, packed: DerivedConstant, w: int) -> Kernel:
    """Convolution with SIMD across output channels: each work-item keeps W channels x 8 pixels
    in ``floatW`` registers; per filter tap, one vector load of packed filter values and one
    (bounds-checked) input element per pixel, broadcast. Any stride, padding or map size."""
    d, x = instr.dest, instr.sources[0]
    a, elem, group = instr.attrs, d.type.elem, instr.attrs["group"]
    _, cin, h, wd = x.type.shape
    cout, cin_g, kh, kw = instr.sources[1].type.shape
    oh, ow = d.type.shape[2:]
    (sh, sw), (dh, dw), (pt, pl) = a["strides"], a["dilations"], a["pads"][:2]
    cout_g, n, rn = cout // group, oh * ow, CHANNEL_PIXELS
    ptr = "half" if elem is ElemKind.float16 else "float"
    pixels = range(rn)
    lines = [
        f"const int n0 = get_global_id(0) * {rn}; const int m0 = get_global_id(1) * {w};",
        f"const int z = get_global_id(2); const int img = z / {group}; const int grp = z % {group};",
        f"x += (img * {cin} + grp * {cin_g}) * {h * wd};",
        f"p += grp * {cin_g * kh * kw * cout_g} + m0;",
        f"d += (img * {cout} + grp * {cout_g} + m0) * {n};",
        *(
            f"const int q{q} = min(n0 + {q}, {n - 1}); const int oy{q} = (q{q} / {ow}) * {sh} - {pt}; "
            f"const int ox{q} = (q{q} % {ow}) * {sw} - {pl}; float{w} acc{q} = 0.0f;"
            for q in pixels
        ),
        f"for (int c = 0; c < {cin_g}; ++c) {{",
        f"    __global const {ptr}* plane = x + c * {h * wd};",
        f"    for (int ky = 0; ky < {kh}; ++ky) for (int kx = 0; kx < {kw}; ++kx) {{",
        f"        const float{w} f = {_vload(elem, w)}(0, p + ((c * {kh} + ky) * {kw} + kx) * {cout_g});",
    ]
    for q in pixels:
        iy, ix = f"(oy{q} + ky * {dh})", f"(ox{q} + kx * {dw})"
        inside = f"{iy} >= 0 && {iy} < {h} && {ix} >= 0 && {ix} < {wd}"
        value = load("plane", elem, f"{iy} * {wd} + {ix}")
        lines.append(f"        acc{q} = fma(f, (float{w})(({inside}) ? {value} : 0.0f), acc{q});")
    lines += ["    }", "}"]
    for q in pixels:
        guard = "" if n % rn == 0 else f"if (n0 + {q} < {n}) "
        stores = " ".join(
            store("d", elem, f"{lane * n} + n0 + {q}", f"acc{q}.s{lane:x}") for lane in range(w)
        )
        lines.append(f"{guard}{{ {stores} }}")
    params = [Param("d", elem, writes=True), Param("x", elem), Param("p", elem)]
    sizes = (-(-n // rn), cout_g // w, x.type.shape[0] * group)
    return Kernel("conv_chan", params, [d, x, packed], lines, sizes, None)


def depthwise_vector_kernel(instr: Instr, target: Target) -> Kernel:
    """Depthwise convolution with SIMD along output rows: each work-item computes W adjacent
    output pixels of one row and channel in a ``floatW`` accumulator; per tap, one vector load
    of the input row (a per-lane gather at the map's borders or with a stride) times the tap's
    weight, broadcast. PoCL runs the one-work-item-per-pixel kernel one lane at a time."""
    d, x, wt = instr.dest, instr.sources[0], instr.sources[1]
    a, elem = instr.attrs, d.type.elem
    channels, (h, wd), (kh, kw) = x.type.shape[1], x.type.shape[2:], wt.type.shape[2:]
    oh, ow = d.type.shape[2:]
    (sh, sw), (dh, dw), (pt, pl) = a["strides"], a["dilations"], a["pads"][:2]
    w = vector_width(target, ow)
    lines = [
        f"const int ox0 = get_global_id(0) * {w}; const int oy = get_global_id(1);",
        "const int nc = get_global_id(2);",
        f"x += nc * {h * wd}; w += (nc % {channels}) * {kh * kw}; d += nc * {oh * ow} + oy * {ow} + ox0;",
        f"float{w} acc = 0.0f;",
        f"for (int ky = 0; ky < {kh}; ++ky) {{",
        f"    const int iy = oy * {sh} - {pt} + ky * {dh}; if (iy < 0 || iy >= {h}) continue;",
        f"    __global const {'half' if elem is ElemKind.float16 else 'float'}* row = x + iy * {wd};",
        f"    for (int kx = 0; kx < {kw}; ++kx) {{",
        f"        const int ix = ox0 * {sw} - {pl} + kx * {dw};",
        f"        float{w} v = 0.0f;",
    ]
    gather = " ".join(
        f"if ({at} >= 0 && {at} < {wd}) v.s{lane:x} = {load('row', elem, at)};"
        for lane, at in ((lane, f"ix + {lane * sw}") for lane in range(w))
    )
    if sw == 1:
        lines += [
            f"        if (ix >= 0 && ix + {w} <= {wd}) v = {_vload(elem, w)}(0, row + ix);",
            f"        else {{ {gather} }}",
        ]
    else:
        lines.append(f"        {gather}")
    lines += [
        f"        acc = fma(v, (float{w})({load('w', elem, f'ky * {kw} + kx')}), acc);",
        "    }",
        "}",
    ]
    vstore = f"vstore_half{w}_rte" if elem is ElemKind.float16 else f"vstore{w}"
    if ow % w == 0:
        lines.append(f"{vstore}(acc, 0, d);")
    else:
        tail = " ".join(
            f"if (ox0 + {lane} < {ow}) {store('d', elem, str(lane), f'acc.s{lane:x}')}" for lane in range(w)
        )
        lines.append(f"if (ox0 + {w} <= {ow}) {vstore}(acc, 0, d); else {{ {tail} }}")
    params = [Param("d", elem, writes=True), Param("x", elem), Param("w", elem)]
    sizes = (-(-ow // w), oh, d.type.shape[0] * channels)
    return Kernel("depthwise_vec", params, [d, x, wt], lines, sizes, None)

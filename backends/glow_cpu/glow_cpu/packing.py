"""Weight layouts changed once at compile time, by name (so a cached object can redo them).

GEMM micro-kernels read their constant operand as *panels*: for each k, the ``mr`` (or
``nr``) values one step of the micro-kernel needs sit next to each other, zero-padded at
the edge, so the inner loop streams one contiguous block and never tests for the edge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Packer = Callable[..., np.ndarray]
Size = Callable[..., int]
PACKERS: dict[str, Packer] = {}
SIZES: dict[str, Size] = {}
"""Bytes each packer returns for an input shape and its parameters: code generation
places packed constants by size alone (a kernel shared by many instructions never packs
their weights at compile time; the runtime packs each once, into place)."""
EXACT_PACKERS: set[str] = set()
"""Packers that receive the constant in its own dtype and return their own bytes (the
integer kernels' weights); the others work in float32."""
Writer = Callable[..., None]
WRITERS: dict[str, Writer] = {}
"""Packers that can also write straight into their place in the constant region
(``writer(value, out, **params)``, ``out`` a float32 array of the packed size): the big
float weights, so packing a layer needs no full-size intermediate beside the region (a
Winograd F(4x4) filter is 4x its 3x3 filter, and its float64 transform 8x)."""


def packer(size: Size, exact: bool = False) -> Callable[[Packer], Packer]:
    """Register the decorated packer under its name. ``size(shape, **params)`` counts the
    float32 elements it returns, or, for an ``exact`` packer (see ``EXACT_PACKERS``), its
    bytes."""

    def register(fn: Packer) -> Packer:
        PACKERS[fn.__name__] = fn
        SIZES[fn.__name__] = size if exact else lambda shape, **params: 4 * size(shape, **params)
        if exact:
            EXACT_PACKERS.add(fn.__name__)
        return fn

    return register


def exact_packer(size: Size) -> Callable[[Packer], Packer]:
    """Register a packer that keeps dtypes; ``size`` counts its bytes."""
    return packer(size, exact=True)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def writes_into(name: str) -> Callable[[Writer], Writer]:
    """Register the decorated function as packer ``name``'s in-place form (``WRITERS``)."""

    def register(fn: Writer) -> Writer:
        WRITERS[name] = fn
        return fn

    return register


@packer(size=lambda shape, mr: _ceil(shape[0], mr) * mr * shape[1])
def a_panels(a: np.ndarray, mr: int) -> np.ndarray:
    """[M, K] -> [ceil(M/mr), K, mr]: row panels, k-major inside a panel."""
    m, k = a.shape
    panels = -(-m // mr)
    padded = np.zeros((panels * mr, k), np.float32)
    padded[:m] = a
    return np.ascontiguousarray(padded.reshape(panels, mr, k).transpose(0, 2, 1))


@writes_into("a_panels")
def a_panels_into(a: np.ndarray, out: np.ndarray, mr: int) -> None:
    """``a_panels`` written straight into ``out``: whole panels are one transposing copy,
    the edge panel its rows then zeros. No padded intermediate: packing ResNet-50's 1x1
    and GEMM weights this way takes half the time (the region's pages are touched once)."""
    m, k = a.shape
    full, rest = divmod(m, mr)
    view = out.reshape(full + (rest > 0), k, mr)
    view[:full] = a[: full * mr].reshape(full, mr, k).transpose(0, 2, 1)
    if rest:
        view[full, :, :rest] = a[full * mr :].T
        view[full, :, rest:] = 0


@packer(size=lambda shape, nr: shape[0] * _ceil(shape[1], nr) * nr)
def b_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """[K, N] -> [ceil(N/nr), K, nr]: column panels, k-major inside a panel."""
    k, n = b.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, nr).transpose(1, 0, 2))


def _recurrent_panels_size(shape: tuple[int, ...], nr: int, start: int, stop: int) -> int:
    return shape[0] * shape[2] * _ceil(stop - start, nr) * nr


@packer(size=_recurrent_panels_size)
def recurrent_panels(weights: np.ndarray, nr: int, start: int, stop: int) -> np.ndarray:
    """A recurrent layer's W or R [dirs, G*H, K] -> per direction, rows ``[start, stop)``
    transposed ([K, stop - start]: the B of ``x @ W^T``) as ``b_panels``, one direction's
    panels after another's."""
    return np.concatenate([b_panels(w[start:stop].T, nr).reshape(-1) for w in weights])


def _conv_a_panels_size(shape: tuple[int, ...], group: int, mr: int) -> int:
    return group * _ceil(shape[0] // group, mr) * mr * int(np.prod(shape[1:], dtype=np.int64))


@packer(size=_conv_a_panels_size)
def conv_a_panels(filter: np.ndarray, group: int, mr: int) -> np.ndarray:
    """[Cout, Cin/g, kh, kw] -> per group, the [Cout/g, Cin/g*kh*kw] matrix as row panels."""
    cout = filter.shape[0]
    per_group = filter.reshape(group, cout // group, -1)
    return np.concatenate([a_panels(w, mr).reshape(-1) for w in per_group])


@writes_into("conv_a_panels")
def conv_a_panels_into(filter: np.ndarray, out: np.ndarray, group: int, mr: int) -> None:
    """``conv_a_panels`` written straight into ``out``, a group's panels after another's."""
    per_group = filter.reshape(group, filter.shape[0] // group, -1)
    for part, w in zip(np.split(out, group), per_group, strict=True):
        a_panels_into(w, part, mr)


def _blocked_view(filter: np.ndarray, blocks: int) -> np.ndarray:
    """``conv_blocked_filter``'s result as a (strided) view of ``filter``."""
    cout, cin, kh, kw = filter.shape
    split = filter.reshape(cout // (16 * blocks), blocks, 16, cin // 16, 16, kh, kw)
    return split.transpose(0, 3, 5, 6, 4, 1, 2)


@packer(size=lambda shape, blocks: int(np.prod(shape, dtype=np.int64)))
def conv_blocked_filter(filter: np.ndarray, blocks: int) -> np.ndarray:
    """[Cout, Cin, kh, kw] -> [Cout/(16 blocks), Cin/16, kh, kw, 16 in, blocks, 16 out]: for
    each input channel and tap, the ``blocks`` output vectors of a register tile side by side
    (``kernels/conv_blocked.py``)."""
    return np.ascontiguousarray(_blocked_view(filter, blocks))


@writes_into("conv_blocked_filter")
def conv_blocked_filter_into(filter: np.ndarray, out: np.ndarray, blocks: int) -> None:
    view = _blocked_view(filter, blocks)
    np.copyto(out.reshape(view.shape), view)


def packed_nbytes(name: str, shape: tuple[int, ...], params: dict[str, Any]) -> int:
    """Bytes ``pack(name, value, params)`` returns for a ``value`` of ``shape``."""
    return SIZES[name](tuple(shape), **params)


def pack_into(name: str, value: np.ndarray, params: dict[str, Any], out: np.ndarray) -> None:
    """Write ``pack(name, value, params)`` into ``out`` (bytes of exactly its size), in place
    where the packer has a writer (``WRITERS``), else through one packed copy."""
    if name in WRITERS:
        WRITERS[name](np.asarray(value, np.float32), out.view(np.float32), **params)
        return
    out[...] = pack(name, value, params).reshape(-1).view(np.uint8)


def pack(name: str, value: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """Run packer ``name``; the result is contiguous, float32 unless the packer is exact."""
    if name in EXACT_PACKERS:
        return np.ascontiguousarray(PACKERS[name](np.asarray(value), **params))
    return np.ascontiguousarray(PACKERS[name](np.asarray(value, np.float32), **params), np.float32)

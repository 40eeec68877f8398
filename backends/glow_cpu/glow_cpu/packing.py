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


@packer(size=lambda shape, mr: _ceil(shape[0], mr) * mr * shape[1])
def a_panels(a: np.ndarray, mr: int) -> np.ndarray:
    """[M, K] -> [ceil(M/mr), K, mr]: row panels, k-major inside a panel."""
    m, k = a.shape
    panels = -(-m // mr)
    padded = np.zeros((panels * mr, k), np.float32)
    padded[:m] = a
    return np.ascontiguousarray(padded.reshape(panels, mr, k).transpose(0, 2, 1))


@packer(size=lambda shape, nr: shape[0] * _ceil(shape[1], nr) * nr)
def b_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """[K, N] -> [ceil(N/nr), K, nr]: column panels, k-major inside a panel."""
    k, n = b.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, nr).transpose(1, 0, 2))


def _conv_a_panels_size(shape: tuple[int, ...], group: int, mr: int) -> int:
    return group * _ceil(shape[0] // group, mr) * mr * int(np.prod(shape[1:], dtype=np.int64))


@packer(size=_conv_a_panels_size)
def conv_a_panels(filter: np.ndarray, group: int, mr: int) -> np.ndarray:
    """[Cout, Cin/g, kh, kw] -> per group, the [Cout/g, Cin/g*kh*kw] matrix as row panels."""
    cout = filter.shape[0]
    per_group = filter.reshape(group, cout // group, -1)
    return np.concatenate([a_panels(w, mr).reshape(-1) for w in per_group])


@packer(size=lambda shape, blocks: int(np.prod(shape, dtype=np.int64)))
def conv_blocked_filter(filter: np.ndarray, blocks: int) -> np.ndarray:
    """[Cout, Cin, kh, kw] -> [Cout/(16 blocks), Cin/16, kh, kw, 16 in, blocks, 16 out]: for
    each input channel and tap, the ``blocks`` output vectors of a register tile side by side
    (``kernels/conv_blocked.py``)."""
    cout, cin, kh, kw = filter.shape
    split = filter.reshape(cout // (16 * blocks), blocks, 16, cin // 16, 16, kh, kw)
    return np.ascontiguousarray(split.transpose(0, 3, 5, 6, 4, 1, 2))


def packed_nbytes(name: str, shape: tuple[int, ...], params: dict[str, Any]) -> int:
    """Bytes ``pack(name, value, params)`` returns for a ``value`` of ``shape``."""
    return SIZES[name](tuple(shape), **params)


def pack(name: str, value: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """Run packer ``name``; the result is contiguous, float32 unless the packer is exact."""
    if name in EXACT_PACKERS:
        return np.ascontiguousarray(PACKERS[name](np.asarray(value), **params))
    return np.ascontiguousarray(PACKERS[name](np.asarray(value, np.float32), **params), np.float32)

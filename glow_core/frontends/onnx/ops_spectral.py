"""Importers for DFT and STFT: discrete Fourier transforms as MatMuls with load-time matrices.

A DFT along one axis is linear in the real and imaginary parts of its input, so its four
real blocks (how real and imaginary inputs feed real and imaginary outputs) are computed
here once, for the static length, padding or truncation, one-sided output and inverse.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node


def _blocks(
    length: int, n: int, inverse: bool, onesided: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """[out, length] matrices (from real, from imaginary) to the real and (unless a real-valued
    inverse) imaginary outputs."""
    eye = np.eye(length)
    if inverse and onesided:  # real output from a one-sided (Hermitian) spectrum
        return np.fft.irfft(eye, n=n, axis=0), np.fft.irfft(1j * eye, n=n, axis=0), None, None
    m = np.fft.ifft(eye, n=n, axis=0) if inverse else np.fft.fft(eye, n=n, axis=0)
    if onesided:
        m = m[: n // 2 + 1]
    return m.real, -m.imag, m.imag, m.real


def _apply(b: Builder, x: Node, matrix: np.ndarray, axis: int) -> Node:
    """``matrix`` [out, length] applied along ``axis`` of ``x``."""
    moved, inverse = build.move_axis_last(b, x, axis)
    rows = b.reshape(moved, (-1, x.type.shape[axis]))
    y = b.MatMul(rows, build.constant(b, np.ascontiguousarray(matrix.T).astype(x.type.dtype), "dft"))
    y = b.reshape(y, moved.type.shape[:-1] + (matrix.shape[0],))
    return y if inverse is None else b.Transpose(y, shuffle=inverse)


def dft(b: Builder, x: Node, axis: int, n: int, inverse: bool, onesided: bool) -> Node:
    """ONNX DFT of ``x`` [..., 1 or 2] (real or complex last dim) along ``axis``."""
    last = x.type.rank - 1
    shape = x.type.shape
    real = b.Reshape(b.Slice(x, starts=(0,) * x.type.rank, ends=shape[:-1] + (1,)), shape=shape[:-1])
    imag = None
    if shape[-1] == 2:
        imag = b.Reshape(b.Slice(x, starts=(0,) * last + (1,), ends=shape), shape=shape[:-1])
    rr, ri, ir, ii = _blocks(shape[axis], n, inverse, onesided)
    parts = []
    for from_real, from_imag in ((rr, ri), (ir, ii)):
        if from_real is None:
            continue
        part = _apply(b, real, from_real, axis)
        if imag is not None:
            part = b.Add(part, _apply(b, imag, from_imag, axis))
        parts.append(b.Reshape(part, shape=part.type.shape + (1,)))
    return parts[0] if len(parts) == 1 else b.Concat(*parts, axis=last)


@importer("DFT", ranks={0: Rank.at_least(2)})
def _dft(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    axis = int(ctx.attr("axis", 1))  # an attribute before opset 20, an input since
    if ctx.opset >= 20:
        axis = ctx.int_scalar(2, "axis") if ctx.has(2) else -2
    axis = ctx.axis(axis, x.type.rank, "axis")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if ctx.has(1):
        n = ctx.int_scalar(1, "dft_length")
    else:
        n = 2 * (x.type.shape[axis] - 1) if inverse and onesided else x.type.shape[axis]
    if n < 1:
        raise ShapeError(f"the DFT length is {n} (input 1, or from {x.type} axis {axis}); it must be >= 1")
    if x.type.shape[-1] not in (1, 2):
        raise ShapeError(f"the last dim of {x.type} must be 1 (real) or 2 (complex)")
    return dft(ctx.b, x, axis, n, inverse, onesided)


@importer("STFT", ranks={0: 3, 2: 1})
def _stft(ctx: NodeContext) -> Node:
    """Frames gathered at load-time positions, windowed, then a DFT of each frame."""
    x, b = ctx.node(0), ctx.b
    step = ctx.int_scalar(1, "frame_step")
    if step < 1:
        raise ctx.invalid(f"input 1 (frame_step) is {step}, but ONNX requires frame_step >= 1")
    window = ctx.optional_node(2)
    if ctx.has(3):
        frame = ctx.int_scalar(3, "frame_length")
    else:
        frame = window.type.shape[0] if window is not None else x.type.shape[-2]
    if x.type.shape[2] not in (1, 2):
        raise ShapeError(f"the signal {x.type} must end in a dim of 1 (real) or 2 (complex)")
    if not 1 <= frame <= x.type.shape[1]:
        raise ShapeError(f"frame length {frame} must be 1 to the signal length of {x.type}")
    if window is not None and window.type.shape != (frame,):
        raise ShapeError(f"window {window.type} must hold frame_length = {frame} values")
    frames = 1 + (x.type.shape[1] - frame) // step
    starts = np.arange(frames, dtype=np.int64)[:, None] * step + np.arange(frame, dtype=np.int64)[None, :]
    framed = b.Gather(x, build.constant(b, starts, "frames"), axis=1)  # [batch, frames, frame, c]
    if window is not None:
        framed = b.mul(framed, b.reshape(build.convert(b, window, x.type.elem), (1, 1, frame, 1)))
    return dft(b, framed, 2, frame, False, bool(ctx.attr("onesided", 1)))

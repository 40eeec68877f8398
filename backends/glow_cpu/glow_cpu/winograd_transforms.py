"""Winograd's minimal filtering for 3x3 convolutions: the transforms, the filter packer, and
the accuracy rule that decides per layer whether a variant may be used.

F(m x m, 3x3) computes an ``m x m`` tile of output from an ``alpha x alpha`` tile of input
(``alpha = m + 2``) with ``alpha**2`` multiplications per input and output channel pair
instead of ``9 m**2``: the input tile ``d`` becomes ``V = B^T d B``, the filter ``g``
becomes ``U = G g G^T`` (once, at compile time), their element-wise products summed over
the input channels are ``alpha**2`` independent GEMMs, and ``Y = A^T M A`` is the output
tile. F(2x2) saves 2.25x of the multiplications, F(4x4) 4x; the price is rounding: the
transforms' coefficients grow with ``m`` (up to 8 and 1/24 for F(4x4)), so the error grows
with the variant and the number of input channels summed.

The matrices come from the Toom-Cook construction (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016): F(2x2) on the points 0, +-1, infinity; F(4x4) on 0,
+-1, 2, -1/2, infinity rather than Lavin's 0, +-1, +-2 (a point and its reciprocal keep the
transforms' coefficients balanced, as Barabasz et al. found in "Error analysis and improving
the accuracy of Winograd convolution", 2020): measured with ``estimated_error``, 2.1e-6
instead of 4.4-7.7e-6 over 256 and 512 channels, which is what lets F(4x4) pass the
tolerance on deep layers. Every row of B^T is scaled to small integers (exact in float32;
G, applied once in float64, takes the inverse scale), A^T's entries are powers of two.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from glow_core.accuracy import PRIMITIVE_TOLERANCE
from glow_core.types import ElemKind
from glow_cpu.packing import packer, writes_into

FILTER = 3
"""Winograd is used for 3x3 filters only."""


@dataclass(frozen=True)
class Variant:
    """F(m x m, 3x3): the output tile size and the three transform matrices."""

    m: int
    bt: tuple[tuple[float, ...], ...]  # alpha x alpha: V = B^T d B
    g: tuple[tuple[float, ...], ...]  # alpha x 3: U = G g G^T
    at: tuple[tuple[float, ...], ...]  # m x alpha: Y = A^T M A

    @property
    def alpha(self) -> int:
        """Input tile size (and transformed tile size)."""
        return self.m + FILTER - 1

    @property
    def positions(self) -> int:
        """Positions of a transformed tile: one GEMM each."""
        return self.alpha * self.alpha

    @property
    def name(self) -> str:
        return f"F({self.m}x{self.m},3x3)"

    @property
    def multiply_saving(self) -> float:
        """Direct multiplications over Winograd's (per tile, channel pair)."""
        return 9 * self.m * self.m / self.positions


F2 = Variant(
    m=2,
    bt=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
    g=((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
    at=((1, 1, 1, 0), (0, 1, -1, -1)),
)
F4 = Variant(
    m=4,
    bt=(
        (2, 3, -4, -3, 2, 0),
        (0, 2, 5, 1, -2, 0),
        (0, 2, 1, -5, 2, 0),
        (0, -1, -2, 1, 2, 0),
        (0, -2, 1, 2, -1, 0),
        (0, 2, 3, -4, -3, 2),
    ),
    g=(
        (1 / 2, 0, 0),
        (1 / 6, 1 / 6, 1 / 6),
        (1 / 6, -1 / 6, 1 / 6),
        (1 / 30, 1 / 15, 2 / 15),
        (16 / 15, -8 / 15, 4 / 15),
        (0, 0, 1 / 2),
    ),
    at=((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -1 / 2, 0), (0, 1, 1, 4, 1 / 4, 0), (0, 1, -1, 8, -1 / 8, 1)),
)
VARIANTS = {variant.m: variant for variant in (F2, F4)}
"""By output tile size."""


def transformed_filter(filter: np.ndarray, variant: Variant) -> np.ndarray:
    """[Cout, Cin, 3, 3] -> U [alpha, alpha, Cout, Cin] = G g G^T, computed in float64."""
    g = np.asarray(variant.g, np.float64)
    return np.einsum("ai,ocij,bj->aboc", g, np.asarray(filter, np.float64), g)


def winograd_filter_size(shape: tuple[int, ...], m: int, nr: int, cin_padded: int) -> int:
    """Elements ``winograd_filter`` returns for a filter of ``shape`` (placing packed
    constants by size alone, without packing at compile time)."""
    return VARIANTS[m].positions * -(-shape[0] // nr) * nr * cin_padded


@packer(size=winograd_filter_size)
def winograd_filter(filter: np.ndarray, m: int, nr: int, cin_padded: int) -> np.ndarray:
    """[Cout, Cin, 3, 3] -> per transformed position, U^T [Cin, Cout] (zero rows up to
    ``cin_padded``) as GEMM B column panels of ``nr``: the B operand of each position's
    product (tiles x Cin) x (Cin x Cout) in ``kernels/winograd.py``."""
    out = np.empty(winograd_filter_size(filter.shape, m, nr, cin_padded), np.float32)
    winograd_filter_into(filter, out, m, nr, cin_padded)
    return out


_CHUNK_BYTES = 4 << 20
"""Bound on the float64 working set (filter taps and their transforms) of the output-channel
panels ``winograd_filter_into`` transforms at a time."""


@writes_into("winograd_filter")
def winograd_filter_into(filter: np.ndarray, out: np.ndarray, m: int, nr: int, cin_padded: int) -> None:
    """``winograd_filter`` written into ``out`` a few panels of output channels at a time:
    their taps in float64, transformed to every position by one product and rounded once
    to float32 (the whole U in float64 would be 8x the 3x3 filter, 75 MB for 512x512).

    The taps are first laid out as ``[9, panel, Cin, lane]``, the order of ``out``'s rows,
    so that ``positions x 9`` times that matrix is each position's rows already in place:
    one pass over the filter and one contiguous store per position. (A matrix-vector
    product per position read the filter once per position and scattered its result:
    ResNet-50's Winograd filters took about twice as long, the cold compile's serial tail.)"""
    variant = VARIANTS[m]
    g = np.asarray(variant.g, np.float64)
    taps = np.stack(
        [np.outer(g[a], g[b]).reshape(-1) for a in range(variant.alpha) for b in range(variant.alpha)]
    )
    cout, cin = filter.shape[:2]
    panels = -(-cout // nr)
    blocks = out.reshape(variant.positions, panels, cin_padded, nr)
    blocks[:, :, cin:, :] = 0  # the zero rows up to cin_padded
    step = max(1, _CHUNK_BYTES // (cin * nr * 8 * (9 + variant.positions)))  # panels per chunk
    for first in range(0, panels, step):
        last = min(panels, first + step)
        rows = filter[first * nr : last * nr].reshape(-1, cin, 9)
        whole = len(rows) // nr  # panels of the chunk with all nr output channels
        chunk = (np.empty if whole == last - first else np.zeros)((9, last - first, cin, nr))  # float64
        taps_in_order = chunk.transpose(1, 3, 2, 0)  # [panel, lane, Cin, tap]: a view
        taps_in_order[:whole] = rows[: whole * nr].reshape(whole, nr, cin, 9)
        if whole < last - first:  # the last panel, partial: its other lanes stay zero
            taps_in_order[whole, : len(rows) - whole * nr] = rows[whole * nr :]
        # [positions, panels x Cin x lanes]; numpy's own loop, not BLAS: OpenBLAS's threads
        # spin for ~0.1 s after a product and took a core from the model's first runs
        u = np.einsum("pk,kn->pn", taps, chunk.reshape(9, -1))
        blocks[:, first:last, :cin, :] = u.reshape(variant.positions, last - first, cin, nr)


def winograd_conv_float32(x: np.ndarray, filter: np.ndarray, variant: Variant) -> np.ndarray:
    """The valid (unpadded) 3x3 convolution of ``x`` [N, C, H, W] computed as the kernel
    does, every step rounded to float32: input and output transforms in float32, the
    filter transform in float64 then rounded (the packer), products summed in float32.
    (H - 2 and W - 2 must be multiples of ``m``.)"""
    n, c, h, w = x.shape
    m, alpha = variant.m, variant.alpha
    bt = np.asarray(variant.bt, np.float32)
    at = np.asarray(variant.at, np.float32)
    ty, tx = (h - 2) // m, (w - 2) // m
    tiles = np.empty((n, c, ty, tx, alpha, alpha), np.float32)
    for i in range(ty):
        for j in range(tx):
            tiles[:, :, i, j] = x[:, :, i * m : i * m + alpha, j * m : j * m + alpha]
    v = np.einsum("ai,nctuij,bj->abntuc", bt, tiles, bt).astype(np.float32)
    u = transformed_filter(filter, variant).astype(np.float32)  # [a, b, o, c]
    products = np.matmul(v.reshape(alpha, alpha, -1, c), np.swapaxes(u, 2, 3))  # [a, b, n*t*u, o]
    products = products.reshape(alpha, alpha, n, ty, tx, -1)
    y = np.einsum("ia,abntuo,jb->ntuoij", at, products, at).astype(np.float32)
    return y.transpose(0, 3, 1, 4, 2, 5).reshape(n, -1, ty * m, tx * m)


def direct_conv_float64(x: np.ndarray, filter: np.ndarray) -> np.ndarray:
    """The valid 3x3 convolution (cross-correlation, as ONNX Conv) in float64: the reference."""
    n, _, h, w = x.shape
    x64, f64 = np.asarray(x, np.float64), np.asarray(filter, np.float64)
    out = np.zeros((n, filter.shape[0], h - 2, w - 2))
    for i in range(FILTER):
        for j in range(FILTER):
            out += np.einsum("nchw,oc->nohw", x64[:, :, i : i + h - 2, j : j + w - 2], f64[:, :, i, j])
    return out


ACCURACY_TRIALS = 3
ACCURACY_COUT = 8
ACCURACY_MARGIN = 0.5
"""A variant is used when its estimated error is at most this fraction of the tolerance:
the estimate is a few random samples, a model's weights and activations are others."""


@functools.lru_cache(maxsize=256)
def estimated_error(m: int, cin: int) -> float:
    """The worst relative error (``max|got - want| / max|want|``, as the conformance suite
    measures it) of F(m x m, 3x3) over ``cin`` input channels against the float64
    reference, on seeded standard-normal inputs and filters scaled like a trained layer's
    (He: variance 2 / fan-in), two tiles square, a few trials.

    It depends on the variant and the channel count only, never on a layer's weight
    values: instructions of the same shape share one generated kernel, so the choice must
    be a function of the shape."""
    variant = VARIANTS[m]
    rng = np.random.default_rng(1000 * m + cin)
    size = 2 * m + FILTER - 1
    worst = 0.0
    for _ in range(ACCURACY_TRIALS):
        x = rng.standard_normal((1, cin, size, size)).astype(np.float32)
        scale = np.sqrt(2.0 / (cin * FILTER * FILTER))
        filt = (rng.standard_normal((ACCURACY_COUT, cin, FILTER, FILTER)) * scale).astype(np.float32)
        want = direct_conv_float64(x, filt)
        got = winograd_conv_float32(x, filt, variant)
        worst = max(worst, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
    return worst


def float32_tolerance() -> float:
    """The relative-error bound a float32 primitive result must meet (``glow_core.accuracy``:
    the one source the conformance suite judges by too)."""
    return PRIMITIVE_TOLERANCE[ElemKind.float32]


def accurate_enough(m: int, cin: int) -> bool:
    """Whether F(m x m, 3x3) over ``cin`` channels stays within the conformance tolerance."""
    return estimated_error(m, cin) <= ACCURACY_MARGIN * float32_tolerance()

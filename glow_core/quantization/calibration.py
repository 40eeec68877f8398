"""Calibration: the real range a value is quantized over, read from its profile.

- ``minmax``: the extremes seen (nothing clipped; one outlier costs every other value
  resolution);
- ``percentile``: the central ``PERCENTILE`` % of the histogram's mass (outliers saturate);
- ``kl``: the symmetric threshold whose 128-level quantization of the clipped histogram
  is closest in KL divergence to the original (TensorRT's entropy calibration), so the
  threshold follows where the distribution's information is, not its extremes.

The histogram rules never widen the range past the seen extremes.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from glow_core.quantization.profile import BINS, TensorProfile
from glow_core.quantization.schema import QuantizationError

Calibration = Literal["minmax", "percentile", "kl"]
CALIBRATIONS: tuple[Calibration, ...] = ("minmax", "percentile", "kl")
PERCENTILE = 99.99
_LEVELS = 128
"""Quantization levels of one sign of a symmetric int8 range."""


def calibrated_range(t: TensorProfile, rule: str) -> tuple[float, float]:
    """[low, high] to quantize a value with profile ``t`` over, by ``rule``."""
    if rule not in CALIBRATIONS:
        raise QuantizationError(f"unknown calibration {rule!r}; choose one of {', '.join(CALIBRATIONS)}")
    if not t.seen:
        return 0.0, 0.0  # never finite in calibration: any scale will do
    if rule == "minmax" or t.counts.sum() == 0:
        return t.low, t.high
    if rule == "percentile":
        low, high = _percentile_range(t, PERCENTILE)
    else:
        threshold = _kl_threshold(t)
        low, high = -threshold, threshold
    return max(low, t.low), min(high, t.high)


def _percentile_range(t: TensorProfile, percent: float) -> tuple[float, float]:
    """Bin edges that cut (100 - percent) / 2 % of the mass off each tail."""
    cumulative = np.cumsum(t.counts) / t.counts.sum()
    tail = (100.0 - percent) / 200.0
    first = int(np.searchsorted(cumulative, tail, side="right"))
    last = int(np.searchsorted(cumulative, 1.0 - tail, side="left"))
    edges = t.edges
    return float(edges[first]), float(edges[min(last + 1, BINS)])


def _kl_threshold(t: TensorProfile) -> float:
    """The |x| threshold minimizing KL(P || Q): P the |x| histogram clipped at the threshold
    (the clipped tail's mass added to its last bin), Q that P quantized to 128 levels and
    spread back evenly over the non-empty bins of each level."""
    half = BINS // 2
    # |x| bins from 0 outwards: positive bin half + j plus its mirror half - 1 - j.
    magnitude = (t.counts[half:] + t.counts[:half][::-1]).astype(np.float64)
    top = int(np.flatnonzero(magnitude).max()) + 1
    if top <= _LEVELS:
        return t.reach * top / half
    best, best_bins = np.inf, top
    for bins in range(_LEVELS, top + 1):
        p = magnitude[:bins].copy()
        p[-1] += magnitude[bins:].sum()
        q = _spread_levels(p, _LEVELS)
        divergence = _kl(p, q)
        if divergence < best:
            best, best_bins = divergence, bins
    return t.reach * best_bins / half


def _spread_levels(p: np.ndarray, levels: int) -> np.ndarray:
    """``p`` merged into ``levels`` groups of neighbouring bins, each group's mass spread
    evenly over its non-empty bins (empty bins stay empty)."""
    groups = np.minimum(np.arange(p.size) * levels // p.size, levels - 1)
    mass = np.bincount(groups, weights=p, minlength=levels)
    filled = np.bincount(groups, weights=(p > 0).astype(np.float64), minlength=levels)
    per_bin = np.divide(mass, filled, out=np.zeros(levels), where=filled > 0)
    return np.where(p > 0, per_bin[groups], 0.0)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    q = q / q.sum()
    where = p > 0
    # A bin where P has mass but Q has none makes the divergence infinite.
    with np.errstate(divide="ignore"):
        return float(np.sum(p[where] * np.log(p[where] / q[where])))

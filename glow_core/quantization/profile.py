"""A profile: the range and histogram of every float value of a function over a calibration
set, keyed by node output name, saved as versioned JSON.

The histogram covers [-reach, reach] in ``BINS`` equal bins, ``reach`` a power of two. When a
later batch exceeds it, ``reach`` doubles and neighbouring bins merge pairwise (the old
edges are all edges of the new bins), so merging batches never re-reads data and never
moves a count across a bin edge. Percentile and KL calibration read the histogram;
min/max calibration reads the exact extremes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from glow_core.quantization.schema import QuantizationError

FORMAT = "glow-profile"
VERSION = 1
"""Bumped whenever the file's meaning changes; a file of another version is refused."""
BINS = 2048


class ProfileError(QuantizationError):
    """A profile file is unreadable, of another version, or does not match the model."""


@dataclass
class TensorProfile:
    """What one value looked like over the calibration set."""

    low: float = math.inf
    high: float = -math.inf
    reach: float = 0.0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))

    @property
    def seen(self) -> bool:
        return self.low <= self.high

    def record(self, values: np.ndarray) -> None:
        """Fold one batch in (non-finite values are ignored: they have no scale)."""
        x = np.asarray(values, np.float64).ravel()
        x = x[np.isfinite(x)]
        if x.size == 0:
            return
        self.low, self.high = min(self.low, float(x.min())), max(self.high, float(x.max()))
        needed = max(-self.low, self.high, 2.0**-30)
        if self.reach == 0.0:
            self.reach = 2.0 ** math.ceil(math.log2(needed))
        while self.reach < needed:
            self._double()
        bins = np.floor((x + self.reach) / (2 * self.reach) * BINS).astype(np.int64)
        self.counts += np.bincount(np.clip(bins, 0, BINS - 1), minlength=BINS)

    def _double(self) -> None:
        merged = self.counts.reshape(-1, 2).sum(axis=1)
        self.counts = np.zeros(BINS, np.int64)
        self.counts[BINS // 4 : BINS // 4 + BINS // 2] = merged
        self.reach *= 2

    @property
    def edges(self) -> np.ndarray:
        """BINS + 1 bin edges over [-reach, reach]."""
        return np.linspace(-self.reach, self.reach, BINS + 1)

    def to_json(self) -> dict[str, object]:
        nonzero = np.flatnonzero(self.counts)
        return {
            "min": self.low if self.seen else None,
            "max": self.high if self.seen else None,
            "histogram": {
                "reach": self.reach,
                "bins": BINS,
                # Sparse: most bins of a 2048-bin histogram are empty.
                "nonzero": {str(int(i)): int(self.counts[i]) for i in nonzero},
            },
        }

    @classmethod
    def from_json(cls, name: str, data: dict) -> TensorProfile:
        try:
            hist = data["histogram"]
            if int(hist["bins"]) != BINS:
                raise ProfileError(f"profile entry {name!r} has {hist['bins']} bins, expected {BINS}")
            counts = np.zeros(BINS, np.int64)
            for index, count in hist["nonzero"].items():
                counts[int(index)] = int(count)
            seen = data["min"] is not None
            return cls(
                low=float(data["min"]) if seen else math.inf,
                high=float(data["max"]) if seen else -math.inf,
                reach=float(hist["reach"]),
                counts=counts,
            )
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise ProfileError(
                f"profile entry {name!r} is malformed ({err!r}); profile the model again"
            ) from None


@dataclass
class Profile:
    """Per-value profiles of one function, keyed by node output name."""

    tensors: dict[str, TensorProfile] = field(default_factory=dict)
    batches: int = 0

    def __getitem__(self, name: str) -> TensorProfile:
        return self.tensors[name]

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def check_names(self, expected: set[str], what: str) -> None:
        """Refuse a profile whose names differ from ``expected`` (the values of ``what``),
        naming the missing and extra ones."""
        missing = sorted(expected - self.tensors.keys())
        extra = sorted(self.tensors.keys() - expected)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"{len(missing)} value(s) missing from the profile: {_listed(missing)}")
            if extra:
                parts.append(f"{len(extra)} profiled value(s) not in the model: {_listed(extra)}")
            raise ProfileError(
                f"the profile does not match {what}: {'; '.join(parts)}; "
                "profile this model (same input shapes) with `glow profile` or glow_core.profile"
            )

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "batches": self.batches,
            "tensors": {name: t.to_json() for name, t in self.tensors.items()},
        }

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def from_json(cls, data: object, source: str = "profile") -> Profile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ProfileError(f'{source} is not a glow profile (no "format": "{FORMAT}")')
        if data.get("version") != VERSION:
            raise ProfileError(
                f"{source} is a version {data.get('version')!r} profile; this glow reads version "
                f"{VERSION}: profile the model again"
            )
        tensors = data.get("tensors")
        if not isinstance(tensors, dict):
            raise ProfileError(f'{source} has no "tensors" table')
        return cls(
            {name: TensorProfile.from_json(name, t) for name, t in tensors.items()},
            int(data.get("batches", 0)),
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as err:
            raise ProfileError(f"cannot read profile {os.fspath(path)!r}: {err.strerror}") from None
        except json.JSONDecodeError as err:
            raise ProfileError(f"profile {os.fspath(path)!r} is not JSON: {err}") from None
        return cls.from_json(data, f"profile {os.fspath(path)!r}")


def _listed(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")

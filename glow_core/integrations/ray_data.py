"""Batch inference over a Ray Data dataset with an AOT bundle: no worker runs the compiler.

``GlowPredictor`` is the callable class ``Dataset.map_batches`` builds once per actor: its
constructor loads the bundle (``glow_core.load_bundle``: the shared library through ctypes,
the weights file mapped read-only, so the actors of one machine share its pages), and each
call maps one batch, a dict of numpy columns, to the entry point's outputs. The bundle is
compiled once, ahead of time, wherever the compiler is; the workers need numpy and
glow-core, not llvmlite. ``map_bundle`` is the one-line form::

    ds = map_bundle(ds, "r50_bundle", concurrency=4, batch_size=32)

An entry point runs a fixed number of rows per call (its inputs' and outputs' first
dimension, the batch size it was compiled for); a batch of any size is cut into calls of
that many rows, the last one filled up with copies of its final row, whose outputs are
dropped. Rows are never reordered: output row ``i`` is input row ``i``'s.

Ray itself is an optional extra (``pip install "glow-core[ray]"``); this module imports it
only in ``map_bundle``, so ``GlowPredictor`` also runs (and is tested) without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from glow_core.bundles.load import BundleFunction, load_bundle
from glow_core.bundles.manifest import TensorSlot
from glow_core.errors import BundleError, GlowError, InputError
from glow_core.types import ElemKind


class GlowPredictor:
    """One loaded bundle entry point, applied to batches of a dataset (see the module).

    ``bundle``: the bundle's directory (``name`` picks one when it holds several); ``entry``:
    the entry point (default: the bundle's only one). ``columns`` maps an input name to the
    column that holds it, ``output_columns`` an output name to the column it is written to
    (default: the same names); ``keep_columns`` are copied from each batch to its result
    unchanged (an id, a label).
    """

    def __init__(
        self,
        bundle: str | os.PathLike[str],
        *,
        name: str | None = None,
        entry: str | None = None,
        columns: Mapping[str, str] | None = None,
        output_columns: Mapping[str, str] | None = None,
        keep_columns: Sequence[str] = (),
    ):
        loaded = load_bundle(bundle, name)
        if entry is None:
            if len(loaded) != 1:
                raise BundleError(
                    f"bundle {loaded.manifest.name!r} has entry points {sorted(loaded)}; "
                    "name the one to run (entry=...)"
                )
            entry = next(iter(loaded))
        self.function: BundleFunction = loaded[entry]
        slots = self.function.entry
        self.rows_per_call = _rows_per_call(entry, [*slots.inputs, *slots.outputs])
        self.inputs = {s.name: s for s in slots.inputs}
        self.outputs = {s.name: s for s in slots.outputs}
        self.columns = {name: name for name in self.inputs} | dict(columns or {})
        self.output_columns = {name: name for name in self.outputs} | dict(output_columns or {})
        unknown = sorted(set(self.columns) - set(self.inputs)) + sorted(
            set(self.output_columns) - set(self.outputs)
        )
        if unknown:
            raise BundleError(
                f"entry point {entry!r} has no input or output {unknown}; its inputs are "
                f"{sorted(self.inputs)}, its outputs {sorted(self.outputs)}"
            )
        self.keep_columns = tuple(keep_columns)

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The entry point's outputs for every row of ``batch`` (plus the kept columns)."""
        arrays = self._batch_inputs(batch)
        rows = next(iter(arrays.values())).shape[0] if arrays else 0
        results = {
            name: np.empty((rows, *slot.shape[1:]), ElemKind[slot.elem].dtype)
            for name, slot in self.outputs.items()
        }
        step = self.rows_per_call
        for start in range(0, rows, step):
            stop = min(start + step, rows)
            chunk = {name: _filled(value[start:stop], step) for name, value in arrays.items()}
            outputs = self.function.run(chunk)
            for name, value in outputs.items():
                results[name][start:stop] = value[: stop - start]
        out = {self.output_columns[name]: value for name, value in results.items()}
        for column in self.keep_columns:
            out[column] = np.asarray(batch[column])
        return out

    def _batch_inputs(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each input's column as an array of rows, or InputError saying what does not match."""
        where = f"entry point {self.function.name!r}"
        if not isinstance(batch, Mapping):
            raise InputError(
                f"{where}: a batch must be a dict of numpy columns, got {type(batch).__name__}; "
                'pass batch_format="numpy" to map_batches'
            )
        wanted = [*self.columns.values(), *self.keep_columns]
        missing = [c for c in wanted if c not in batch]
        if missing:
            raise InputError(
                f"{where}: the batch has no column {missing} (it has {sorted(batch)}); map the "
                "entry's inputs to columns with columns={input: column}"
            )
        arrays: dict[str, np.ndarray] = {}
        lengths: set[int] = set()
        for name, column in self.columns.items():
            slot = self.inputs[name]
            value = np.asarray(batch[column])
            dtype = ElemKind[slot.elem].dtype
            row_shape = tuple(slot.shape[1:])
            if value.dtype != dtype:
                raise InputError(
                    f"{where}: column {column!r} (input {name!r}) holds {value.dtype}, the bundle "
                    f"takes {dtype}; convert the column first (the bundle never casts)"
                )
            if value.shape[1:] != row_shape:
                raise InputError(
                    f"{where}: column {column!r} (input {name!r}) has rows of shape "
                    f"{value.shape[1:]}, the bundle takes rows of shape {row_shape} "
                    f"(its input is {tuple(slot.shape)}: {self.rows_per_call} rows a call)"
                )
            lengths.add(value.shape[0])
            arrays[name] = value
        if len(lengths) > 1:
            raise InputError(f"{where}: the input columns have different numbers of rows {sorted(lengths)}")
        return arrays


def map_bundle(
    dataset: Any,
    bundle: str | os.PathLike[str],
    *,
    concurrency: int | tuple[int, int] = 1,
    batch_size: int | None = None,
    num_cpus: float = 1,
    **predictor: Any,
) -> Any:
    """``dataset.map_batches`` with a ``GlowPredictor`` per actor (``concurrency`` actors,
    each asking Ray for ``num_cpus`` CPUs); ``predictor`` are its keyword arguments.

    ``bundle`` is made absolute here: an actor's working directory is not the driver's, so
    a relative path would name another directory there (or none)."""
    require_ray()
    return dataset.map_batches(
        GlowPredictor,
        fn_constructor_args=(str(Path(bundle).resolve()),),
        fn_constructor_kwargs=predictor,
        concurrency=concurrency,
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=num_cpus,
    )


def require_ray() -> Any:
    """The ``ray`` module, or a GlowError saying how to install it."""
    try:
        import ray
        import ray.data  # ray without its data extra lacks what map_bundle needs
    except ImportError as err:
        raise GlowError(
            f'Ray Data is not installed ({err}): `pip install "glow-core[ray]"` (or '
            '`pip install "ray[data]"`) to run bundles over Ray datasets'
        ) from None
    return ray


def _rows_per_call(entry: str, slots: Sequence[TensorSlot]) -> int:
    """The entry's batch size: the first dimension every input and output shares."""
    leading = {s.shape[0] if s.shape else None for s in slots}
    if len(leading) != 1 or None in leading or 0 in leading:
        shapes = {s.name: tuple(s.shape) for s in slots}
        raise BundleError(
            f"entry point {entry!r} has no batch dimension shared by every input and output "
            f"({shapes}); a dataset maps rows onto the first dimension of each"
        )
    return int(leading.pop())


def _filled(rows: np.ndarray, count: int) -> np.ndarray:
    """``rows`` made ``count`` long with copies of its last row (a partial last call)."""
    if rows.shape[0] == count:
        return rows
    padding = np.repeat(rows[-1:], count - rows.shape[0], axis=0)
    return np.concatenate([rows, padding])

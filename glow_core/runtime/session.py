"""Session: an ONNX model compiled on demand for the inputs of each call.

A CompiledFunction has fixed input types and no control flow. A Session keeps the ONNX
model and compiles it again when a call needs another *specialization*, cached:

- per **signature**: the input shapes and dtypes of the call (symbolic dimensions);
- per value of an **input the loader needs itself** (a target shape, an If condition
  given as an input): the input becomes a constant (``static_inputs``);
- per value of a **load-time value computed from the inputs** (an If condition computed
  from data, each data-dependent Loop iteration's condition): computed by probes
  (``probe.py``), which stay extra outputs of the compiled function.

A cached specialization is valid for a call when its signature and static input values
match and every probe value the call's own run reads back equals the value it was built
for. Probe values are checked in order: the first that differs is right for this call
(everything before it matched), so the search goes on with one more value known, and ends.

Threads: ``run`` may be called from several threads at once. The cache and the stats are
guarded by a lock held only to look up or store; a call that must specialize takes the
session's compile lock, looks again (another thread may have built the specialization
meanwhile) and compiles only if still needed, so each specialization is compiled once.
Compiled functions run outside both locks (they are thread-safe themselves).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from glow_core.backend import Backend, BackendOptions
from glow_core.errors import GlowError, InputError, UnsupportedOpError
from glow_core.frontends.onnx.loader import OutputPlaces, load_onnx_structured
from glow_core.frontends.onnx.model import ModelSource, element_name, read_model
from glow_core.frontends.onnx.registry import LoadTimeValueError
from glow_core.frontends.onnx.string_values import as_strings
from glow_core.graph.function import Module
from glow_core.partition.devices import resolve_devices
from glow_core.runtime import host
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.pipeline import choose_backend, compile, is_backend_list
from glow_core.runtime.probe import MAX_PROBES, InputNeeded, ProbeResolver
from glow_core.runtime.signature import (
    Feed,
    InputInfo,
    Signature,
    declared_key,
    describe_signature,
    flatten,
    fully_declared,
    input_info,
    input_key,
    same_array,
    same_feed,
    shapes_of,
)

MAX_CACHED = 64
"""Specializations a Session keeps (least recently used dropped first)."""


class SpecializationError(UnsupportedOpError):
    """glow could not load or compile the model for the shapes or values of one call."""


@dataclass
class _Variant:
    """One compiled specialization and the values it was built for."""

    signature: Signature
    static: dict[str, np.ndarray]
    answers: tuple[np.ndarray, ...]
    probes: tuple[str, ...]
    compiled: CompiledFunction
    outputs: dict[str, OutputPlaces] = field(default_factory=dict)
    """Where each graph output landed (a sequence's elements, an empty optional); empty: by name."""


@dataclass
class SessionStats:
    """What a session did so far: compilations (final and probe) and cache hits. Shared by a
    Session and its host partition's parts, and counted from several threads: ``add``."""

    compilations: int = 0
    probe_compilations: int = 0
    cache_hits: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, compilations: int = 0, probe_compilations: int = 0, cache_hits: int = 0) -> None:
        """Count, atomically (``+=`` on an attribute can lose a concurrent update)."""
        with self._lock:
            self.compilations += compilations
            self.probe_compilations += probe_compilations
            self.cache_hits += cache_hits


class Session:
    """An ONNX model run by glow for any input shapes, with data-dependent control flow.

    ``run({name: array}) -> {name: array}`` compiles a specialization for the call when no
    cached one fits (see the module docstring). ``input_shapes`` compiles one right away
    for those shapes, so a model glow cannot take fails here rather than at the first run.
    """

    def __init__(
        self,
        model: ModelSource,
        backend: str | Backend | Sequence[str | Backend] | None = None,
        options: dict[str, Any] | BackendOptions | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        *,
        max_probes: int = MAX_PROBES,
        max_cached: int = MAX_CACHED,
        verify_each: bool | None = None,
        base_dir: str | os.PathLike | None = None,
    ):
        if isinstance(model, Module):
            raise InputError("glow_core.load takes an ONNX model; compile a glow Module with compile()")
        # External data is read in here, once: every specialization loads from self.proto.
        self.proto, self.source = read_model(model, base_dir)
        if is_backend_list(backend):
            # Several backends: each compilation is partitioned (docs/partitioning.md); the
            # list is resolved now so an unknown name or bad option fails here.
            resolve_devices(backend, options)  # type: ignore[arg-type]
            self.backend, self.options = list(backend), options  # type: ignore[arg-type, assignment]
        else:
            self.backend, self.options = choose_backend(backend, options)
        self.max_probes, self.max_cached, self.verify_each = max_probes, max_cached, verify_each
        initializers = {t.name for t in self.proto.graph.initializer}
        self.inputs = [input_info(v) for v in self.proto.graph.input if v.name not in initializers]
        self.input_names = [i.name for i in self.inputs]
        self.output_names = [v.name for v in self.proto.graph.output]
        self.stats = SessionStats()
        self._cache: OrderedDict[int, _Variant] = OrderedDict()
        self._cache_lock = threading.Lock()  # the cache's order and contents; held briefly
        self._compile_lock = threading.Lock()  # one specialization at a time, built once
        self._next_key = 0
        self._static_names: dict[Signature, set[str]] = {}
        # String and image nodes run on the host around compiled parts (None: nothing does).
        self._host = host.partition(self.proto, self.source, self.input_names, input_shapes, self._open_part)
        if self._host is None and (
            input_shapes is not None or all(fully_declared(v) for v in self._real_inputs())
        ):
            self._compile_declared(dict(input_shapes or {}))

    # ---- running -------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, Feed]) -> dict[str, Feed]:
        """The model's outputs for ``inputs`` (every graph input, by name).

        A sequence input takes a list of arrays and a sequence output comes back as one; an
        optional input takes None (absent) or its value, an empty optional output is None.
        """
        feeds = self._check(inputs)
        if self._host is not None:
            return self._outputs(self._host.run(feeds))
        signature: Signature = tuple((n, input_key(feeds[n])) for n in self.input_names)
        known: list[np.ndarray] = []
        while True:
            variant = self._lookup(signature, feeds, known)
            if variant is None:
                with self._compile_lock:
                    variant = self._lookup(signature, feeds, known)  # built while we waited?
                    fresh_variant = variant is None
                    if fresh_variant:
                        variant = self._specialize(signature, feeds, known)
                if fresh_variant:
                    return self._outputs(self._execute(variant, feeds), variant)
            results = self._execute(variant, feeds)
            read = [results[p] for p in variant.probes]
            fresh = range(len(known), len(read))
            differ = next((i for i in fresh if not same_array(read[i], variant.answers[i])), None)
            if differ is None:
                self.stats.add(cache_hits=1)
                return self._outputs(results, variant)
            known = read[: differ + 1]

    def __call__(self, inputs: Mapping[str, Feed]) -> dict[str, Feed]:
        return self.run(inputs)

    def _check(self, inputs: Mapping[str, Feed]) -> dict[str, Feed]:
        """Inputs by name, refused before anything is compiled for wrong names, kinds, dtypes or ranks."""
        unknown = sorted(set(inputs) - set(self.input_names))
        missing = [n for n in self.input_names if n not in inputs]
        if unknown or missing:
            raise InputError(
                f"{self.source}: inputs do not match: unknown {unknown}, missing {missing}; "
                f"the model takes {self.input_names}"
            )
        return {info.name: self._check_input(info, inputs[info.name]) for info in self.inputs}

    def _check_input(self, info: InputInfo, value: Any) -> Feed:
        """One input in its declared kind: an array, a list of arrays for a sequence, or None
        for an absent optional."""
        if value is None:
            if info.optional:
                return None
            raise InputError(
                f"input {info.name!r} is None, but the model declares {info.describe()}; "
                f"pass {info.expects()}"
            )
        if not info.sequence:
            if not isinstance(value, np.ndarray):
                raise InputError(
                    f"input {info.name!r} must be a numpy array, got {type(value).__name__} "
                    f"(the model declares {info.describe()}; pass {info.expects()})"
                )
            return self._check_tensor(info, value, f"input {info.name!r}")
        if not isinstance(value, list | tuple):
            raise InputError(
                f"input {info.name!r} is {info.describe()}: pass {info.expects()}, not {type(value).__name__}"
            )
        return [self._check_tensor(info, v, f"input {info.name!r} item {i}") for i, v in enumerate(value)]

    def _check_tensor(self, info: InputInfo, value: Any, what: str) -> np.ndarray:
        """One tensor (an input, or an element of a sequence input) against the declared type."""
        if not isinstance(value, np.ndarray):
            raise InputError(f"{what} must be a numpy array, got {type(value).__name__}")
        if info.dtype is not None and info.dtype.kind == "O":  # a string tensor
            value = as_strings(value, what)
        elif info.dtype is not None and value.dtype != info.dtype:
            raise InputError(
                f"{what} has dtype {value.dtype}, the model declares {info.dtype}; "
                f"convert it with .astype(np.{info.dtype})"
            )
        if info.rank is not None and value.ndim != info.rank:
            raise InputError(
                f"{what} has shape {value.shape} (rank {value.ndim}), the model declares rank {info.rank}"
            )
        wrong = [axis for axis, d in enumerate(info.dims) if d is not None and value.shape[axis] != d]
        if wrong:
            declared = [d if d is not None else "?" for d in info.dims]
            raise InputError(
                f"{what} has shape {value.shape}, but the model declares {declared} (dimension "
                f"{wrong[0]} must be {info.dims[wrong[0]]}; '?' dimensions may be anything)"
            )
        return np.asarray(value, order="C")

    def _lookup(
        self, signature: Signature, feeds: dict[str, Feed], known: list[np.ndarray]
    ) -> _Variant | None:
        """The most recently used specialization that may fit: ``known`` is a prefix of its values."""
        with self._cache_lock:
            for key in reversed(self._cache):
                variant = self._cache[key]
                if (
                    variant.signature == signature
                    and all(same_feed(feeds[n], v) for n, v in variant.static.items())
                    and len(variant.answers) >= len(known)
                    and all(same_array(a, b) for a, b in zip(known, variant.answers, strict=False))
                ):
                    self._cache.move_to_end(key)
                    return variant
        return None

    def _execute(self, variant: _Variant, feeds: dict[str, Feed]) -> dict[str, np.ndarray]:
        compiled = variant.compiled
        return compiled.run({n: v for n, v in flatten(feeds).items() if n in compiled.input_types})

    def _outputs(self, results: dict[str, np.ndarray], variant: _Variant | None = None) -> dict[str, Feed]:
        """The graph outputs from a run's results: a sequence's elements gathered into a list,
        an empty optional as None (``variant.outputs`` says where each landed)."""
        places = variant.outputs if variant is not None and variant.outputs else {}
        outputs: dict[str, Feed] = {}
        for name in self.output_names:
            place = places.get(name, name)
            if isinstance(place, tuple):
                outputs[name] = [results[n] for n in place]
            else:
                outputs[name] = None if place is None else results[place]
        return outputs

    # ---- specializing --------------------------------------------------------------------

    def _specialize(self, signature: Signature, feeds: dict[str, Feed], known: list[np.ndarray]) -> _Variant:
        """Load and compile for this call, replaying ``known`` and probing the values past it
        (under the compile lock: ``_static_names`` is read and written only here)."""
        static_names = self._static_names.setdefault(signature, set())
        shapes = shapes_of(feeds)
        while True:
            static = {n: feeds[n] for n in self.input_names if n in static_names}
            resolver = ProbeResolver(flatten(feeds), known, self._compile_module, self.max_probes)
            try:
                loaded = load_onnx_structured(
                    self.proto,
                    {n: s for n, s in shapes.items() if n not in static},
                    static_inputs=static,
                    resolve=resolver,
                )
                compiled = self._compile_module(loaded.module)
            except InputNeeded as need:
                static_names.add(self._input_of(need.name, feeds))
                continue
            except GlowError as err:
                raise SpecializationError(
                    f"{self.source}: cannot compile for inputs {describe_signature(signature)}: {err}"
                ) from err
            finally:
                self.stats.add(probe_compilations=resolver.compilations)
            break
        answers, probes = tuple(resolver.answers), tuple(resolver.probes)
        variant = _Variant(signature, static, answers, probes, compiled, loaded.outputs)
        self._store(variant)
        return variant

    def _input_of(self, placeholder: str, feeds: dict[str, Feed]) -> str:
        """The graph input a placeholder belongs to (itself, or the sequence it is an element of)."""
        for name, value in feeds.items():
            elements = range(len(value)) if isinstance(value, list) else range(0)
            if name == placeholder or any(element_name(name, i) == placeholder for i in elements):
                return name
        raise SpecializationError(f"{self.source}: the loader asked for {placeholder!r}, which is no input")

    def _open_part(
        self, model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None, position: int
    ) -> Session:
        """A compiled part of the host plan (``host.OpenPart``): a Session of the sub-model with
        this one's backend, options and limits, counting into this one's ``stats``."""
        part = Session(
            model,
            self.backend,
            self.options,
            input_shapes,
            max_probes=self.max_probes,
            max_cached=self.max_cached,
            verify_each=self.verify_each,
        )
        part.source = f"{self.source} (compiled part {position})"
        done = part.stats
        self.stats.add(done.compilations, done.probe_compilations, done.cache_hits)
        part.stats = self.stats
        return part

    def _compile_module(self, module: Module) -> CompiledFunction:
        return compile(module, self.backend, options=self.options, verify_each=self.verify_each)

    def _compile_declared(self, input_shapes: dict[str, Any]) -> None:
        """Compile now for the declared (or given) shapes, unless that needs input values
        (or a sequence's length, which comes with a call unless ``input_shapes`` gives it)."""
        if any(info.sequence and info.name not in input_shapes for info in self.inputs):
            return
        try:
            loaded = load_onnx_structured(self.proto, input_shapes)
        except LoadTimeValueError:
            return  # needs the values of a call: compiled at the first run
        compiled = self._compile_module(loaded.module)
        signature: Signature = tuple(
            (info.name, declared_key(loaded.module, info, input_shapes)) for info in self.inputs
        )
        self._store(_Variant(signature, {}, (), (), compiled, loaded.outputs))

    def _store(self, variant: _Variant) -> None:
        self.stats.add(compilations=1)
        with self._cache_lock:
            self._next_key += 1
            self._cache[self._next_key] = variant
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)

    def _real_inputs(self) -> list[onnx.ValueInfoProto]:
        names = set(self.input_names)
        return [v for v in self.proto.graph.input if v.name in names]


def load(
    model: ModelSource,
    backend: str | Backend | Sequence[str | Backend] | None = None,
    options: dict[str, Any] | BackendOptions | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    max_probes: int = MAX_PROBES,
    verify_each: bool | None = None,
    base_dir: str | os.PathLike | None = None,
) -> Session:
    """A Session running the ONNX ``model`` on ``backend`` (None: the best installed).

    Unlike ``compile``, the result takes any input shapes and runs If/Loop/Scan whose
    conditions depend on the inputs, compiling (and caching) a specialization per call
    signature and load-time values. ``base_dir`` is the folder of the model's external data
    files (see ``load_onnx``). A list of backends splits each compilation across them
    (``compile``'s ``backend`` list).
    """
    return Session(
        model,
        backend,
        options,
        input_shapes,
        max_probes=max_probes,
        verify_each=verify_each,
        base_dir=base_dir,
    )

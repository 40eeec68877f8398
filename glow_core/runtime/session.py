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
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from glow_core.backend import Backend, BackendOptions
from glow_core.errors import GlowError, InputError, UnsupportedOpError
from glow_core.graph.function import Module
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.pipeline import choose_backend, compile
from glow_core.runtime.probe import MAX_PROBES, InputNeeded, ProbeResolver

ModelSource = str | os.PathLike | bytes | onnx.ModelProto

MAX_CACHED = 64
"""Specializations a Session keeps (least recently used dropped first)."""

Signature = tuple[tuple[str, tuple[int, ...], str], ...]


class SpecializationError(UnsupportedOpError):
    """glow could not load or compile the model for the shapes or values of one call."""


@dataclass(frozen=True)
class _InputInfo:
    name: str
    dtype: np.dtype | None  # None: the model declares no element type
    rank: int | None  # None: the model declares no shape


@dataclass
class _Variant:
    """One compiled specialization and the values it was built for."""

    signature: Signature
    static: dict[str, np.ndarray]
    answers: tuple[np.ndarray, ...]
    probes: tuple[str, ...]
    compiled: CompiledFunction


@dataclass
class SessionStats:
    """What a session did so far: compilations (final and probe) and cache hits."""

    compilations: int = 0
    probe_compilations: int = 0
    cache_hits: int = 0


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _describe(signature: Signature) -> str:
    return ", ".join(f"{name}: {np.dtype(dtype).name}{list(shape)}" for name, shape, dtype in signature)


class Session:
    """An ONNX model run by glow for any input shapes, with data-dependent control flow.

    ``run({name: array}) -> {name: array}`` compiles a specialization for the call when no
    cached one fits (see the module docstring). ``input_shapes`` compiles one right away
    for those shapes, so a model glow cannot take fails here rather than at the first run.
    """

    def __init__(
        self,
        model: ModelSource,
        backend: str | Backend | None = None,
        options: dict[str, Any] | BackendOptions | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        *,
        max_probes: int = MAX_PROBES,
        max_cached: int = MAX_CACHED,
        verify_each: bool = False,
    ):
        from glow_core.frontends.onnx.loader import _read_model

        if isinstance(model, Module):
            raise InputError("glow_core.load takes an ONNX model; compile a glow Module with compile()")
        self.proto, self.source = _read_model(model)
        self.backend, self.options = choose_backend(backend, options)
        self.max_probes, self.max_cached, self.verify_each = max_probes, max_cached, verify_each
        initializers = {t.name for t in self.proto.graph.initializer}
        self.inputs = [_input_info(v) for v in self.proto.graph.input if v.name not in initializers]
        self.input_names = [i.name for i in self.inputs]
        self.output_names = [v.name for v in self.proto.graph.output]
        self.stats = SessionStats()
        self._cache: OrderedDict[int, _Variant] = OrderedDict()
        self._next_key = 0
        self._static_names: dict[Signature, set[str]] = {}
        if input_shapes is not None or all(_fully_declared(v) for v in self._real_inputs()):
            self._compile_declared(dict(input_shapes or {}))

    # ---- running -------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for ``inputs`` (every graph input, by name)."""
        feeds = self._check(inputs)
        signature: Signature = tuple((n, tuple(feeds[n].shape), feeds[n].dtype.str) for n in self.input_names)
        known: list[np.ndarray] = []
        while True:
            variant = self._lookup(signature, feeds, known)
            if variant is None:
                variant = self._specialize(signature, feeds, known)
                return self._outputs(self._execute(variant, feeds))
            results = self._execute(variant, feeds)
            read = [results[p] for p in variant.probes]
            fresh = range(len(known), len(read))
            differ = next((i for i in fresh if not _same(read[i], variant.answers[i])), None)
            if differ is None:
                self.stats.cache_hits += 1
                return self._outputs(results)
            known = read[: differ + 1]

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.run(inputs)

    def _check(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Inputs by name, refused before anything is compiled when names, dtypes or ranks are wrong."""
        unknown = sorted(set(inputs) - set(self.input_names))
        missing = [n for n in self.input_names if n not in inputs]
        if unknown or missing:
            raise InputError(
                f"{self.source}: inputs do not match: unknown {unknown}, missing {missing}; "
                f"the model takes {self.input_names}"
            )
        feeds = {}
        for info in self.inputs:
            value = inputs[info.name]
            if not isinstance(value, np.ndarray):
                raise InputError(f"input {info.name!r} must be a numpy array, got {type(value).__name__}")
            if info.dtype is not None and value.dtype != info.dtype:
                raise InputError(
                    f"input {info.name!r} has dtype {value.dtype}, the model declares {info.dtype}; "
                    f"convert it with .astype(np.{info.dtype})"
                )
            if info.rank is not None and value.ndim != info.rank:
                raise InputError(
                    f"input {info.name!r} has shape {value.shape} (rank {value.ndim}), "
                    f"the model declares rank {info.rank}"
                )
            feeds[info.name] = np.asarray(value, order="C")
        return feeds

    def _lookup(
        self, signature: Signature, feeds: dict[str, np.ndarray], known: list[np.ndarray]
    ) -> _Variant | None:
        """The most recently used specialization that may fit: ``known`` is a prefix of its values."""
        for key in reversed(self._cache):
            variant = self._cache[key]
            if (
                variant.signature == signature
                and all(_same(feeds[n], v) for n, v in variant.static.items())
                and len(variant.answers) >= len(known)
                and all(_same(a, b) for a, b in zip(known, variant.answers, strict=False))
            ):
                self._cache.move_to_end(key)
                return variant
        return None

    def _execute(self, variant: _Variant, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        compiled = variant.compiled
        return compiled.run({n: v for n, v in feeds.items() if n in compiled.input_types})

    def _outputs(self, results: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: results[name] for name in self.output_names}

    # ---- specializing --------------------------------------------------------------------

    def _specialize(
        self, signature: Signature, feeds: dict[str, np.ndarray], known: list[np.ndarray]
    ) -> _Variant:
        """Load and compile for this call, replaying ``known`` and probing the values past it."""
        from glow_core.frontends.onnx import load_onnx

        static_names = self._static_names.setdefault(signature, set())
        shapes = {n: shape for n, shape, _ in signature}
        while True:
            static = {n: feeds[n] for n in self.input_names if n in static_names}
            resolver = ProbeResolver(feeds, known, self._compile_module, self.max_probes)
            try:
                module = load_onnx(
                    self.proto,
                    {n: s for n, s in shapes.items() if n not in static},
                    static_inputs=static,
                    resolve=resolver,
                )
                compiled = self._compile_module(module)
            except InputNeeded as need:
                static_names.add(need.name)
                continue
            except GlowError as err:
                raise SpecializationError(
                    f"{self.source}: cannot compile for inputs {_describe(signature)}: {err}"
                ) from err
            finally:
                self.stats.probe_compilations += resolver.compilations
            break
        variant = _Variant(signature, static, tuple(resolver.answers), tuple(resolver.probes), compiled)
        self._store(variant)
        return variant

    def _compile_module(self, module: Module) -> CompiledFunction:
        return compile(module, self.backend, options=self.options, verify_each=self.verify_each)

    def _compile_declared(self, input_shapes: dict[str, Sequence[int]]) -> None:
        """Compile now for the declared (or given) shapes, unless that needs input values."""
        from glow_core.frontends.onnx import LoadTimeValueError, load_onnx

        try:
            module = load_onnx(self.proto, input_shapes)
        except LoadTimeValueError:
            return  # needs the values of a call: compiled at the first run
        compiled = self._compile_module(module)
        types = {n: module.placeholders[n].type for n in self.input_names}
        signature: Signature = tuple((n, t.shape, t.dtype.str) for n, t in types.items())
        self._store(_Variant(signature, {}, (), (), compiled))

    def _store(self, variant: _Variant) -> None:
        self.stats.compilations += 1
        self._cache[self._new_key()] = variant
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)

    def _new_key(self) -> int:
        self._next_key += 1
        return self._next_key

    def _real_inputs(self) -> list[onnx.ValueInfoProto]:
        names = set(self.input_names)
        return [v for v in self.proto.graph.input if v.name in names]


def _input_info(value: onnx.ValueInfoProto) -> _InputInfo:
    tensor = value.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor.elem_type else None
    rank = len(tensor.shape.dim) if tensor.HasField("shape") else None
    return _InputInfo(value.name, dtype, rank)


def _fully_declared(value: onnx.ValueInfoProto) -> bool:
    """Whether the model gives every dimension of ``value`` (nothing symbolic to wait for)."""
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)


def load(
    model: ModelSource,
    backend: str | Backend | None = None,
    options: dict[str, Any] | BackendOptions | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    max_probes: int = MAX_PROBES,
    verify_each: bool = False,
) -> Session:
    """A Session running the ONNX ``model`` on ``backend`` (None: the best installed).

    Unlike ``compile``, the result takes any input shapes and runs If/Loop/Scan whose
    conditions depend on the inputs, compiling (and caching) a specialization per call
    signature and load-time values.
    """
    return Session(model, backend, options, input_shapes, max_probes=max_probes, verify_each=verify_each)

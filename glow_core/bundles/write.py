"""``glow_core.bundle``: compile models ahead of time into a directory a C program links.

A bundle named NAME is four files: ``NAME.o`` (one entry point per model), ``NAME.h`` (the
C API, from the manifest), ``NAME.json`` (the manifest) and ``NAME.weights.bin`` (every
model's constants, unless they are embedded in the object). Everything is compiled and
rendered in memory first; only then are the files written, each under a temporary name
and renamed into place, so a failure never leaves half a bundle behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from glow_core.backend import Backend, BackendOptions
from glow_core.bundles.code import BundleCode, BundleRequest
from glow_core.bundles.header import check_names, render_header
from glow_core.bundles.load import SHARED, link_shared_library
from glow_core.bundles.manifest import WEIGHT_MODES, EntryPoint, Manifest, TensorSlot, check_c_name
from glow_core.errors import BundleError
from glow_core.ir.instructions import IRFunction, WeightVar
from glow_core.limits import MemoryLimits, memory_limits
from glow_core.runtime.pipeline import ModelLike, choose_backend, compile_stages, load_model

OBJECT, HEADER, MANIFEST, WEIGHTS = ".o", ".h", ".json", ".weights.bin"


def bundle(
    models: ModelLike | Mapping[str, ModelLike],
    directory: str | os.PathLike[str],
    *,
    name: str | None = None,
    backend: str | Backend = "cpu",
    options: dict[str, Any] | BackendOptions | None = None,
    weights: str = "file",
    target: str | None = None,
    cpu: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    limits: MemoryLimits | None = None,
    shared: bool = False,
) -> Manifest:
    """Compile ``models`` ahead of time into a bundle in ``directory``; returns its manifest.

    ``models`` is one model (its entry point is called ``name``) or a mapping from entry
    point names to models: several models in one object, one entry point each, sharing one
    weights file. ``weights`` is ``"file"`` (NAME.weights.bin) or ``"embedded"`` (the
    object's read-only data, ``NAME_weights``). ``target`` is an LLVM triple
    (``aarch64-linux-gnu``) and ``cpu`` a CPU name for it; by default the code is for this
    machine, exactly as the JIT compiles it. ``input_shapes`` applies to every model.
    ``shared`` also links ``NAME.so`` (what ``load_bundle`` loads) with the system C
    compiler ($CC, else cc). Files of the same names in ``directory`` are replaced (and an
    earlier ``NAME.so`` removed when ``shared`` is False); nothing else there is touched.
    """
    entries = _entry_models(models, name)
    name = check_c_name(name or next(iter(entries)), "bundle name")
    check_names(name, list(entries))
    if weights not in WEIGHT_MODES:
        raise BundleError(f"weights {weights!r}: expected one of {', '.join(WEIGHT_MODES)}")
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise BundleError(
            f"output directory {str(out)!r} exists and is not a directory; give a directory "
            "(it is created when missing)"
        )
    chosen, parsed = choose_backend(backend, options)
    if type(chosen).bundle is Backend.bundle:
        chosen.bundle({}, parsed, BundleRequest(name))  # refuses, in the backend's words
    request = BundleRequest(name, target, cpu, embed_weights=weights == "embedded")
    with memory_limits(limits):
        functions = {
            entry: _ir_function(model, chosen, input_shapes, base_dir) for entry, model in entries.items()
        }
        code = chosen.bundle(functions, parsed, request)
    manifest = _manifest(name, chosen, code, functions, weights, shared)
    files = {
        name + OBJECT: code.object,
        name + HEADER: render_header(manifest).encode(),
        name + MANIFEST: manifest.to_json().encode(),
    }
    if weights == "file":
        files[name + WEIGHTS] = code.weights
    if shared:
        files[name + SHARED] = _shared_library(manifest, code.object)
    _write_all(out, files)
    if not shared:  # a library linked from an earlier bundle of this name is not this one's
        with contextlib.suppress(OSError):
            (out / (name + SHARED)).unlink(missing_ok=True)
    return manifest


def _entry_models(models: ModelLike | Mapping[str, ModelLike], name: str | None) -> dict[str, ModelLike]:
    """Entry point name -> model, every name checked as a C symbol."""
    if isinstance(models, Mapping):
        if not models:
            raise BundleError("a bundle needs at least one model")
        return {check_c_name(str(k), "entry point"): v for k, v in models.items()}
    if name is None:
        if not isinstance(models, str | os.PathLike):
            raise BundleError("give the bundle a name (name=...): the model is not a file to name it after")
        name = Path(models).stem.replace("-", "_").replace(".", "_")
    return {check_c_name(name, "bundle name"): models}


def _ir_function(
    model: ModelLike,
    backend: Backend,
    input_shapes: Mapping[str, Sequence[int]] | None,
    base_dir: str | os.PathLike[str] | None,
) -> IRFunction:
    stages = compile_stages(load_model(model, input_shapes, base_dir=base_dir), backend)
    assert stages.ir is not None
    return stages.ir


def _manifest(
    name: str,
    backend: Backend,
    code: BundleCode,
    functions: Mapping[str, IRFunction],
    weights: str,
    shared: bool,
) -> Manifest:
    import glow_core

    entries = []
    for entry, offset in zip(code.entries, code.constant_offsets, strict=True):
        ir = functions[entry.name]
        plan = ir.memory_plan
        entries.append(
            EntryPoint(
                name=entry.name,
                constant_offset=offset,
                constant_bytes=len(entry.constants),
                mutable_bytes=entry.mutable_bytes,
                activation_bytes=entry.activation_bytes,
                inputs=tuple(_slot(w, plan.placeholder_offsets[w.name]) for w in ir.inputs),
                outputs=tuple(_slot(w, plan.placeholder_offsets[w.name]) for w in ir.outputs),
                threads=entry.threads,
                shutdown=entry.shutdown,
            )
        )
    files = {"object": name + OBJECT, "header": name + HEADER, "manifest": name + MANIFEST}
    if weights == "file":
        files["weights"] = name + WEIGHTS
    if shared:
        files["shared"] = name + SHARED
    return Manifest(
        name=name,
        backend=backend.info().name,
        glow_version=glow_core.__version__,
        triple=code.triple,
        cpu=code.cpu,
        features=code.features,
        weights=weights,
        weights_bytes=len(code.weights),
        weights_sha256=hashlib.sha256(code.weights).hexdigest(),
        entries=tuple(entries),
        libraries=code.libraries,
        files=files,
    )


def _shared_library(manifest: Manifest, obj: bytes) -> bytes:
    """``NAME.so`` linked from the object (in a scratch folder: nothing is written until all is)."""
    with tempfile.TemporaryDirectory(prefix="glow-bundle-") as folder:
        scratch = Path(folder)
        (scratch / manifest.files["object"]).write_bytes(obj)
        return link_shared_library(manifest, scratch, scratch / (manifest.name + SHARED)).read_bytes()


def _slot(w: WeightVar, offset: int) -> TensorSlot:
    return TensorSlot(w.name, w.type.elem.name, tuple(w.type.shape), offset, w.type.nbytes)


def _write_all(out: Path, files: dict[str, bytes]) -> None:
    """Write every file under a temporary name in ``out``, then rename them all into place;
    on failure remove what was written (and ``out`` itself when this call created it)."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BundleError(f"cannot create the output directory {str(out)!r}: {err}") from None
    staged: list[tuple[str, Path]] = []
    try:
        for file, data in files.items():
            tmp = out / f".{file}.{secrets.token_hex(6)}.tmp"
            # os.open rather than mkstemp: the files get the umask's permissions, not 0600.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            staged.append((file, tmp))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        for file, tmp in staged:
            os.replace(tmp, out / file)
    except OSError as err:
        for _, tmp in staged:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise BundleError(f"cannot write the bundle into {str(out)!r}: {err}") from None

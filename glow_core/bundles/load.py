"""``glow_core.load_bundle``: run a bundle's entry points from Python through ctypes.

This is what a fleet of inference workers loads: a shared library linked from the bundle's
object (``NAME.so``, written by ``glow bundle --shared``, or linked here with the system C
compiler when it is missing) and the weights. Neither the compiler pipeline nor llvmlite is
imported, so a machine that runs bundles needs numpy and glow-core only, and no worker
ever compiles.

The file weights are mapped read-only (``numpy.memmap``): processes on one machine that
load the same bundle share those pages.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import secrets
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glow_core.bundles.manifest import EntryPoint, Manifest, TensorSlot
from glow_core.errors import BundleError
from glow_core.huge_pages import zeroed_bytes
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.state_pool import StatePool
from glow_core.types import ElemKind, Type

SHARED = ".so"
_POISON = 0xFF  # as the JIT: an output byte no kernel wrote reads as NaN
_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_SHUTDOWN = ctypes.CFUNCTYPE(None)
_ARCHES = {"x86_64": ("x86_64", "amd64"), "aarch64": ("aarch64", "arm64")}


def shared_library_command(manifest: Manifest, directory: Path, output: Path) -> list[str]:
    """The C compiler command that links the bundle's object into a shared library."""
    compiler = os.environ.get("CC", "cc")
    libraries = [f"-l{lib}" for lib in manifest.libraries]
    return [compiler, "-shared", "-o", str(output), str(directory / manifest.files["object"]), *libraries]


def link_shared_library(manifest: Manifest, directory: Path, output: Path) -> Path:
    """Link ``output`` from the bundle's object with the system C compiler ($CC, else cc)."""
    command = shared_library_command(manifest, directory, output)
    if shutil.which(command[0]) is None:
        raise BundleError(
            f"bundle {manifest.name!r} has no {manifest.name}{SHARED} and there is no C compiler "
            f"({command[0]!r}) to link one; link it where there is: {' '.join(command)}"
        )
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundleError(
            f"linking {output.name} from {manifest.files['object']} failed "
            f"({' '.join(command)}): {done.stderr.strip()}"
        )
    return output


def read_manifest(directory: Path, name: str | None = None) -> Manifest:
    """The manifest of the bundle ``name`` in ``directory`` (the only one there when None)."""
    if not directory.is_dir():
        raise BundleError(f"bundle directory {str(directory)!r} does not exist or is not a directory")
    if name is None:
        candidates = sorted(p for p in directory.glob("*.json") if (p.with_suffix(".h")).exists())
        if len(candidates) != 1:
            found = [p.stem for p in candidates] or "none"
            raise BundleError(f"{str(directory)!r} holds bundles {found}; name the one to load (name=...)")
        path = candidates[0]
    else:
        path = directory / f"{name}.json"
    try:
        text = path.read_text()
    except OSError as err:
        raise BundleError(f"cannot read the bundle manifest {str(path)!r}: {err}") from None
    return Manifest.from_json(text, str(path))


class LoadedBundle:
    """Every entry point of one bundle, each a CompiledFunction: ``bundle["name"].run(...)``."""

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None):
        self.directory = Path(directory)
        self.manifest = manifest = read_manifest(self.directory, name)
        _check_machine(manifest)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if "shared" in manifest.files:
            library_path = self.directory / manifest.files["shared"]
        else:  # only the manifest says which library is this bundle's: link one now
            self._scratch = tempfile.TemporaryDirectory(prefix="glow-bundle-")
            library_path = link_shared_library(
                manifest, self.directory, Path(self._scratch.name) / f"{manifest.name}{SHARED}"
            )
        library_path = self._loadable(library_path.resolve())
        try:
            self.library = ctypes.CDLL(str(library_path))
        except OSError as err:
            raise BundleError(f"cannot load {str(library_path)!r}: {err}") from None
        self.weights = self._weights()
        self.functions = {e.name: BundleFunction(self, e) for e in manifest.entries}

    def _loadable(self, path: Path) -> Path:
        """``path`` (absolute), or a private copy of it when this process has loaded another
        file from that path before.

        The dynamic loader knows a library by the path it was opened with: opening that path
        again returns the first library, even when the file there is now another bundle's (a
        bundle written again in place, or a relative path from another working directory,
        which is why the path is made absolute first). Those would run old code on the new
        weights; a copy under a fresh name is loaded as the new library it is.
        """
        try:
            about = path.stat()
        except OSError as err:
            raise BundleError(f"cannot load {str(path)!r}: {err}") from None
        identity = (about.st_dev, about.st_ino, about.st_mtime_ns, about.st_size)
        with _LOADED_GUARD:
            first = _LOADED_FILES.setdefault(str(path), identity)
        if first == identity:
            return path
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="glow-bundle-")
        copy = Path(self._scratch.name) / f"{secrets.token_hex(8)}{SHARED}"
        shutil.copyfile(path, copy)
        return copy

    def __getitem__(self, entry: str) -> BundleFunction:
        if entry not in self.functions:
            self.manifest.entry(entry)  # raises, naming the entry points there are
        return self.functions[entry]

    def __iter__(self) -> Iterator[str]:
        return iter(self.functions)

    def __len__(self) -> int:
        return len(self.functions)

    def _weights(self) -> np.ndarray:
        """The weights as a read-only byte array: the file mapped, or the object's array."""
        manifest = self.manifest
        if manifest.weights == "embedded":
            symbol = ctypes.c_uint8.in_dll(self.library, manifest.weights_symbol)
            array = (ctypes.c_uint8 * manifest.weights_bytes).from_address(ctypes.addressof(symbol))
            view = np.ctypeslib.as_array(array)
            view.flags.writeable = False
            return view
        path = self.directory / manifest.files["weights"]
        try:
            size = path.stat().st_size
        except OSError as err:
            raise BundleError(
                f"bundle {manifest.name!r}: cannot read its weights {str(path)!r}: {err}"
            ) from None
        if size != manifest.weights_bytes:
            raise BundleError(
                f"bundle {manifest.name!r}: {path.name} has {size} bytes, the manifest says "
                f"{manifest.weights_bytes}; copy the bundle again (the file is truncated or another's)"
            )
        if size == 0:
            return np.zeros(0, np.uint8)
        weights = np.memmap(path, dtype=np.uint8, mode="r")
        # A damaged weights file would give wrong answers without a sound: check it once.
        if hashlib.sha256(weights).hexdigest() != manifest.weights_sha256:
            raise BundleError(
                f"bundle {manifest.name!r}: {path.name} does not match the checksum in "
                f"{manifest.name}.json; copy the bundle again"
            )
        return weights


def load_bundle(directory: str | os.PathLike[str], name: str | None = None) -> LoadedBundle:
    """Load the bundle in ``directory`` (``name`` picks one when it holds several) for
    running from Python; see ``LoadedBundle``."""
    return LoadedBundle(directory, name)


@dataclass(frozen=True)
class _Operand:
    """What ``CompiledFunction`` reads of an IR placeholder: its name and type."""

    name: str
    type: Type


@dataclass(frozen=True)
class _Signature:
    """An entry point's name, inputs and outputs in the shape ``CompiledFunction`` takes."""

    name: str
    inputs: list[_Operand]
    outputs: list[_Operand]


def _operand(slot: TensorSlot) -> _Operand:
    return _Operand(slot.name, Type(tuple(slot.shape), ElemKind[slot.elem]))


class BundleFunction(CompiledFunction):
    """One entry point: inputs checked as every compiled function checks them, then one call."""

    def __init__(self, bundle: LoadedBundle, entry: EntryPoint):
        signature = _Signature(
            entry.name, [_operand(s) for s in entry.inputs], [_operand(s) for s in entry.outputs]
        )
        super().__init__(signature)  # type: ignore[arg-type]
        self.entry = entry
        self._bundle = bundle  # keeps the library and the weights alive
        alignment = bundle.manifest.alignment
        constants = bundle.weights[entry.constant_offset : entry.constant_offset + entry.constant_bytes]
        if constants.ctypes.data % alignment:
            # An embedded array is aligned by the object; a mapped file by the page.
            constants = zeroed_bytes(len(constants), alignment)
            constants[...] = bundle.weights[
                entry.constant_offset : entry.constant_offset + entry.constant_bytes
            ]
        self._constants = constants
        self._entry = _ENTRY(_address(bundle.library, entry.name))
        self._state_pool: StatePool[_Regions] = StatePool(lambda: _Regions(entry, alignment))
        # Threaded code keeps its worker pool in the library's globals: one call at a time,
        # across every LoadedBundle of the same library file (the loader maps it once).
        self.concurrent_runs = entry.shutdown is None
        if entry.shutdown is not None:
            self._serial = _library_lock(bundle.library, entry.name)
            shutdown = _SHUTDOWN(_address(bundle.library, entry.shutdown))
            weakref.finalize(self, shutdown)

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._state_pool.borrow() as regions:
            for view in regions.outputs.values():
                view.reshape(-1).view(np.uint8).fill(_POISON)
            for name, value in inputs.items():
                regions.inputs[name][...] = value
            self._entry(
                self._constants.ctypes.data, regions.mutable.ctypes.data, regions.activations.ctypes.data
            )
            return {name: view.copy() for name, view in regions.outputs.items()}


class _Regions:
    """One call's mutable and activation regions, aligned, with views of its inputs and outputs."""

    def __init__(self, entry: EntryPoint, alignment: int):
        self.mutable = zeroed_bytes(entry.mutable_bytes, alignment)
        self.activations = zeroed_bytes(entry.activation_bytes, alignment)
        self.inputs = {s.name: self._view(s) for s in entry.inputs}
        self.outputs = {s.name: self._view(s) for s in entry.outputs}

    def _view(self, slot: TensorSlot) -> np.ndarray:
        kind = ElemKind[slot.elem]
        raw = self.mutable[slot.offset : slot.offset + slot.nbytes]
        return raw.view(kind.dtype).reshape(slot.shape)


_LOADED_FILES: dict[str, tuple[int, int, int, int]] = {}
"""Absolute path -> (device, inode, mtime, size) of the library this process loaded from it."""
_LOADED_GUARD = threading.Lock()

_LIBRARY_LOCKS: dict[tuple[int, str], threading.RLock] = {}
_LIBRARY_LOCKS_GUARD = threading.Lock()


def _library_lock(library: ctypes.CDLL, entry: str) -> threading.RLock:
    """The one lock of ``entry`` in the loaded library (by its handle) in this process."""
    with _LIBRARY_LOCKS_GUARD:
        return _LIBRARY_LOCKS.setdefault((library._handle, entry), threading.RLock())


def _address(library: ctypes.CDLL, symbol: str) -> int:
    """The address of a function of the library (a prototype is then made for it: handing
    the library's function object itself to a prototype would wrap it as a callback)."""
    try:
        return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value  # type: ignore[return-value]
    except AttributeError:
        raise BundleError(f"{library._name} has no function {symbol!r}; relink it from the bundle") from None


def _check_machine(manifest: Manifest) -> None:
    """A bundle for another architecture is refused by name before the loader tries it."""
    arch = manifest.triple.split("-")[0]
    here = platform.machine().lower()
    if arch in _ARCHES and here not in _ARCHES[arch]:
        raise BundleError(
            f"bundle {manifest.name!r} is for {manifest.triple}, this machine is {here}; "
            "rebuild it for this machine (glow bundle without --target) or run it where it belongs"
        )

"""The contract between ``glow_core.bundle`` and a backend that writes bundles.

The core compiles each model to an IR function and hands them all to the backend's
``Backend.bundle`` with a ``BundleRequest``; the backend returns one object file with an
entry point per function and the bytes of every function's constant region
(``BundleCode``). Everything else (the header, the manifest, the files on disk) is the
core's, so every backend's bundles look the same to a C program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.ir.memory import align


@dataclass(frozen=True)
class BundleRequest:
    """What the caller asked for beyond the functions and the backend's options."""

    name: str  # the bundle's name: file names, NAME_weights, NAME_models
    triple: str | None = None  # the target, e.g. aarch64-linux-gnu; None: this machine
    cpu: str | None = None  # the target CPU (-mcpu); None: this machine's, or the triple's generic
    embed_weights: bool = False  # constants in the object's read-only data as NAME_weights


@dataclass(frozen=True)
class EntryCode:
    """One function's entry point in the object and the regions it runs on."""

    name: str  # the C symbol
    constants: bytes  # the whole constant region, as the code reads it
    mutable_bytes: int
    activation_bytes: int
    threads: int = 1
    shutdown: str | None = None  # symbol that stops the entry's worker threads, if any


@dataclass(frozen=True)
class BundleCode:
    """What a backend made: the object, the target it is for, and every entry point."""

    object: bytes
    triple: str
    cpu: str
    features: str
    entries: tuple[EntryCode, ...]
    weights: bytes  # the weights file (or embedded array): every entry's constants
    constant_offsets: tuple[int, ...]  # where each entry's constants start in ``weights``
    libraries: tuple[str, ...] = field(default=())  # link with -l<each>: m, pthread


def join_weights(regions: list[bytes]) -> tuple[bytes, tuple[int, ...]]:
    """One weights blob holding every region at an aligned offset, and each region's offset.

    Regions with identical bytes (the same model bundled twice, two entry points of one
    network at different batch sizes whose weights packed the same) are stored once.
    """
    blob = bytearray()
    offsets: list[int] = []
    placed: dict[bytes, int] = {}
    for region in regions:
        if region not in placed:
            blob.extend(bytes(align(len(blob)) - len(blob)))
            placed[region] = len(blob)
            blob.extend(region)
        offsets.append(placed[region])
    return bytes(blob), tuple(offsets)

"""What an ahead-of-time bundle holds, stated once.

The manifest is the one source of truth of a bundle: ``NAME.json`` is it serialized, the C
header ``NAME.h`` is generated from it (``header.py``), and ``load_bundle`` reads it back.
Nothing about a bundle's layout is computed a second time from the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from glow_core.errors import BundleError
from glow_core.ir.memory import ALIGNMENT

FORMAT = 1
"""Version of the manifest's shape; a loader refuses a bundle written in another one."""

WEIGHT_MODES = ("file", "embedded")
"""Where the constants go: ``NAME.weights.bin`` beside the object, or its read-only data."""

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_C_KEYWORDS = frozenset(
    [
        "auto",
        "break",
        "case",
        "char",
        "const",
        "continue",
        "default",
        "do",
        "double",
        "else",
        "enum",
        "extern",
        "float",
        "for",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "register",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "typedef",
        "union",
        "unsigned",
        "void",
        "volatile",
        "while",
        "main",
    ]
)


def check_c_name(name: str, what: str) -> str:
    """``name`` if it can be a C symbol of the bundle's API, else BundleError saying why."""
    if not _C_IDENTIFIER.fullmatch(name) or name in _C_KEYWORDS or name.startswith("glow_"):
        raise BundleError(
            f"{what} {name!r} is not usable as a C symbol: it must be an identifier "
            "([A-Za-z_][A-Za-z0-9_]*), not a C keyword or main, and not start with glow_ "
            "(glow's own symbols); pick another name"
        )
    return name


@dataclass(frozen=True)
class TensorSlot:
    """One input or output: where it lives in the mutable (placeholder) region."""

    name: str
    elem: str  # ElemKind name: float32, int64, ...
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the mutable region
    nbytes: int


@dataclass(frozen=True)
class EntryPoint:
    """One compiled model of the bundle: its C function and the sizes of its three regions.

    The function is ``void NAME(const uint8_t *constants, uint8_t *mutable, uint8_t
    *activations)``; ``constants`` is the weights at ``constant_offset``. Every region must
    start on an ``Manifest.alignment`` boundary.
    """

    name: str
    constant_offset: int
    constant_bytes: int
    mutable_bytes: int
    activation_bytes: int
    inputs: tuple[TensorSlot, ...]
    outputs: tuple[TensorSlot, ...]
    threads: int = 1
    shutdown: str | None = None  # stops the entry's worker threads (threads > 1 only)


@dataclass(frozen=True)
class Manifest:
    """A whole bundle: the target its code is for, the weights and every entry point."""

    name: str
    backend: str
    glow_version: str
    triple: str
    cpu: str
    features: str
    weights: str  # one of WEIGHT_MODES
    weights_bytes: int
    weights_sha256: str
    entries: tuple[EntryPoint, ...]
    libraries: tuple[str, ...] = ()  # what the object needs at link time: -lm, -lpthread
    alignment: int = ALIGNMENT
    format: int = FORMAT
    files: dict[str, str] = field(default_factory=dict)  # role -> file name in the bundle

    @property
    def weights_symbol(self) -> str:
        """The object's read-only array of the weights when they are embedded."""
        return f"{self.name}_weights"

    def entry(self, name: str) -> EntryPoint:
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise BundleError(
            f"bundle {self.name!r} has no entry point {name!r}; it has {[e.name for e in self.entries]}"
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        """The manifest in ``text`` (read from ``where``), or BundleError if it is not one."""
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise BundleError(
                    f"{where}: bundle format {data.get('format')!r}, this glow reads {FORMAT}; "
                    "rebuild the bundle with this glow (`glow bundle`)"
                )
            entries = tuple(_entry(e) for e in data.pop("entries"))
            data["libraries"] = tuple(data.get("libraries", ()))
            return cls(**data, entries=entries)
        except BundleError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise BundleError(
                f"{where} is not a glow bundle manifest ({type(err).__name__}: {err}); "
                "rebuild the bundle with `glow bundle`"
            ) from None


def _entry(data: dict[str, Any]) -> EntryPoint:
    slots = {k: tuple(_slot(s) for s in data.pop(k)) for k in ("inputs", "outputs")}
    return EntryPoint(**data, **slots)


def _slot(data: dict[str, Any]) -> TensorSlot:
    return TensorSlot(**{**data, "shape": tuple(data["shape"])})

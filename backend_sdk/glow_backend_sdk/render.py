"""Rendering the backend template into a new package with copier."""

from __future__ import annotations

import re
from pathlib import Path

from glow_backend_sdk import TEMPLATE_DIR
from glow_core.errors import GlowError

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def render_backend(
    name: str, destination: Path, *, vendor: str = "Your Company", device: str = "npu"
) -> Path:
    """Render ``glow-NAME`` into ``destination`` (created; must be empty) and return it."""
    if not _NAME.match(name):
        raise GlowError(
            f"backend name {name!r}: use lowercase letters, digits and _ (starting with a letter)"
        )
    destination = Path(destination)
    if destination.exists() and any(destination.iterdir()):
        raise GlowError(f"{destination} is not empty: pick a new folder with --dir")
    from copier import run_copy

    run_copy(
        str(TEMPLATE_DIR),
        str(destination),
        data={"name": name, "vendor": vendor, "device": device},
        defaults=True,
        quiet=True,
        unsafe=False,
    )
    return destination

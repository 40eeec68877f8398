"""Rendering the backend template into a new package, and updating one, with copier."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import keyword
import re
from collections.abc import Iterable
from pathlib import Path

from glow_backend_sdk.template_repo import source_path, sync_template_repo
from glow_core.errors import GlowError
from glow_core.primitives import CORE

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

GLOW_DISTRIBUTIONS = frozenset({"core", "cpu", "opencl", "interpreter", "conformance", "backend_sdk", "sdk"})
"""Names glow-py's own distributions use (``glow-cpu``, package ``glow_cpu``...): a backend
named so would clash with them wherever both are installed, even where one is not yet."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new backend, or None when it can."""
    if not _NAME.match(name):
        return "use lowercase letters, digits and _ (starting with a letter)"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "it is a Python keyword"
    if name in GLOW_DISTRIBUTIONS:
        return f"glow-py's own glow-{name.replace('_', '-')} is named so"
    taken = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="glow.backends")}
    if name in taken:
        return f"an installed backend is registered under it ({taken[name]}; `glow backends` lists them)"
    if importlib.util.find_spec(f"glow_{name}") is not None:
        return f"an installed package is already called glow_{name}"
    return None


def claimed_primitives(primitives: Iterable[str] | str | None) -> list[str]:
    """The primitives a new backend claims, in the core set's order; empty for every one.

    The template has one kernel per core primitive, so those are the names it can render;
    an unknown name (or one outside the core, such as a high-level node) is refused with
    the valid ones.
    """
    if primitives is None:
        return []
    names = [p.strip() for p in primitives.split(",")] if isinstance(primitives, str) else list(primitives)
    if not any(names):
        return []
    unknown = [repr(n) if n else "(an empty name)" for n in names if n not in CORE]
    if unknown:
        raise GlowError(
            f"--primitives: {', '.join(unknown)} is not a core primitive the template has a kernel "
            f"for; choose from {', '.join(sorted(CORE))} (or leave --primitives out for all)"
        )
    return sorted(set(names), key=sorted(CORE).index)


def render_backend(
    name: str,
    destination: Path,
    *,
    vendor: str = "Your Company",
    device: str = "npu",
    primitives: Iterable[str] | str | None = None,
) -> Path:
    """Render ``glow-NAME`` into ``destination`` (created; must be empty) and return it.

    ``primitives`` narrows what it claims to those core primitives (a kernel file each;
    a list or ``"Convolution,MatMul"``); None or empty: every core primitive.
    """
    problem = name_problem(name)
    if problem:
        raise GlowError(f"backend name {name!r}: {problem}; pick another name")
    claimed = claimed_primitives(primitives)
    destination = Path(destination)
    if destination.exists() and any(destination.iterdir()):
        raise GlowError(f"{destination} is not empty: pick a new folder with --dir")
    from copier import run_copy

    run_copy(
        source_path(sync_template_repo()),
        str(destination),
        data={"name": name, "vendor": vendor, "device": device, "primitives": ",".join(claimed)},
        vcs_ref="HEAD",
        defaults=True,
        quiet=True,
        unsafe=False,
    )
    return destination


def update_backend(project: Path) -> None:
    """Bring a rendered backend (a clean git work tree) up to the installed template.

    The vendor's own edits stay; where the template changed the same lines, copier leaves
    conflict markers (or ``.rej`` files) to resolve by hand, as ``git merge`` would.
    """
    project = Path(project)
    if not (project / ".copier-answers.yml").is_file():
        raise GlowError(f"{project} has no .copier-answers.yml: it was not rendered by glow-sdk new")
    sync_template_repo()
    from copier import run_update
    from copier.errors import UserMessageError

    try:
        run_update(str(project), vcs_ref="HEAD", defaults=True, overwrite=True, quiet=True, unsafe=False)
    except UserMessageError as err:
        raise GlowError(f"cannot update {project}: {err}") from None

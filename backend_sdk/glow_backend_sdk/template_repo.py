"""The template as a git repository, so that ``copier update`` can bring a rendered backend
up to a newer template.

copier updates a project by rendering the template version the project was made from
(the ``_commit`` in its ``.copier-answers.yml``) and the new one, and applying the
difference to the project; both versions must be commits of a git repository named by
``_src_path``. A wheel holds files, not history, so the SDK keeps that repository itself: on
every ``glow-sdk new`` and ``glow-sdk update`` the template shipped in the installed package
is committed on top of the repository (when it differs from its head) and tagged with
``TEMPLATE_VERSION``. Versions installed over time accumulate there, so the one a project
was rendered from is still a commit when a newer SDK wants to update it.

The repository lives in the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``, under
``glow-backend-sdk/template``), or where ``$GLOW_SDK_TEMPLATE_REPO`` says; the answers file
names it relative to the home directory (``~/.cache/...``), so it holds no machine's user name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import glow_backend_sdk
from glow_core.errors import GlowError

REPO_ENV = "GLOW_SDK_TEMPLATE_REPO"
"""Environment variable naming the template repository (tests point it at a temporary folder)."""

_GIT_IDENTITY = (
    "-c",
    "user.name=glow-backend-sdk",
    "-c",
    "user.email=glow-backend-sdk@localhost",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "tag.gpgsign=false",
)
"""Commits are the SDK's, not the user's: a fixed identity, never signed."""


def repo_dir() -> Path:
    """Where the template repository is (created on first use)."""
    if os.environ.get(REPO_ENV):
        return Path(os.environ[REPO_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "glow-backend-sdk" / "template"


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *_GIT_IDENTITY, *args], cwd=repo, capture_output=True, text=True, check=True
        )
    except FileNotFoundError:
        raise GlowError("git is not installed: copier keeps template versions in git") from None
    except subprocess.CalledProcessError as err:
        raise GlowError(f"git {' '.join(args)} failed in {repo}: {err.stderr.strip()}") from None
    return done.stdout.strip()


def tag() -> str:
    """The git tag of the installed template version."""
    return f"v{glow_backend_sdk.TEMPLATE_VERSION}"


def sync_template_repo() -> Path:
    """The template repository with the installed template as its head commit; returns it."""
    repo = repo_dir()
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").is_dir():
        _git(repo, "init", "--quiet")
    for entry in repo.iterdir():  # the work tree becomes exactly the installed template
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(
        glow_backend_sdk.TEMPLATE_DIR, repo, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    _git(repo, "add", "--all")
    if _git(repo, "status", "--porcelain"):
        _git(
            repo, "commit", "--quiet", "-m", f"glow-backend-sdk template {glow_backend_sdk.TEMPLATE_VERSION}"
        )
    if not _git(repo, "tag", "--list", tag()):
        _git(repo, "tag", tag())
    return repo


def source_path(repo: Path) -> str:
    """How an answers file names ``repo``: from the home directory when it is under it."""
    try:
        return "~/" + repo.resolve().relative_to(Path.home().resolve()).as_posix()
    except ValueError:
        return str(repo)

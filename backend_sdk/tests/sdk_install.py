"""Installing a rendered backend package for a test module (shared by the SDK tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def install_rendered(rendered: Path, site: Path) -> dict[str, str]:
    """``rendered`` installed with pip into the private site dir ``site`` (the venv stays
    clean); returns the environment whose PYTHONPATH finds it."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
            str(rendered),
        ],
        check=True,
        capture_output=True,
    )
    return {**os.environ, "PYTHONPATH": str(site)}

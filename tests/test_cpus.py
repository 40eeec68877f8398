"""usable_cpus: thread pools are sized by the CPUs a process may use, not the machine's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from glow_core import cpus


def test_affinity_mask_bounds_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    monkeypatch.setattr(cpus, "_cgroup_quota", lambda: None)
    assert cpus.usable_cpus() == 2


def test_cgroup_quota_caps_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(cpus, "_cgroup_quota", lambda: 3)
    assert cpus.usable_cpus() == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("150000 100000\n", 2),
        ("100000 100000", 1),
        ("20000 100000", 1),
        ("max 100000\n", None),
        ("junk", None),
    ],
)
def test_cgroup_quota_file(tmp_path: Path, text: str, expected: int | None) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(text)
    assert cpus._cgroup_quota(path) == expected


def test_missing_cgroup_file_means_no_quota(tmp_path: Path) -> None:
    assert cpus._cgroup_quota(tmp_path / "absent") is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_cpu_backend_defaults_follow_the_affinity_mask() -> None:
    """A process pinned to one CPU (as by ``taskset -c 0``) gets one inference thread and one
    LLVM compile thread by default, however many CPUs the machine has."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
        "from glow_cpu.backend import CpuOptions; o = CpuOptions();"
        "print(o.threads, o.compile_threads)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]

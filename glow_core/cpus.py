"""How many CPUs this process may really use: the default thread count of every pool.

``os.cpu_count()`` counts the machine's CPUs, not the ones a process may run on. Under
``taskset``, a container's ``--cpuset-cpus`` or a batch scheduler's affinity mask, or a
cgroup CPU quota (``docker --cpus``), a pool sized by it oversubscribes the CPUs it has:
an inference's threads meet at barriers, so one descheduled thread stalls every other.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""cgroup v2's CPU bandwidth limit of this process's group: ``"<quota> <period>"`` or
``"max <period>"``."""


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota
    (rounded up: a quota of 1.5 CPUs still runs 2 threads usefully); at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call on this platform (macOS, Windows)
        count = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        count = min(count, quota)
    return max(count, 1)


def _cgroup_quota(path: Path = CGROUP_CPU_MAX) -> int | None:
    """The cgroup's quota in whole CPUs (rounded up), or None where there is none or it
    cannot be read."""
    try:
        quota, period = path.read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None

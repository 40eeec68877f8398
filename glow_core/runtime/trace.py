"""Chrome trace-event files of partitioned runs (open them in Perfetto or chrome://tracing).

One process, one track (thread id) per device, named by the device's label. Events are
"complete" events (``ph: X``) in microseconds: one per partition run, one per boundary
transfer (on the reading device's track, from the moment the tensor was ready to the
moment its reader started: the hand-over the executor costs), and one per kernel inside a
partition run where the backend timed its kernels (glow-cpu with ``profile=True``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TraceEvent:
    track: str
    name: str
    category: str
    start: float
    """Seconds on ``time.perf_counter``'s clock."""
    seconds: float
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class TraceRecorder:
    """Events of one or more runs; one recorder per run call, so runs never share one."""

    tracks: list[str] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)
    origin: float = field(default_factory=time.perf_counter)

    def add(self, event: TraceEvent) -> None:
        if event.track not in self.tracks:
            self.tracks.append(event.track)
        self.events.append(event)

    def as_chrome(self) -> dict[str, Any]:
        """The trace as Chrome's JSON object format."""
        tids = {track: index + 1 for index, track in enumerate(self.tracks)}
        meta = [{"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "glow"}}]
        meta += [
            {"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": f"device {track}"}}
            for track, tid in tids.items()
        ]
        meta += [
            {"ph": "M", "pid": 1, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}
            for tid in tids.values()
        ]
        events = [
            {
                "ph": "X",
                "pid": 1,
                "tid": tids[e.track],
                "name": e.name,
                "cat": e.category,
                "ts": round((e.start - self.origin) * 1e6, 3),
                "dur": round(max(e.seconds, 0.0) * 1e6, 3),
                "args": e.args,
            }
            for e in self.events
        ]
        return {"traceEvents": meta + events, "displayTimeUnit": "ms"}

    def write(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.as_chrome(), f)

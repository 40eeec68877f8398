"""What the partitioner produces: devices, partitions and the boundary tensors between them.

These are plain data. The phases (``support``, ``dag``, ``memory``, ``cost``, ``manual``)
compute them; the runtime (``glow_core.runtime.partitioned``) compiles and runs them; the
CLI prints, draws and reports them. A partition's figures are estimates read from the
optimized graph (its backend's own lowering and memory plan come later, at compile time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.backend import Backend, BackendInfo, BackendOptions
from glow_core.graph.function import Function
from glow_core.graph.node import Node
from glow_core.types import Type


@dataclass(frozen=True, eq=False)
class Device:
    """One place partitions run: a backend instance, its parsed options and declared facts.

    ``label`` names the device in messages, traces and reports: the backend's name, or
    ``name:K`` when the caller's list names the same backend more than once.
    """

    label: str
    backend: Backend
    options: BackendOptions
    info: BackendInfo

    @property
    def name(self) -> str:
        """The backend's registry name (several devices may share it)."""
        return self.info.name

    @property
    def capacity(self) -> int | None:
        """Bytes this device holds: the smaller of the declared memory and the
        ``memory_bytes`` option; None when neither bounds it."""
        bounds = [b for b in (self.info.memory_bytes, self.options.memory_bytes) if b is not None]
        return min(bounds) if bounds else None


@dataclass(frozen=True)
class Boundary:
    """A tensor one partition writes and others read (a boundary placeholder on both sides)."""

    name: str
    type: Type
    producer: int
    consumers: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass
class Partition:
    """Nodes of the optimized graph that one device runs as one CompiledFunction."""

    index: int
    device: Device
    nodes: list[Node]
    """In schedule order; Save nodes of model outputs included."""
    reads: list[str] = field(default_factory=list)
    """Boundary tensors (from other partitions) and model inputs, by name."""
    writes: list[str] = field(default_factory=list)
    """Boundary tensors (for other partitions) and model outputs, by name."""
    after: set[int] = field(default_factory=set)
    """Partitions whose boundary tensors this one reads."""
    flops: int = 0
    constant_bytes: int = 0
    arena_bytes: int = 0
    """Peak live activation bytes in schedule order (an estimate of the backend's arena)."""
    placeholder_bytes: int = 0
    boundary_bytes: int = 0
    """Bytes of boundary tensors this partition reads from or writes to other partitions."""

    @property
    def memory_bytes(self) -> int:
        """What the device must hold for this partition: constants, placeholders, arena."""
        return self.constant_bytes + self.placeholder_bytes + self.arena_bytes

    @property
    def operator_count(self) -> int:
        """Nodes that compute something (the Saves of outputs excluded)."""
        return sum(1 for n in self.nodes if n.kind != "Save")

    def as_dict(self) -> dict:
        """The figures ``glow report --json`` lists per partition."""
        return {
            "index": self.index,
            "backend": self.device.name,
            "device": self.device.label,
            "nodes": self.operator_count,
            "flops": self.flops,
            "constant_bytes": self.constant_bytes,
            "arena_bytes": self.arena_bytes,
            "boundary_bytes": self.boundary_bytes,
            "after": sorted(self.after),
        }


@dataclass
class PartitionPlan:
    """A function split into partitions that form a DAG, listed in a dependency order."""

    function: Function
    devices: list[Device]
    partitions: list[Partition]
    boundaries: dict[str, Boundary]
    seconds: float = 0.0
    """Time the partitioner took (after graph optimization, before any compilation)."""

    def summary(self) -> str:
        """One line: partitions per device, boundary tensors and their bytes."""
        per_device: dict[str, list[int]] = {}
        for p in self.partitions:
            per_device.setdefault(p.device.label, []).append(p.operator_count)
        devices = ", ".join(
            f"{label} {len(counts)} ({sum(counts)} nodes)" for label, counts in per_device.items()
        )
        moved = sum(b.nbytes for b in self.boundaries.values())
        return (
            f"{len(self.partitions)} partition(s): {devices}; {len(self.boundaries)} boundary "
            f"tensor(s), {format_bytes(moved)}; partitioned in {self.seconds * 1e3:.1f} ms"
        )


def format_bytes(n: int) -> str:
    """Bytes as B, KiB or MiB, for summaries and drawings."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 2**20:.1f} MiB"

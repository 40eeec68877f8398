"""Compile figures for one model: node counts per stage, IR size, memory, stage times.

The same figures serve ``glow report`` (JSON or a table) and the docs, so the numbers a
user reads and the ones the project records are computed in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from glow_core.runtime.pipeline import Stages

if TYPE_CHECKING:
    from glow_core.partition import PartitionPlan


@dataclass(frozen=True)
class CompileReport:
    """What the pipeline did to one function."""

    backend: str
    nodes_imported: int
    nodes_optimized: int
    nodes_lowered: int
    instructions: int
    constant_bytes: int
    placeholder_bytes: int
    activation_bytes_total: int
    peak_live_bytes: int
    arena_bytes: int
    stage_seconds: dict[str, float]
    pass_seconds: dict[str, float]
    pass_node_delta: dict[str, int]
    """Nodes each graph-level step added (+) or removed (-), over all its runs (lowering too)."""
    partitions: list[dict] = field(default_factory=list)
    """One backend: one partition with the whole function (the same keys as a split's)."""

    @classmethod
    def of(cls, stages: Stages) -> CompileReport:
        assert stages.ir is not None and stages.plan is not None
        plan = stages.plan
        return cls(
            backend=stages.backend.info().name,
            nodes_imported=stages.node_counts["graph"],
            nodes_optimized=stages.node_counts["optimized"],
            nodes_lowered=stages.node_counts["lowered"],
            instructions=len(stages.ir.instrs),
            constant_bytes=plan.constant_bytes,
            placeholder_bytes=plan.placeholder_bytes,
            activation_bytes_total=plan.activation_bytes_total,
            peak_live_bytes=plan.peak_live_bytes,
            arena_bytes=plan.arena_bytes,
            stage_seconds={k: round(v, 6) for k, v in stages.seconds.items()},
            pass_seconds={k: round(v, 6) for k, v in stages.passes.seconds.items()},
            pass_node_delta=dict(stages.passes.node_delta),
            partitions=[
                {
                    "index": 0,
                    "backend": stages.backend.info().name,
                    "device": stages.backend.info().name,
                    "nodes": stages.node_counts["optimized"],
                    "flops": _flops(stages),
                    "constant_bytes": plan.constant_bytes,
                    "arena_bytes": plan.arena_bytes,
                    "boundary_bytes": 0,
                    "after": [],
                }
            ],
        )

    def as_dict(self) -> dict:
        return asdict(self)

    def as_table(self) -> str:
        """Aligned ``name  value`` lines, bytes also in MiB, times in ms."""
        lines = []
        for name, value in self.as_dict().items():
            if name == "partitions":
                continue
            if isinstance(value, dict):
                lines.append(f"{name}:")
                if name.endswith("seconds"):
                    lines += [f"  {k:<24} {v * 1e3:10.2f} ms" for k, v in value.items()]
                else:
                    lines += [f"  {k:<24} {v:+10d}" for k, v in value.items()]
            elif "bytes" in name:
                lines.append(f"{name:<26} {value:>14,d}  ({value / 2**20:.2f} MiB)")
            else:
                lines.append(f"{name:<26} {value!s:>14}")
        return "\n".join(lines) + "\n"


def _flops(stages: Stages) -> int:
    from glow_core.partition.cost import flops

    assert stages.function is not None
    return sum(flops(n) for n in stages.function.nodes)


@dataclass(frozen=True)
class PartitionedReport:
    """A model split across backends: per partition its backend, nodes, FLOPs and bytes.

    ``constant_bytes`` and ``arena_bytes`` are those of each partition's memory plan (its
    backend's pipeline run up to code generation); the partitioner's estimates, which
    decided the split, are kept beside them.
    """

    backend: str
    partition_seconds: float
    boundary_tensors: int
    boundary_bytes: int
    partitions: list[dict]

    @classmethod
    def of(cls, plan: PartitionPlan) -> PartitionedReport:
        from glow_core.runtime.partitioned import partition_module
        from glow_core.runtime.pipeline import compile_stages

        rows = []
        for p in plan.partitions:
            stages = compile_stages(partition_module(plan, p), p.device.backend)
            assert stages.plan is not None
            row = p.as_dict()
            row["estimated_constant_bytes"], row["estimated_arena_bytes"] = (
                row["constant_bytes"],
                row["arena_bytes"],
            )
            row["constant_bytes"], row["arena_bytes"] = stages.plan.constant_bytes, stages.plan.arena_bytes
            rows.append(row)
        return cls(
            backend=",".join(d.label for d in plan.devices),
            partition_seconds=round(plan.seconds, 6),
            boundary_tensors=len(plan.boundaries),
            boundary_bytes=sum(b.nbytes for b in plan.boundaries.values()),
            partitions=rows,
        )

    def as_dict(self) -> dict:
        return asdict(self)

    def as_table(self) -> str:
        """A line of totals, then one row per partition."""
        lines = [
            f"backend {self.backend}: {len(self.partitions)} partition(s), {self.boundary_tensors} boundary "
            f"tensor(s) of {self.boundary_bytes:,d} bytes, "
            f"partitioned in {self.partition_seconds * 1e3:.1f} ms",
            f"{'#':>3} {'device':<14} {'nodes':>6} {'MFLOP':>10} {'constants':>14} {'arena':>14} "
            f"{'boundary':>12}",
        ]
        for r in self.partitions:
            lines.append(
                f"{r['index']:>3} {r['device']:<14} {r['nodes']:>6} {r['flops'] / 1e6:>10.1f} "
                f"{r['constant_bytes']:>14,d} {r['arena_bytes']:>14,d} {r['boundary_bytes']:>12,d}"
            )
        return "\n".join(lines) + "\n"

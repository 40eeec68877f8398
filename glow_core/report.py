"""Compile figures for one model: node counts per stage, IR size, memory, stage times.

The same figures serve ``glow report`` (JSON or a table) and the docs, so the numbers a
user reads and the ones the project records are computed in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from glow_core.runtime.pipeline import Stages


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
    """Nodes each graph pass added (+) or removed (-), over all its runs (lowering excluded)."""

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
        )

    def as_dict(self) -> dict:
        return asdict(self)

    def as_table(self) -> str:
        """Aligned ``name  value`` lines, bytes also in MiB, times in ms."""
        lines = []
        for name, value in self.as_dict().items():
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

"""What the graph and IR optimizers do to the zoo models: the tables of docs/optimizations.md.

Run: ``python bench/optimization_figures.py [MODEL ...]`` (default: resnet50, mobilenetv2,
transformer_encoder). Prints Markdown. Counts, not times, so the figures do not depend on the
machine: nodes per stage, what each graph pass added or removed, then the IR before and after
each IR pass (instructions, activation buffers, copies), and the memory plan against the
peak-live lower bound.
"""

from __future__ import annotations

import argparse

from glow_core.backend import Backend
from glow_core.ir import generate_ir, plan_memory
from glow_core.ir.instructions import AllocActivation, IRFunction
from glow_core.ir.ir_passes import DEFAULT_IR_PIPELINE, IR_PASSES
from glow_core.model_zoo import MODELS
from glow_core.plugins import get_backend
from glow_core.runtime.pipeline import check_support, graph_stages, load_model
from glow_core.schedule import schedule

DEFAULT_MODELS = ("resnet50", "mobilenetv2", "transformer_encoder")


def _ir_counts(ir: IRFunction) -> tuple[int, int, int]:
    """(instructions, activation buffers, copies)."""
    allocs = sum(isinstance(i, AllocActivation) for i in ir.instrs)
    copies = sum(i.kind == "Copy" for i in ir.instrs)
    return len(ir.instrs), allocs, copies


def model_figures(name: str, backend: Backend) -> list[str]:
    """The Markdown section for one zoo model."""
    stages = graph_stages(load_model(MODELS[name]()), backend)
    fn = stages.function
    check_support(fn, stages.backend)
    counts = stages.node_counts
    lines = [
        f"### {name}",
        "",
        f"Nodes: imported {counts['graph']}, after graph optimization {counts['optimized']}, "
        f"after lowering and re-optimization {counts['lowered']}.",
        "",
        "| graph pass | runs that changed the graph | nodes added (+) / removed (-) |",
        "|---|---:|---:|",
    ]
    report = stages.passes
    lines += [f"| {p} | {report.changes[p]} | {report.node_delta[p]:+d} |" for p in report.changes]
    ir = generate_ir(fn, schedule(fn))
    instrs, allocs, copies = _ir_counts(ir)
    lines += [
        "",
        "| IR pass | instructions | activation buffers | copies |",
        "|---|---:|---:|---:|",
        f"| (IRGen) | {instrs} | {allocs} | {copies} |",
    ]
    for pass_name in DEFAULT_IR_PIPELINE:
        IR_PASSES[pass_name](ir)
        instrs, allocs, copies = _ir_counts(ir)
        lines.append(f"| {pass_name} | {instrs} | {allocs} | {copies} |")
    plan = plan_memory(ir)
    ratio = plan.arena_bytes / plan.peak_live_bytes if plan.peak_live_bytes else 1.0
    lines += [
        "",
        f"Memory: activation buffers total {plan.activation_bytes_total:,} B, peak live "
        f"{plan.peak_live_bytes:,} B, arena {plan.arena_bytes:,} B (arena / peak live = {ratio:.3f}).",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS), help=f"of {sorted(MODELS)}")
    parser.add_argument("--backend", default="interpreter")
    parser.add_argument(
        "--keep",
        default="",
        help="comma-separated high-level kinds the interpreter keeps (e.g. Conv,FullyConnected): "
        "the view of a backend with fused-activation kernels",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"no zoo model(s) {unknown}; available: {sorted(MODELS)}")
    if args.keep:
        from glow_interpreter.backend import InterpreterBackend

        backend: Backend = InterpreterBackend(keep=args.keep.split(","))
    else:
        backend = get_backend(args.backend)
    for name in args.models:
        print("\n".join(model_figures(name, backend)))


if __name__ == "__main__":
    main()

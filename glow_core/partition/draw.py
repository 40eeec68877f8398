"""Pictures of a partition plan: text, Graphviz DOT and a self-contained SVG.

Each shows the partitions (coloured by backend in the pictures) in dependency order and
the boundary tensors between them with their types and sizes (``glow dump --stage
partitions``). The SVG is laid out here, by level, so no Graphviz install is needed.
"""

from __future__ import annotations

from html import escape

from glow_core.partition.plan import Partition, PartitionPlan, format_bytes

PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#d9d9d9")
"""Fill colours, one per backend in the order the caller listed them."""


def backend_colours(plan: PartitionPlan) -> dict[str, str]:
    names = list(dict.fromkeys(d.name for d in plan.devices))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _title(p: Partition) -> str:
    return f"p{p.index} on {p.device.label}"


def _figures(p: Partition) -> str:
    return (
        f"{p.operator_count} nodes, {p.flops / 1e6:.1f} MFLOP, constants {format_bytes(p.constant_bytes)}, "
        f"arena {format_bytes(p.arena_bytes)}"
    )


def plan_to_text(plan: PartitionPlan) -> str:
    """Per partition: device, figures, what it reads and writes (with sizes), its node kinds."""
    lines = [plan.summary(), ""]
    for p in plan.partitions:
        lines.append(f"{_title(p)}: {_figures(p)}; after {sorted(p.after) or 'nothing'}")
        for label, names in (("reads", p.reads), ("writes", p.writes)):
            for name in names:
                boundary = plan.boundaries.get(name)
                if boundary is not None:
                    lines.append(f"  {label} {name} : {boundary.type} ({format_bytes(boundary.nbytes)})")
                else:
                    lines.append(f"  {label} {name} (model {'input' if label == 'reads' else 'output'})")
        kinds: dict[str, int] = {}
        for n in p.nodes:
            if n.kind != "Save":
                kinds[n.kind] = kinds.get(n.kind, 0) + 1
        lines.append("  nodes: " + ", ".join(f"{k} x{c}" for k, c in kinds.items()))
    return "\n".join(lines) + "\n"


def plan_to_dot(plan: PartitionPlan) -> str:
    """One box per partition, coloured by backend; an edge per boundary tensor and reader."""
    colours = backend_colours(plan)
    lines = ["digraph partitions {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled"];']
    for p in plan.partitions:
        label = f"{_title(p)}\\n{_figures(p)}"
        lines.append(f'  p{p.index} [label="{label}", fillcolor="{colours[p.device.name]}"];')
    for b in plan.boundaries.values():
        for reader in b.consumers:
            text = f"{b.name}\\n{b.type} ({format_bytes(b.nbytes)})".replace('"', "'")
            lines.append(f'  p{b.producer} -> p{reader} [label="{text}", fontsize=10];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def plan_to_svg(plan: PartitionPlan, title: str) -> str:
    """Boxes in rows by dependency depth, arrows labelled with tensors and sizes, a legend."""
    colours = backend_colours(plan)
    depth: dict[int, int] = {}
    for p in plan.partitions:  # listed in a dependency order
        depth[p.index] = max((depth[a] + 1 for a in p.after), default=0)
    rows: dict[int, list[Partition]] = {}
    for p in plan.partitions:
        rows.setdefault(depth[p.index], []).append(p)
    box_w, box_h, gap_x, gap_y, margin = 300, 48, 40, 70, 20
    width = max(len(r) for r in rows.values()) * (box_w + gap_x) + 2 * margin
    height = len(rows) * (box_h + gap_y) + 2 * margin + 40
    where: dict[int, tuple[int, int]] = {}
    for level, row in rows.items():
        for column, p in enumerate(row):
            where[p.index] = (margin + column * (box_w + gap_x), margin + 40 + level * (box_h + gap_y))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif">',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
        f'<text x="{margin}" y="{margin + 12}" font-size="14">'
        f"{escape(title)}: {escape(plan.summary())}</text>",
    ]
    legend_x = margin
    for name, colour in colours.items():
        out.append(f'<rect x="{legend_x}" y="{margin + 20}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{legend_x + 16}" y="{margin + 30}" font-size="11">{escape(name)}</text>')
        legend_x += 30 + 8 * len(name)
    for b in plan.boundaries.values():
        x0, y0 = where[b.producer]
        for reader in b.consumers:
            x1, y1 = where[reader]
            sx, sy, ex, ey = x0 + box_w / 2, y0 + box_h, x1 + box_w / 2, y1
            out.append(
                f'<line x1="{sx}" y1="{sy}" x2="{ex}" y2="{ey}" stroke="#555" marker-end="url(#arrow)"/>'
            )
            label = f"{b.name} {format_bytes(b.nbytes)}"
            out.append(
                f'<text x="{(sx + ex) / 2 + 4}" y="{(sy + ey) / 2}" font-size="10">{escape(label)}</text>'
            )
    for p in plan.partitions:
        x, y = where[p.index]
        out.append(
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="8" '
            f'fill="{colours[p.device.name]}" stroke="#333"/>'
        )
        out.append(f'<text x="{x + 8}" y="{y + 18}" font-size="12">{escape(_title(p))}</text>')
        out.append(f'<text x="{x + 8}" y="{y + 36}" font-size="10">{escape(_figures(p))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"

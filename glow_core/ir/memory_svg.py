"""A picture of a memory plan: activation buffers as boxes on time (x) by offset (y)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from glow_core.ir.memory import MemoryPlan

_WIDTH, _HEIGHT, _MARGIN = 960, 540, 48


def memory_to_svg(plan: MemoryPlan, title: str = "memory plan") -> str:
    """An SVG document: one rectangle per buffer, [start, end] x [offset, offset+size)."""
    intervals = list(plan.activations.values())
    span = max((i.end + 1 for i in intervals), default=1)
    arena = max(plan.arena_bytes, 1)
    sx = (_WIDTH - 2 * _MARGIN) / span
    sy = (_HEIGHT - 2 * _MARGIN) / arena
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        'font-family="monospace">',
        f'<text x="{_MARGIN}" y="24" font-size="14">{escape(title)}: arena {plan.arena_bytes:,} B, '
        f"peak live {plan.peak_live_bytes:,} B, sum of buffers {plan.activation_bytes_total:,} B</text>",
        f'<rect x="{_MARGIN}" y="{_MARGIN}" width="{_WIDTH - 2 * _MARGIN}" height="{_HEIGHT - 2 * _MARGIN}" '
        'fill="none" stroke="#888"/>',
    ]
    for index, iv in enumerate(sorted(intervals, key=lambda i: i.start)):
        hue = (index * 47) % 360
        x = _MARGIN + iv.start * sx
        y = _MARGIN + iv.offset * sy
        w = max((iv.end - iv.start + 1) * sx, 1.0)
        h = max(iv.size * sy, 1.0)
        label = escape(f"{iv.name}: {iv.size:,} B @ {iv.offset:,}, instructions {iv.start}-{iv.end}")
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'fill="hsl({hue},60%,70%)" stroke="#333" stroke-width="0.5"><title>{label}</title></rect>'
        )
    parts.append(
        f'<text x="{_MARGIN}" y="{_HEIGHT - 16}" font-size="12">x: instruction index (0-{span - 1}); '
        f"y: arena offset (0-{arena:,} B)</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"

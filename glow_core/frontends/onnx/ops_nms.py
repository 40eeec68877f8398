"""NonMaxSuppression: greedy box selection as fixed-shape tensor math, trimmed by a probe.

Everything but the output's length is computed in the graph on the backend:

- the suppression relation of every pair of boxes ([B, N, N]: IoU above the threshold,
  with the degenerate-box rules of the ONNX reference), from the box coordinates;
- per (batch, class), the boxes ordered by score (TopK, ties to the lower index) and the
  relation reordered to match ([B, C, N, N] by one Gather);
- the greedy pass: box r is kept when its score passes the threshold and no kept box
  before it suppresses it. That is a fixed point reached from "every valid box" in at most
  N - 1 rounds (after round t the first t + 1 boxes are final), each round one BatchMatMul
  counting the kept suppressors; then the first ``max_output_boxes_per_class`` kept boxes;
- each kept box's row (batch, class, box) written at its rank among all kept boxes.

How many rows that is depends on the data. The loader asks for that count as a load-time
value: a ``glow_core.load`` session computes it with the graph built so far on the call's
own inputs (a probe, checked again on every later call) and the output is the first
``count`` rows. Plain ``load_onnx`` without a resolver refuses with ``LoadTimeValueError``
naming the inputs to fix. The greedy rounds make the graph O(N) deep with O(N^2) work per
round, so very large box counts (thousands) are slow to compile and run.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import LoadTimeValueError, NodeContext, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind


def _corners(b: Builder, boxes: Node, center: bool) -> tuple[Node, Node, Node, Node]:
    """(x_min, x_max, y_min, y_max), each [B, N], as the ONNX reference derives them."""
    batches, n, _ = boxes.type.shape
    coord = [
        b.Reshape(b.Slice(boxes, starts=(0, 0, i), ends=(batches, n, i + 1)), shape=(batches, n))
        for i in range(4)
    ]
    if center:  # [x_center, y_center, width, height]
        half_w, half_h = b.mul(coord[2], 0.5), b.mul(coord[3], 0.5)
        return (
            b.Sub(coord[0], half_w),
            b.Add(coord[0], half_w),
            b.Sub(coord[1], half_h),
            b.Add(coord[1], half_h),
        )
    # [y1, x1, y2, x2], either corner first
    return (
        b.Min(coord[1], coord[3]),
        b.Max(coord[1], coord[3]),
        b.Min(coord[0], coord[2]),
        b.Max(coord[0], coord[2]),
    )


def _suppresses(b: Builder, boxes: Node, center: bool, threshold: Node) -> Node:
    """[B, N, N] bool: whether boxes i and j overlap with IoU above ``threshold``."""
    batches, n, _ = boxes.type.shape
    x0, x1, y0, y1 = _corners(b, boxes, center)
    rows = [b.Reshape(v, shape=(batches, n, 1)) for v in (x0, x1, y0, y1)]
    cols = [b.Reshape(v, shape=(batches, 1, n)) for v in (x0, x1, y0, y1)]
    width = b.sub(b.min(rows[1], cols[1]), b.max(rows[0], cols[0]))
    height = b.sub(b.min(rows[3], cols[3]), b.max(rows[2], cols[2]))
    inter = b.Mul(width, height)
    area = b.Mul(b.Sub(x1, x0), b.Sub(y1, y0))
    area_i, area_j = b.Reshape(area, shape=(batches, n, 1)), b.Reshape(area, shape=(batches, 1, n))
    union = b.Sub(b.add(area_i, area_j), inter)
    zero = b.splat(0.0, inter)
    positive = [build.compare(b, v, zero, "gt") for v in (width, height, inter, union)]
    positive += [build.compare(b, a, build.scalar(b, 0.0, a), "gt") for a in (area_i, area_j)]
    safe_union = b.Select(positive[3], union, b.splat(1.0, union))
    over = build.compare(b, b.Div(inter, safe_union), b.Reshape(threshold, shape=(1, 1, 1)), "gt")
    for condition in positive:
        over = build.select(b, condition, over, b.splat(False, over))
    return over


def _kept(b: Builder, order: Node, valid: Node, relation: Node, limit: Node | None) -> Node:
    """[B, C, N] bool: the boxes greedy NMS keeps, in score order (``order`` from TopK)."""
    batches, classes, n = order.type.shape
    base = np.arange(batches, dtype=np.int64).reshape(batches, 1, 1, 1)
    pairs = build.gather_at(
        b,
        relation,
        (
            base,
            b.Reshape(order, shape=(batches, classes, n, 1)),
            b.Reshape(order, shape=(batches, classes, 1, n)),
        ),
    )  # [B, C, N, N]: sorted box r against sorted box s
    earlier = build.constant(b, np.tril(np.ones((n, n), bool), k=-1).reshape(1, 1, n, n), "earlier")
    blocking = build.select(b, earlier, pairs, b.splat(False, pairs))
    weights = b.Reshape(build.convert(b, blocking, ElemKind.float32), shape=(batches * classes, n, n))
    kept = valid
    for _ in range(n - 1):
        column = b.Reshape(build.convert(b, kept, ElemKind.float32), shape=(batches * classes, n, 1))
        hits = b.Reshape(b.BatchMatMul(weights, column), shape=(batches, classes, n))
        suppressed = build.compare(b, hits, build.scalar(b, 0.0, hits), "gt")
        kept = b.Select(suppressed, b.splat(False, kept), valid)
    if limit is None:
        return b.splat(False, kept)  # max_output_boxes_per_class defaults to 0
    ranks = b.CumReduce(build.convert(b, kept, ElemKind.int64), axis=2)
    allowed = build.compare(
        b, ranks, b.Reshape(build.convert(b, limit, ElemKind.int64), shape=(1, 1, 1)), "le"
    )
    return b.Select(kept, allowed, b.splat(False, kept))


def _load_time_count(ctx: NodeContext, count: Node) -> int:
    """The number of selected boxes, from the loader's resolver (a probe), or a refusal."""
    # The resolver works on tensors by name: the count gets a private one in this scope.
    name = f"{ctx.name}/selected_count"
    ctx.scope.values[name] = count
    value = ctx.scope.known_value(name)
    if value is None:
        behind = sorted(
            ctx.scope.inputs_behind(ctx.proto.input[0]) | ctx.scope.inputs_behind(ctx.proto.input[1])
        )
        raise LoadTimeValueError(
            f"ONNX node {ctx.name!r} (NonMaxSuppression): how many boxes it selects depends on the "
            f"data and fixes the output's shape; run the model with glow_core.load (computes it per "
            f"call) or pass load_onnx(static_inputs=...) values for {behind}",
            behind,
        )
    return int(np.asarray(value).reshape(-1)[0])


@importer("NonMaxSuppression")
def _non_max_suppression(ctx: NodeContext) -> Node:
    """selected_indices [count, 3] of (batch, class, box), per batch and class in score order."""
    boxes, scores, b = ctx.node(0), ctx.node(1), ctx.b
    if boxes.type.rank != 3 or boxes.type.shape[2] != 4 or scores.type.rank != 3:
        raise ShapeError(f"boxes must be [B, N, 4] and scores [B, C, N], got {boxes.type} and {scores.type}")
    batches, classes, n = scores.type.shape
    if boxes.type.shape[:2] != (batches, n):
        raise ShapeError(f"boxes {boxes.type} and scores {scores.type} differ in batches or boxes")
    given = [ctx.node(i) if ctx.has(i) and ctx.shape(i) != (0,) else None for i in (2, 3, 4)]
    limit, iou, score_threshold = given
    iou = iou if iou is not None else b.splat(0.0, scores.type.with_shape((1,)))
    order = b.TopK(scores, k=n, axis=2, largest=True)
    base = [
        np.arange(d, dtype=np.int64).reshape(shape)
        for d, shape in ((batches, (-1, 1, 1)), (classes, (1, -1, 1)))
    ]
    if score_threshold is not None:
        sorted_scores = build.gather_at(b, scores, (base[0], base[1], order))
        valid = build.compare(b, sorted_scores, b.Reshape(score_threshold, shape=(1, 1, 1)), "gt")
    else:
        valid = b.splat(True, order.type.with_elem(ElemKind.bool))
    relation = _suppresses(b, boxes, bool(ctx.attr("center_point_box", 0)), iou)
    kept = _kept(b, order, valid, relation, limit)
    flags = b.Reshape(build.convert(b, kept, ElemKind.int64), shape=(batches * classes * n,))
    count = _load_time_count(ctx, b.ReduceSum(flags, axes=(0,)))
    if count == 0:
        raise ctx.refuse("selects no box for these inputs; glow cannot produce an empty tensor")
    # Row of each kept box: its rank among all kept boxes; the others write a spare row.
    rank = b.sub(b.CumReduce(flags, axis=0), 1)
    # A cached specialization runs on new data before its count is checked, so a rank past
    # ``count`` must stay in bounds too: it goes to the spare row as well.
    row = b.Select(b.Reshape(kept, shape=flags.type.shape), b.min(rank, count), b.splat(count, rank))
    where = b.add(
        b.mul(b.Reshape(row, shape=(flags.type.size, 1)), 3),
        build.constant(b, np.arange(3, dtype=np.int64).reshape(1, 3), "column"),
    )
    batch_ids = np.broadcast_to(base[0], (batches, classes, n)).reshape(-1, 1)
    class_ids = np.broadcast_to(base[1], (batches, classes, n)).reshape(-1, 1)
    triples = b.Concat(
        build.constant(b, batch_ids, "batch_ids"),
        build.constant(b, class_ids, "class_ids"),
        b.Reshape(order, shape=(flags.type.size, 1)),
        axis=1,
    )
    size = 3 * (count + 1)
    table = b.ScatterElements(
        b.splat(0, triples.type.with_shape((size,))),
        b.Reshape(where, shape=(3 * flags.type.size,)),
        b.Reshape(triples, shape=(3 * flags.type.size,)),
        axis=0,
    )
    return b.Reshape(b.Slice(table, starts=(0,), ends=(3 * count,)), shape=(count, 3), name=ctx.name)

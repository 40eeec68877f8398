"""Importer for TfIdfVectorizer: n-gram counts against a load-time pool.

Every (gram length, skip distance) pair is a load-time table of window positions; the
windows are gathered, compared with every pool n-gram of that length, and the full
matches summed. A 0/1 MatMul maps pool n-grams to output columns, then the weighting
(TF, IDF, TFIDF) applies. Unigrams are counted once (skips do not apply to them).
"""

from __future__ import annotations

import itertools

import numpy as np

from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.limits import current_limits
from glow_core.types import Type


def _pool(ctx: NodeContext) -> dict[int, np.ndarray]:
    """Pool n-grams by length: {n: [count, n]} in pool order."""
    pool = np.asarray(ctx.required_attr("pool_int64s"), np.int64)
    counts = [int(s) for s in ctx.required_attr("ngram_counts")]
    starts = counts + [len(pool)]
    grams = {}
    for n, (begin, end) in enumerate(itertools.pairwise(starts), start=1):
        if not 0 <= begin <= end <= len(pool) or (end - begin) % n:
            raise ctx.invalid(
                f"attribute 'ngram_counts' = {counts} does not split the {len(pool)} pool values into "
                f"whole n-grams (the {n}-grams start at {begin} and end at {end})"
            )
        if end > begin:
            grams[n] = pool[begin:end].reshape(-1, n)
    return grams


def _count(b: Builder, x: Node, grams: np.ndarray, distance: int) -> Node | None:
    """[rows, grams] occurrences of each n-gram with elements ``distance`` apart."""
    rows, width = x.type.shape
    n = grams.shape[1]
    positions = width - (n - 1) * distance
    if positions <= 0:
        return None
    table = np.arange(positions)[:, None] + distance * np.arange(n)[None, :]
    windows = b.Gather(x, build.constant(b, table.astype(np.int64), "windows"), axis=1)  # [rows, P, n]
    windows = b.Reshape(windows, shape=(rows, positions, 1, n))
    pool = build.constant(b, grams.reshape(1, 1, *grams.shape).astype(x.type.dtype), "pool")
    equal = b.Convert(build.compare(b, windows, pool, "eq"), elem="float32")  # [rows, P, g, n]
    full = b.Compare(
        b.ReduceSum(equal, axes=(3,)),
        b.splat(float(n), Type((rows, positions, grams.shape[0], 1))),
        predicate="eq",
    )
    hits = b.ReduceSum(b.Convert(full, elem="float32"), axes=(1,))  # [rows, 1, g, 1]
    return b.Reshape(hits, shape=(rows, grams.shape[0]))


@importer("TfIdfVectorizer", ranks={0: Rank.between(1, 2)})
def _tfidf_vectorizer(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    if ctx.attr("pool_strings"):
        raise ctx.refuse("string pools are not supported (glow has no string tensors)")
    one_row = x.type.rank == 1
    if one_row:
        x = b.Reshape(x, shape=(1, x.type.shape[0]))
    low, high = ctx.int_attr("min_gram_length", 1, low=1), ctx.int_attr("max_gram_length", 1, low=1)
    skips = ctx.int_attr("max_skip_count", 0, low=0)
    pool = _pool(ctx)
    indexes = [int(i) for i in ctx.required_attr("ngram_indexes")]
    total = sum(len(g) for g in pool.values())
    if len(indexes) != total or min(indexes, default=0) < 0:
        raise ctx.invalid(
            f"attribute 'ngram_indexes' must give each of the {total} pool n-grams an output column >= 0, "
            f"got {len(indexes)} indexes"
        )
    out = max(indexes, default=-1) + 1
    current_limits().check_tensor("the n-gram to column table", (len(indexes), out), 4)
    mapping = np.zeros((len(indexes), out), np.float32)
    mapping[np.arange(len(indexes)), indexes] = 1.0
    counts, offset = [], 0
    for n in sorted(pool):
        grams = pool[n]
        if low <= n <= high:
            per_distance = [_count(b, x, grams, d) for d in (range(1, 2) if n == 1 else range(1, skips + 2))]
            terms = [t for t in per_distance if t is not None]
            rows = mapping[offset : offset + len(grams)]
            if terms:
                total = terms[0]
                for t in terms[1:]:
                    total = b.Add(total, t)
                counts.append(b.MatMul(total, build.constant(b, rows, f"columns{n}")))
        offset += len(grams)
    y = counts[0] if counts else b.splat(0.0, Type((x.type.shape[0], out)))
    for c in counts[1:]:
        y = b.Add(y, c)
    y = _weighted(ctx, y)
    return b.Reshape(y, shape=(out,), name=ctx.name) if one_row else y


def _weighted(ctx: NodeContext, counts: Node) -> Node:
    b, mode = ctx.b, ctx.attr("mode", "TF")
    weights = ctx.attr("weights")
    if mode == "TF":
        return counts
    w = build.constant(b, np.asarray(weights, np.float32).reshape(1, -1), "weights") if weights else None
    if mode == "TFIDF":
        return b.mul(counts, w) if w is not None else counts
    present = b.Compare(b.splat(0.0, counts), counts, predicate="lt")
    value = b.broadcast_to(w, counts.type.shape) if w is not None else b.splat(1.0, counts)
    return b.Select(present, value, b.splat(0.0, counts))

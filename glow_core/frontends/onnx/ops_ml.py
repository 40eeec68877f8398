"""Importers for the ``ai.onnx.ml`` domain: Binarizer, ArrayFeatureExtractor, LabelEncoder, TreeEnsemble.

A tree ensemble is static data (the attributes), so it becomes dense linear algebra with
no per-sample control flow. Each interior node's test is one column of a [N, nodes] bool
matrix (a Gather of the tested features, then a Compare per split mode). A leaf is reached
when every test on its path went its way; counting the tests that went the other way is a
MatMul of the tests (as 0/1) with a load-time [nodes, paths] matrix of +-1 entries, and a
path is taken exactly when that count is 0. The reached paths, as 0/1, times a load-time
[paths, targets] weight matrix give the sum (or average) over trees; MIN and MAX gather the
reached weights of each target and reduce them. Every count is a small integer, exact in
any float kind.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.label_mapping import label_mapping
from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind

ML_DOMAIN = "ai.onnx.ml"


@importer("Binarizer", domain=ML_DOMAIN)
def _binarizer(ctx: NodeContext) -> Node:
    """1 where x > threshold, else 0, in x's element kind (NaN gives 0)."""
    x, b = ctx.node(0), ctx.b
    threshold = b.splat(float(ctx.attr("threshold", 0.0)), x)
    above = b.Compare(threshold, x, predicate="lt")
    return b.Select(above, b.splat(1, x), b.splat(0, x), name=ctx.name)


@importer("ArrayFeatureExtractor", domain=ML_DOMAIN)
def _array_feature_extractor(ctx: NodeContext) -> Node:
    """x[..., indices] with the indices flattened; a 1-D x gives one row, as onnxruntime does."""
    x, indices, b = ctx.node(0), ctx.node(1), ctx.b
    flat = b.Reshape(build.convert(b, indices, ElemKind.int64), shape=(indices.type.size,))
    picked = b.Gather(x, flat, axis=-1)
    if x.type.rank == 1:
        return b.Reshape(picked, shape=(1, indices.type.size), name=ctx.name)
    return picked


@importer("LabelEncoder", domain=ML_DOMAIN)
def _label_encoder(ctx: NodeContext) -> Node:
    """Numeric keys to numeric values as a lookup built from Compare, ReduceSum and Gather.

    Every element is compared with every (unique) key: the one hit, numbered from 1, is the
    position in a table holding the default first, then the values; no hit gives 0, the
    default. The gather copies the values bit for bit (-0.0 and NaN values included), and a
    NaN key matches NaN inputs. Costs size x keys comparisons, fine for label vocabularies.
    String keys or values run on the host (``glow_core.runtime.host_ops``, through ``glow_core.load``).
    """
    x, b = ctx.node(0), ctx.b
    mapping = label_mapping(ctx.attrs, False, ctx.refuse)
    if mapping.string_keys or mapping.string_values:
        raise ctx.refuse(
            "string keys or values run on the host, which a glow_core.load session provides; "
            "open the model with glow_core.load instead of compiling it"
        )
    dtype, shape = x.type.dtype, x.type.shape
    keys = mapping.keys.astype(dtype)
    wide = mapping.keys.astype(np.float64)
    nan = np.isnan(wide)
    # A key x's kind cannot hold (1.5 for an int64 input) never matches: drop it.
    kept = (keys.astype(np.float64) == wide) | (nan & np.isnan(keys.astype(np.float64)))
    keys, values = keys[kept], mapping.values[kept]
    table = build.constant(b, np.concatenate([mapping.default.reshape(1), values]), "table")
    count = len(keys)
    if count == 0:
        return b.Gather(table, b.splat(0, x.type.with_elem(ElemKind.int64)), axis=0, name=ctx.name)
    column = (1,) * len(shape) + (count,)
    hits = build.compare(
        b, b.Reshape(x, shape=(*shape, 1)), build.constant(b, keys.reshape(column), "keys"), "eq"
    )
    if nan[kept].any():
        is_nan = build.logical_not(b, b.Compare(x, x, predicate="eq"))
        nan_column = build.constant(b, nan[kept].reshape(column), "nan_keys")
        hits = build.select(b, nan_column, b.Reshape(is_nan, shape=(*shape, 1)), hits)
    numbers = build.constant(b, np.arange(1, count + 1, dtype=np.int64).reshape(column), "positions")
    numbered = b.mul(build.convert(b, hits, ElemKind.int64), numbers)
    index = b.Reshape(b.ReduceSum(numbered, axes=(len(shape),)), shape=shape)
    return b.Gather(table, index, axis=0, name=ctx.name)


# ---- TreeEnsemble (ai.onnx.ml opset 5) ---------------------------------------------------


class Mode(enum.IntEnum):
    """``nodes_modes``: how a node compares feature x with its split s (true branch if it holds)."""

    LEQ = 0
    LT = 1
    GTE = 2
    GT = 3
    EQ = 4
    NEQ = 5
    MEMBER = 6


# Mode -> the ONNX-style predicate of ``build.compare(x, split, predicate)``.
_PREDICATE = {Mode.LEQ: "le", Mode.LT: "lt", Mode.GTE: "ge", Mode.GT: "gt", Mode.EQ: "eq", Mode.NEQ: "ne"}
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


@dataclass(frozen=True)
class Forest:
    """The ensemble's attributes, checked, with one entry per root-to-leaf path."""

    features: np.ndarray
    splits: np.ndarray
    modes: list[Mode]
    members: dict[int, list[float]]
    """Interior node -> its set (MEMBER nodes only)."""
    missing_true: np.ndarray
    paths: list[tuple[list[tuple[int, bool]], int]]
    """(the (node, went true) tests on the way, the leaf index) for every path."""
    leaf_targets: np.ndarray
    leaf_weights: np.ndarray
    trees: int
    targets: int


def _read_forest(ctx: NodeContext) -> Forest:
    """The ensemble's attributes, checked for consistency, and every root-to-leaf path."""
    features = np.asarray(ctx.required_attr("nodes_featureids"), np.int64)
    count = len(features)
    splits = np.asarray(ctx.required_attr("nodes_splits"), np.float64).reshape(-1)
    modes = [Mode(int(m)) for m in np.asarray(ctx.required_attr("nodes_modes")).reshape(-1)]
    true_ids = [int(v) for v in ctx.required_attr("nodes_truenodeids")]
    false_ids = [int(v) for v in ctx.required_attr("nodes_falsenodeids")]
    true_leaf = [bool(v) for v in ctx.required_attr("nodes_trueleafs")]
    false_leaf = [bool(v) for v in ctx.required_attr("nodes_falseleafs")]
    missing = np.asarray(ctx.attr("nodes_missing_value_tracks_true", [0] * count), bool).reshape(-1)
    lengths = [len(a) for a in (splits, modes, true_ids, false_ids, true_leaf, false_leaf, missing)]
    if any(n != count for n in lengths):
        raise ShapeError(f"the nodes_* attributes differ in length: {[count, *lengths]}")
    leaf_targets = np.asarray(ctx.required_attr("leaf_targetids"), np.int64)
    leaf_weights = np.asarray(ctx.required_attr("leaf_weights"), np.float64).reshape(-1)
    if len(leaf_targets) != len(leaf_weights):
        raise ShapeError(f"{len(leaf_targets)} leaf_targetids but {len(leaf_weights)} leaf_weights")
    targets = int(ctx.required_attr("n_targets"))
    if len(leaf_targets) and not 0 <= leaf_targets.min() <= leaf_targets.max() < targets:
        raise ShapeError(f"leaf_targetids {leaf_targets.tolist()} are not all below n_targets={targets}")
    members = _members(ctx, modes)
    roots = [int(r) for r in ctx.required_attr("tree_roots")]
    paths: list[tuple[list[tuple[int, bool]], int]] = []

    def walk(node: int, tests: list[tuple[int, bool]]) -> None:
        if not 0 <= node < count or any(node == n for n, _ in tests):
            raise ctx.refuse(f"interior node {node} is out of range or on a cycle")
        for went, child, is_leaf in ((True, true_ids, true_leaf), (False, false_ids, false_leaf)):
            step = [*tests, (node, went)]
            if is_leaf[node]:
                if not 0 <= child[node] < len(leaf_weights):
                    raise ctx.refuse(f"leaf {child[node]} of node {node} is out of range")
                paths.append((step, child[node]))
            else:
                walk(child[node], step)

    for root in roots:
        if true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]:
            paths.append(([], true_ids[root]))  # a tree that is a single leaf
        else:
            walk(root, [])
    return Forest(
        features, splits, modes, members, missing, paths, leaf_targets, leaf_weights, len(roots), targets
    )


def _members(ctx: NodeContext, modes: Sequence[Mode]) -> dict[int, list[float]]:
    """Each MEMBER node's set: ``membership_values`` holds them in node order, NaN-separated."""
    member_nodes = [i for i, m in enumerate(modes) if m is Mode.MEMBER]
    if not member_nodes:
        return {}
    values = np.asarray(ctx.attr("membership_values", []), np.float64).reshape(-1)
    sets: list[list[float]] = [[]]
    for v in values:
        if math.isnan(v):
            sets.append([])
        else:
            sets[-1].append(float(v))
    sets = sets[: len(member_nodes)]
    if len(sets) != len(member_nodes) or np.isnan(values).sum() != len(member_nodes):
        raise ctx.refuse(
            f"membership_values must hold one NaN-terminated set per MEMBER node ({len(member_nodes)})"
        )
    return dict(zip(member_nodes, sets, strict=True))


def _tests(b: Builder, x: Node, forest: Forest) -> Node:
    """[N, nodes] bool: whether each sample takes each interior node's true branch."""
    dtype = x.type.dtype
    values = b.Gather(x, build.constant(b, forest.features, "features"), axis=1)
    splits = build.constant(b, forest.splits.astype(dtype), "splits")
    modes = np.asarray([int(m) for m in forest.modes])
    result: Node | None = None
    for mode in sorted(set(forest.modes)):
        if mode is Mode.MEMBER:
            holds = _membership(b, x, forest)
        else:
            holds = build.compare(b, values, splits, _PREDICATE[mode])
        if result is None:
            result = holds
        else:
            mask = build.constant(b, (modes == int(mode)).reshape(1, -1), f"mode{int(mode)}")
            result = build.select(b, mask, holds, result)
    assert result is not None  # a forest has at least one interior node here
    if forest.missing_true.any():
        # A NaN feature fails every comparison but NEQ; a node tracking missing values
        # sends it to the true branch whatever the comparison said.
        nan = build.logical_not(b, b.Compare(values, values, predicate="eq"))
        tracks = build.broadcast(
            b, build.constant(b, forest.missing_true.reshape(1, -1), "missing_true"), nan
        )[0]
        tracked = b.Select(nan, tracks, b.splat(False, nan))
        result = b.Select(tracked, b.splat(True, tracked), result)
    return result


def _membership(b: Builder, x: Node, forest: Forest) -> Node:
    """[N, nodes] bool: whether each MEMBER node's feature is one of its set's values.

    Every (node, value) pair is one column of equality tests; a load-time [pairs, nodes]
    0/1 matrix counts the hits per node.
    """
    pairs = [(node, value) for node, values in forest.members.items() for value in values]
    count = len(forest.modes)
    if not pairs:
        return b.splat(False, x.type.with_shape((x.type.shape[0], count)).with_elem(ElemKind.bool))
    dtype = x.type.dtype
    columns = np.asarray([forest.features[node] for node, _ in pairs], np.int64)
    values = b.Gather(x, build.constant(b, columns, "member_features"), axis=1)
    wanted = build.constant(b, np.asarray([v for _, v in pairs], dtype), "member_values")
    hits = build.convert(b, build.compare(b, values, wanted, "eq"), x.type.elem)
    owner = np.zeros((len(pairs), count), dtype)
    owner[np.arange(len(pairs)), [node for node, _ in pairs]] = 1
    counts = b.MatMul(hits, build.constant(b, owner, "member_owner"))
    return build.compare(b, counts, build.scalar(b, 0, counts), "gt")


def _paths_taken(b: Builder, x: Node, forest: Forest) -> Node:
    """[N, paths] bool: whether each sample ends at each root-to-leaf path."""
    dtype = x.type.dtype
    n = x.type.shape[0]
    signs = np.zeros((len(forest.modes), len(forest.paths)), dtype)
    base = np.zeros((1, len(forest.paths)), dtype)
    for column, (tests, _) in enumerate(forest.paths):
        for node, went_true in tests:
            # A test went the other way when (went true and it is 0) or (went false and it is 1).
            signs[node, column] += -1 if went_true else 1
            base[0, column] += 1 if went_true else 0
    if not forest.modes:
        return b.splat(True, x.type.with_shape((n, len(forest.paths))).with_elem(ElemKind.bool))
    ones = build.convert(b, _tests(b, x, forest), x.type.elem)
    wrong = b.add(
        b.MatMul(ones, build.constant(b, signs, "path_signs")), build.constant(b, base, "path_base")
    )
    return build.compare(b, wrong, build.scalar(b, 0, wrong), "eq")


@importer("TreeEnsemble", domain=ML_DOMAIN)
def _tree_ensemble(ctx: NodeContext) -> Node:
    """Every tree of the ensemble at once: the tests, the paths taken, the aggregate per target."""
    x, b = ctx.node(0), ctx.b
    if x.type.rank != 2 or not x.type.elem.is_float:
        raise ctx.refuse(f"input must be a [N, features] float tensor, got {x.type}")
    post = int(ctx.attr("post_transform", 0))
    if post != 0:
        raise ctx.refuse(f"post_transform {post} is not supported (only 0, NONE)")
    how = int(ctx.attr("aggregate_function", 1))
    if how not in range(len(_AGGREGATES)):
        raise ctx.refuse(f"aggregate_function {how} is not one of 0 to 3 ({', '.join(_AGGREGATES)})")
    forest = _read_forest(ctx)
    if forest.features.size and forest.features.max() >= x.type.shape[1]:
        raise ShapeError(f"a node tests feature {forest.features.max()}, but input {x.type} has fewer")
    taken = _paths_taken(b, x, forest)
    return _combine(b, x, taken, forest, _AGGREGATES[how], ctx.name)


def _combine(b: Builder, x: Node, taken: Node, forest: Forest, how: str, name: str) -> Node:
    """[N, targets]: the weights of the paths taken, summed, averaged, or min/max per target."""
    dtype = x.type.dtype
    leaves = [leaf for _, leaf in forest.paths]
    weights = forest.leaf_weights[leaves]
    targets = forest.leaf_targets[leaves]
    if how in ("SUM", "AVERAGE"):
        table = np.zeros((len(leaves), forest.targets), np.float64)
        np.add.at(table, (np.arange(len(leaves)), targets), weights)
        if how == "AVERAGE":
            table /= forest.trees
        ones = build.convert(b, taken, x.type.elem)
        return b.MatMul(ones, build.constant(b, table.astype(dtype), "leaf_table"), name=name)
    # MIN is MAX of the negated weights: one reduction, and the result negated back.
    sign = -1.0 if how == "MIN" else 1.0
    lowest = float(np.finfo(dtype).min)
    candidates = build.select(
        b,
        taken,
        build.constant(b, (sign * weights).astype(dtype).reshape(1, -1), "leaf_weights"),
        build.scalar(b, lowest, x),
    )
    n = x.type.shape[0]
    padded = b.Concat(candidates, b.splat(lowest, x.type.with_shape((n, 1))), axis=1)
    per_target = [np.flatnonzero(targets == t) for t in range(forest.targets)]
    width = max(1, *(len(p) for p in per_target))
    table = np.full((forest.targets, width), len(leaves), np.int64)  # the padding column
    for t, columns in enumerate(per_target):
        table[t, : len(columns)] = columns
    gathered = b.Gather(padded, build.constant(b, table, "target_columns"), axis=1)
    if how == "MIN":
        best = b.Reshape(b.ReduceMax(gathered, axes=(2,)), shape=(n, forest.targets))
        return build.negate(b, best, name=name)
    return b.Reshape(b.ReduceMax(gathered, axes=(2,)), shape=(n, forest.targets), name=name)

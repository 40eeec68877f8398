"""The importer table: one importer function per ONNX op type, registered with ``@importer``.

The loader, the up-front support check and ``SUPPORTED_OPS`` all read the same table, so an
op is never listed twice. An importer receives a ``NodeContext`` (context.py) and returns glow
values (values.py): a ``Node`` for run-time tensors, or a numpy array for tensors known at
load time (these stay arrays until a run-time node needs them, so shape arithmetic never
reaches the graph). Importers import all of these names from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from glow_core.frontends.onnx.context import NodeContext, attribute_value, elem_kind_of, node_name
from glow_core.frontends.onnx.values import (
    EMPTY_OPTIONAL,
    AnyValue,
    EmptyOptional,
    LoadTimeValueError,
    Rank,
    RankRule,
    Scope,
    SequenceValue,
    Value,
    as_rank,
    kind_of,
)

__all__ = [  # the importers' one import line; the values and the context live in their own modules
    "EMPTY_OPTIONAL",
    "IMPORTERS",
    "AnyValue",
    "EmptyOptional",
    "FoldPolicy",
    "ImportResult",
    "Importer",
    "LoadTimeValueError",
    "NodeContext",
    "Rank",
    "RankRule",
    "Scope",
    "SequenceValue",
    "Value",
    "as_rank",
    "attribute_value",
    "elem_kind_of",
    "importer",
    "kind_of",
    "node_name",
]

ImportResult = AnyValue | Sequence[AnyValue | None]
FoldPolicy = Literal["always", "int"] | None


@dataclass(frozen=True, slots=True)
class Importer:
    """One table entry: the function and when the node may be folded at load time.

    ``fold="always"`` folds whenever every input is known at load time; ``fold="int"``
    only when those inputs are integers or booleans too (shape arithmetic), so float math
    on weights stays in the graph where the compiler's own folding sees it.
    """

    op_type: str
    fn: Callable[[NodeContext], ImportResult]
    fold: FoldPolicy
    domain: str = ""
    ranks: tuple[tuple[int, Rank], ...] = ()


IMPORTERS: dict[str, Importer] = {}


def importer(
    *op_types: str,
    fold: FoldPolicy = None,
    domain: str = "",
    ranks: Mapping[int, RankRule] | None = None,
) -> Callable[[Callable], Callable]:
    """Register ``fn`` as the importer of ``op_types`` (refusing a second registration).

    ``domain`` is "" (the default ONNX domain) except for the few preview-domain ops glow
    imports (``ai.onnx.preview``). ``ranks`` maps input positions to the ranks ONNX allows
    there; the loader refuses a present tensor input of another rank before the importer
    (or load-time folding) sees it (``NodeContext.check_ranks``).
    """
    rules = tuple(sorted((index, as_rank(rule)) for index, rule in (ranks or {}).items()))

    def register(fn: Callable[[NodeContext], ImportResult]) -> Callable[[NodeContext], ImportResult]:
        for op_type in op_types:
            if op_type in IMPORTERS:
                raise TypeError(f"ONNX op {op_type!r} has two importers")
            IMPORTERS[op_type] = Importer(op_type, fn, fold, domain, rules)
        return fn

    return register

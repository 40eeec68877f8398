"""Input shapes on the command line: ``--shape NAME=D1,D2``, ``--batch N``, and what the model
leaves symbolic, said before anything runs.

glow compiles for static shapes. A model whose first dimension is symbolic (``N``,
``batch``) is compiled with batch 1 unless told otherwise; the CLI says so on stderr before
compiling rather than running "as if it were 1" in silence. Any other symbolic dimension
must come from ``--shape`` (the loader refuses it by name).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from glow_core.errors import InputError


def parse_shapes(pairs: Sequence[str]) -> dict[str, list[int]]:
    """``--shape NAME=D1,D2,...`` pairs as a dict."""
    shapes = {}
    for pair in pairs:
        name, sep, dims = pair.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise InputError(f"--shape {pair!r}: expected NAME=D1,D2,...") from None
        if not sep or not name:
            raise InputError(f"--shape {pair!r}: expected NAME=D1,D2,...")
    return shapes


def _declared_dims(value: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension] | None:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type" or not value.type.tensor_type.HasField("shape"):
        return None
    return list(value.type.tensor_type.shape.dim)


def _dim_text(dim: onnx.TensorShapeProto.Dimension) -> str:
    return repr(dim.dim_param) if dim.dim_param else "unknown"


def resolve_shapes(
    model: onnx.ModelProto, given: Sequence[str], batch: int | None = None
) -> tuple[dict[str, list[int]], list[str]]:
    """The shapes to compile ``model`` for, and notes for the user.

    ``given`` are ``--shape`` pairs (they win); ``batch`` (``--batch``) fills a symbolic first
    dimension, which is otherwise 1 with a note naming the input and the dimension. A name
    that is not an input, or a ``--batch`` against a fixed first dimension, is an error that
    names the flag.
    """
    shapes = parse_shapes(given)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    names = [v.name for v in inputs]
    for name in shapes:
        if name not in names:
            raise InputError(
                f"--shape {name}=...: the model has no input {name!r}; its inputs: {', '.join(names)}"
            )
    notes = []
    for value in inputs:
        dims = _declared_dims(value)
        if value.name in shapes or not dims:
            continue  # given, or no shape at all / not a tensor: the loader says what it needs
        first = dims[0]
        if first.HasField("dim_value"):
            if batch is not None and first.dim_value != batch:
                raise InputError(
                    f"--batch {batch}: input {value.name!r} has a fixed first dimension of "
                    f"{first.dim_value}; --batch sets a symbolic one only (re-export the model with a "
                    "dynamic batch axis)"
                )
            continue
        rest = [d.dim_value if d.HasField("dim_value") else None for d in dims[1:]]
        if None in rest:
            continue  # a symbolic inner dimension: the loader asks for --shape by name
        chosen = batch if batch is not None else 1
        shapes[value.name] = [chosen, *rest]  # type: ignore[list-item]
        source = "--batch" if batch is not None else "the default; --batch N or --shape to choose"
        notes.append(
            f"note: input {value.name!r} dimension 0 is symbolic ({_dim_text(first)}): compiling with "
            f"{chosen} ({source})"
        )
    return shapes, notes

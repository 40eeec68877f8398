"""The ONNX node tests shipped with the installed onnx, loaded once per process.

Older onnx wheels ship them as data directories (``onnx/backend/test/data/node/<case>/``
with ``model.onnx`` and ``test_data_set_N/{input,output}_M.pb``); newer ones ship only the
generators, which ``onnx.backend.test.loader`` runs in memory (about ten seconds; their
result is kept on disk, ``node_test_cache``, so a run after the first loads it). Both
end as the same ``NodeTest`` values; a directory can also be given explicitly (a source
checkout's data, or another onnx version's).
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.backend.test
from onnx import numpy_helper

from glow_conformance import node_test_cache
from glow_core.errors import GlowError

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")

DataSet = tuple[list[Any], list[Any]]


@dataclass(frozen=True, eq=False)
class NodeTest:
    """One ONNX node test: the model, its input/output data sets and tolerances."""

    name: str
    op_type: str
    model: onnx.ModelProto
    data_sets: tuple[DataSet, ...]
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL


def installed_node_dir() -> Path:
    """Where onnx wheels that ship node-test data keep it."""
    return Path(onnx.backend.test.__file__).parent / "data" / "node"


@functools.cache
def load_node_tests(data_dir: str | None = None) -> tuple[NodeTest, ...]:
    """Every node test, sorted by name: from ``data_dir``, the installed data, or the generators."""
    directory = Path(data_dir) if data_dir else installed_node_dir()
    if directory.is_dir():
        raw = [_read_case_dir(d) for d in sorted(directory.iterdir()) if (d / "model.onnx").is_file()]
    elif data_dir:
        raise GlowError(f"ONNX node-test directory {data_dir!r} does not exist")
    else:
        raw = node_test_cache.cached(_generate)
    models = {name: model for name, model, *_ in raw}
    tests = [
        NodeTest(name, _op_type(name, models), model, data, rtol, atol)
        for name, model, data, rtol, atol in raw
    ]
    return tuple(sorted(tests, key=lambda t: t.name))


_Raw = tuple[str, onnx.ModelProto, tuple[DataSet, ...], float, float]


def _generate() -> list[_Raw]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the generators' own overflow/divide warnings
        cases = load_model_tests(kind="node")
    raw = []
    for case in cases:
        data = tuple(
            ([_value(v) for v in ins], [_value(v) for v in outs]) for ins, outs in case.data_sets or ()
        )
        raw.append((case.name, case.model, data, case.rtol, case.atol))
    return raw


def _value(value: Any) -> Any:
    """Arrays as numpy arrays, sequences as lists of them, absent optionals as None."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if value is None or isinstance(value, np.ndarray):
        return value
    return np.asarray(value)


def _read_case_dir(case_dir: Path) -> _Raw:
    model = onnx.load(str(case_dir / "model.onnx"))
    data = []
    for data_dir in sorted(case_dir.glob("test_data_set_*")):
        inputs = _read_values(data_dir, "input", list(model.graph.input))
        outputs = _read_values(data_dir, "output", list(model.graph.output))
        data.append((inputs, outputs))
    return case_dir.name, model, tuple(data), DEFAULT_RTOL, DEFAULT_ATOL


def _read_values(data_dir: Path, prefix: str, infos: list[onnx.ValueInfoProto]) -> list[Any]:
    values = []
    index = 0
    while (data_dir / f"{prefix}_{index}.pb").is_file():
        content = (data_dir / f"{prefix}_{index}.pb").read_bytes()
        values.append(_decode(content, infos[index].type if index < len(infos) else None))
        index += 1
    return values


def _decode(content: bytes, type_proto: onnx.TypeProto | None) -> Any:
    """One stored value, read as the graph declares it (tensor, sequence or optional)."""
    if type_proto is not None and type_proto.HasField("sequence_type"):
        sequence = onnx.SequenceProto()
        sequence.ParseFromString(content)
        return _value(numpy_helper.to_list(sequence))
    if type_proto is not None and type_proto.HasField("optional_type"):
        optional = onnx.OptionalProto()
        optional.ParseFromString(content)
        return _value(numpy_helper.to_optional(optional))
    tensor = onnx.TensorProto()
    tensor.ParseFromString(content)
    return numpy_helper.to_array(tensor)


def _op_type(name: str, models: dict[str, onnx.ModelProto]) -> str:
    """The operator a test is about: its graph's one op type; an ``_expanded`` test (the op's
    function body, many ops) counts under the op of the test it expands."""
    model = models.get(_EXPANDED.sub("", name), models[name])
    kinds = sorted({f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node})
    return kinds[0] if len(kinds) == 1 else "+".join(kinds) or "(empty)"

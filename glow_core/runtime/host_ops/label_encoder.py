"""LabelEncoder (``ai.onnx.ml``) on the host: the encoders with string keys or values."""

from __future__ import annotations

import math

import numpy as np

from glow_core.frontends.onnx.label_mapping import label_mapping
from glow_core.frontends.onnx.string_values import objects, onnx_elem
from glow_core.runtime.host_ops.table import ML_DOMAIN, HostNode, Prepared, host_op, text_input


def _string_label_encoder(node: HostNode) -> bool:
    """String keys or values run on the host; numeric-only ones are compiled (ops_ml.py)."""
    if node.string_input(0) or "classes_strings" in node.attrs:
        return True
    for name in ("keys_strings", "values_strings"):
        if name in node.attrs:
            return True
    return any(
        np.asarray(node.attrs[name]).dtype.kind in "OSU"
        for name in ("keys_tensor", "values_tensor")
        if name in node.attrs
    )


@host_op("LabelEncoder", domain=ML_DOMAIN, claims=_string_label_encoder)
def _label_encoder(node: HostNode) -> Prepared:
    """Each element looked up in the key -> value table (the default when absent)."""
    mapping = label_mapping(node.attrs, node.string_input(0), node.refuse)
    if mapping.string_keys != node.string_input(0):
        kind = "strings" if mapping.string_keys else "numbers"
        raise node.refuse(f"its keys are {kind} but its input is not; the two must have one type")
    table = dict(zip(mapping.keys.tolist(), mapping.values.tolist(), strict=True))
    nan_keys = [k for k in table if isinstance(k, float) and math.isnan(k)]
    default = mapping.default.item()
    on_nan = table[nan_keys[0]] if nan_keys else default
    dtype = mapping.values.dtype

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is None:
            raise node.refuse("required input 0 is missing")
        if mapping.string_keys:
            x = text_input(node, x, 0)
        found = [table.get(v, default) if v == v else on_nan for v in np.asarray(x).reshape(-1).tolist()]
        if dtype.kind == "O":
            return [objects(found, x.shape)]
        return [np.asarray(found, dtype=dtype).reshape(x.shape)]

    return Prepared(run, (onnx_elem(dtype),))

"""Small ONNX models generated from the op schemas of the ops glow imports.

The op list is glow's importer table (``SUPPORTED_OPS``) and everything about an op comes
from its ``onnx.defs`` schema: inputs (single, optional, variadic), their type constraints,
attributes and their types, outputs. Shapes and attribute values are chosen by a few
name-based habits of ONNX (``axis`` is an axis, ``perm`` a permutation, ``kernel_shape`` one
size per spatial dim, an int64 ``shape`` or ``axes`` input a constant), and each node is drawn
up to ``ATTEMPTS`` times until onnx's strict shape inference accepts it. What still fails
inference is kept too: an invalid model is a good fuzz case, valid ones reach the numerics.

Every choice comes from one ``random.Random``, so a model is a function of its seed, and a
hypothesis ``st.randoms()`` can drive (and shrink) the generator in tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, defs, helper, numpy_helper

ATTEMPTS = 6
"""Draws per node until strict shape inference accepts it."""

OPSETS = (13, 17, 18, 21)
"""Opsets a generated model imports (every one is run by onnxruntime and onnx.reference)."""

# Element types glow runs, by ONNX type string; float32 first: most draws use it.
ELEM_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(int64)": TensorProto.INT64,
    "tensor(int32)": TensorProto.INT32,
    "tensor(int8)": TensorProto.INT8,
    "tensor(uint8)": TensorProto.UINT8,
    "tensor(bool)": TensorProto.BOOL,
}

# Inputs that exporters give as constants and importers need at load time.
LOAD_TIME_INPUTS = frozenset(
    {
        "axes",
        "shape",
        "pads",
        "starts",
        "ends",
        "steps",
        "repeats",
        "split",
        "sizes",
        "scales",
        "roi",
        "K",
        "k",
        "indices",
        "axis",
        "constant_value",
        "depth",
        "values",
        "max_output_boxes_per_class",
        "iou_threshold",
        "score_threshold",
        "min",
        "max",
        "delta",
        "start",
        "limit",
        "input_shape",
    }
)

_UNGENERATED_ATTRS = (
    AttributeProto.GRAPH,
    AttributeProto.GRAPHS,
    AttributeProto.TYPE_PROTO,
    AttributeProto.TYPE_PROTOS,
    AttributeProto.SPARSE_TENSOR,
    AttributeProto.SPARSE_TENSORS,
)
_STRING_CHOICES = {
    "mode": ["constant", "reflect", "edge", "nearest", "linear", "cubic", "DCR", "CRD", "bilinear"],
    "auto_pad": ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"],
    "direction": ["forward", "reverse", "bidirectional"],
    "reduction": ["none", "add", "mul", "max", "min"],
    "approximate": ["none", "tanh"],
    "coordinate_transformation_mode": ["half_pixel", "asymmetric", "align_corners"],
}


def generatable_ops(opset: int) -> list[str]:
    """Ops glow imports whose schema at ``opset`` the generator can fill: tensor inputs only
    and no required subgraph or type attribute."""
    from glow_core.frontends.onnx import SUPPORTED_OPS

    ops = []
    for op in sorted(SUPPORTED_OPS):
        try:
            schema = defs.get_schema(op, opset, "")
        except defs.SchemaError:
            continue
        if schema.deprecated:
            continue
        tensor_only = all(
            any(t.startswith("tensor(") for t in _allowed_types(schema, p.type_str))
            for p in [*schema.inputs, *schema.outputs]
        )
        needs_graph = any(a.required and a.type in _UNGENERATED_ATTRS for a in schema.attributes.values())
        if tensor_only and not needs_graph:
            ops.append(op)
    return ops


def _allowed_types(schema: defs.OpSchema, type_str: str) -> list[str]:
    for constraint in schema.type_constraints:
        if constraint.type_param_str == type_str:
            return list(constraint.allowed_type_strs)
    return [type_str]


@dataclass
class _Draft:
    """A model being built: its nodes, run-time inputs, constants, and a name counter."""

    opset: int
    nodes: list[onnx.NodeProto]
    inputs: list[onnx.ValueInfoProto]
    initializers: list[onnx.TensorProto]
    count: int = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def model(self, outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "fuzz", self.inputs, outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10 if self.opset >= 21 else 8
        return model


def generate(rng: random.Random, max_nodes: int = 3) -> onnx.ModelProto:
    """A model of 1..max_nodes generated ops, each fed by the previous one where types allow."""
    opset = rng.choice(OPSETS)
    ops = generatable_ops(opset)
    draft = _Draft(opset, [], [], [])
    previous: tuple[str, int, tuple[int, ...]] | None = None
    outputs: list[onnx.ValueInfoProto] = []
    for _ in range(rng.randint(1, max_nodes)):
        op = rng.choice(ops)
        node_outputs = _add_node(draft, defs.get_schema(op, opset, ""), rng, previous)
        typed = _infer_outputs(draft, node_outputs)
        outputs = typed
        first = typed[0].type.tensor_type
        dims = tuple(d.dim_value for d in first.shape.dim)
        static = first.HasField("shape") and all(
            d.HasField("dim_value") and d.dim_value > 0 for d in first.shape.dim
        )
        previous = (typed[0].name, first.elem_type, dims) if static and first.elem_type else None
    return draft.model(outputs)


def _add_node(
    draft: _Draft,
    schema: defs.OpSchema,
    rng: random.Random,
    previous: tuple[str, int, tuple[int, ...]] | None,
) -> list[str]:
    """Add one node of ``schema`` (the first draw strict inference accepts, else the last); its outputs."""
    saved = (list(draft.nodes), list(draft.inputs), list(draft.initializers))
    for attempt in range(ATTEMPTS):
        draft.nodes, draft.inputs, draft.initializers = (list(part) for part in saved)
        outputs = _draw_node(draft, schema, rng, previous)
        if attempt == ATTEMPTS - 1 or _infers(draft, outputs):
            return outputs
    raise AssertionError("unreachable")


def _draw_node(
    draft: _Draft,
    schema: defs.OpSchema,
    rng: random.Random,
    previous: tuple[str, int, tuple[int, ...]] | None,
) -> list[str]:
    spatial = "kernel_shape" in schema.attributes or schema.name in ("Conv", "ConvTranspose", "MaxPool")
    if previous is not None and rng.random() < 0.8:
        base = previous[2]
    elif spatial:
        base = (rng.randint(1, 2), rng.randint(1, 4), rng.randint(3, 7), rng.randint(3, 7))
    else:
        base = tuple(rng.randint(1, 4) for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4])))
    chosen: dict[str, int] = {}  # type parameter -> element type
    if previous is not None and schema.inputs:
        allowed = _allowed_types(schema, schema.inputs[0].type_str)
        if any(ELEM_TYPES.get(t) == previous[1] for t in allowed):
            chosen[schema.inputs[0].type_str] = previous[1]
    names: list[str] = []
    for index, param in enumerate(schema.inputs):
        option = param.option
        if option == defs.OpSchema.FormalParameterOption.Optional and rng.random() < 0.5:
            names.append("")
            continue
        copies = rng.randint(1, 3) if option == defs.OpSchema.FormalParameterOption.Variadic else 1
        for _ in range(copies):
            elem = _elem_type(schema, param.type_str, chosen, rng)
            if elem is None:
                names.append("")
                continue
            if index == 0 and previous is not None and previous[1] == elem and base == previous[2]:
                names.append(previous[0])
                continue
            names.append(_add_tensor(draft, param.name, index, elem, base, rng))
    while names and names[-1] == "":
        names.pop()
    count = len(schema.outputs)
    if schema.outputs and schema.outputs[-1].option == defs.OpSchema.FormalParameterOption.Variadic:
        count += rng.randint(0, 2)
    while count > max(schema.min_output, 1) and rng.random() < 0.5:
        count -= 1
    outputs = [draft.name("t") for _ in range(count)]
    node = helper.make_node(schema.name, names, outputs, name=draft.name("n"))
    node.attribute.extend(_attributes(schema, len(base), rng))
    draft.nodes.append(node)
    return outputs


def _elem_type(
    schema: defs.OpSchema, type_str: str, chosen: dict[str, int], rng: random.Random
) -> int | None:
    if type_str in chosen:
        return chosen[type_str]
    allowed = [ELEM_TYPES[t] for t in _allowed_types(schema, type_str) if t in ELEM_TYPES]
    if not allowed:
        return None
    elem = TensorProto.FLOAT if TensorProto.FLOAT in allowed and rng.random() < 0.7 else rng.choice(allowed)
    chosen[type_str] = elem
    return elem


def _add_tensor(
    draft: _Draft, role: str, index: int, elem: int, base: tuple[int, ...], rng: random.Random
) -> str:
    """A new tensor for input ``role``: a constant when ONNX habit says it is load-time data."""
    name = draft.name(role.lower().replace(" ", "_") or "x")
    rank = len(base)
    if role in LOAD_TIME_INPUTS and elem in (TensorProto.INT64, TensorProto.INT32):
        values = _load_time_ints(role, base, rng)
        draft.initializers.append(
            numpy_helper.from_array(np.asarray(values, helper.tensor_dtype_to_np_dtype(elem)), name)
        )
        return name
    shape = _shape_for(index, base, rng) if index > 0 else base
    constant = index > 0 and rng.random() < 0.4
    if constant or role in LOAD_TIME_INPUTS:
        draft.initializers.append(numpy_helper.from_array(_values(elem, shape, rng), name))
    else:
        draft.inputs.append(helper.make_tensor_value_info(name, elem, shape))
    del rank
    return name


def _shape_for(index: int, base: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
    """The shape of a second or later input: the first's, a broadcast of it, a channel or
    last-axis vector, a matrix that multiplies it, a convolution kernel, or a scalar."""
    rank = len(base)
    choices = [
        base,
        base,
        tuple(d if rng.random() < 0.6 else 1 for d in base),
        base[rng.randint(0, rank) :],
        (),
    ]
    if rank >= 2:
        choices += [
            (base[1],),
            (base[-1],),
            (base[-1], rng.randint(1, 4)),
            (*base[:-2], base[-1], rng.randint(1, 4)),
        ]
    if rank == 4:
        k = rng.randint(1, 3)
        choices += [(rng.randint(1, 4), base[1], k, k)] * 3
    return tuple(rng.choice(choices))


def _load_time_ints(role: str, base: tuple[int, ...], rng: random.Random) -> list[int]:
    rank = len(base)
    axes = list(range(-rank, rank)) or [0]
    if role == "axes":
        return sorted(set(rng.sample(axes, rng.randint(1, max(1, rank)))))
    if role in ("shape", "input_shape"):
        options = [[-1], list(base), list(reversed(base)), [1, *base], [int(np.prod(base)) if base else 1]]
        return rng.choice(options)
    if role == "pads":
        return [rng.randint(0, 2) for _ in range(2 * rank)]
    if role in ("starts", "ends", "steps"):
        count = rng.randint(1, max(1, rank))
        if role == "steps":
            return [rng.choice([1, 1, 2, -1]) for _ in range(count)]
        return [rng.randint(-3, 3) for _ in range(count)]
    if role in ("repeats", "sizes"):
        return [d * rng.randint(1, 2) for d in base]
    if role == "split":
        return [base[0]] if base else [1]
    if role == "indices":
        bound = min(base) if base else 1
        return [rng.randrange(-bound, bound) for _ in range(rng.randint(1, 3))]
    return [rng.randint(0, 3)]


def _values(elem: int, shape: tuple[int, ...], rng: random.Random) -> np.ndarray:
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    gen = np.random.default_rng(rng.getrandbits(32))
    if dtype == np.bool_:
        return gen.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return gen.integers(0, 3, shape).astype(dtype)
    return gen.standard_normal(shape).astype(dtype)


def _attributes(schema: defs.OpSchema, rank: int, rng: random.Random) -> list[AttributeProto]:
    attrs = []
    for name, spec in schema.attributes.items():
        if spec.type in _UNGENERATED_ATTRS or (not spec.required and rng.random() < 0.65):
            continue
        value = _attribute_value(name, spec, rank, rng)
        if value is None:
            continue
        try:
            attrs.append(helper.make_attribute(name, value, attr_type=spec.type))
        except (TypeError, ValueError):  # a name habit that does not fit this op's attribute type
            continue
    return attrs


def _attribute_value(name: str, spec: defs.OpSchema.Attribute, rank: int, rng: random.Random) -> object:
    spatial = max(rank - 2, 1)
    t = spec.type
    by_name: dict[str, object] = {
        "axis": rng.randint(-rank, max(rank - 1, 0)) if rank else 0,
        "axes": sorted(set(rng.sample(range(rank), rng.randint(1, rank)))) if rank else [0],
        "perm": rng.sample(range(rank), rank),
        "kernel_shape": [rng.randint(1, 3)] * spatial,
        "strides": [rng.randint(1, 2)] * spatial,
        "dilations": [rng.randint(1, 2)] * spatial,
        "pads": [rng.randint(0, 1)] * (2 * spatial),
        "group": 1,
        "keepdims": rng.randint(0, 1),
        "to": rng.choice(list(ELEM_TYPES.values())),
        "epsilon": 1e-5,
    }
    if name in by_name:
        return by_name[name]
    if t == AttributeProto.STRING:
        default = spec.default_value.s.decode() if spec.default_value.HasField("s") else None
        choices = _STRING_CHOICES.get(name, [])
        return rng.choice([*choices, default]) if choices or default else None
    if t == AttributeProto.INT:
        return rng.choice([0, 1, 1, 2])
    if t == AttributeProto.FLOAT:
        return round(rng.uniform(0.05, 1.5), 3)
    if t == AttributeProto.INTS:
        return [rng.randint(0, 2) for _ in range(max(rank, 1))]
    if t == AttributeProto.FLOATS:
        return [round(rng.uniform(0.05, 1.5), 3) for _ in range(max(rank, 1))]
    if t == AttributeProto.STRINGS:
        return []
    if t == AttributeProto.TENSOR:
        return numpy_helper.from_array(np.asarray([rng.uniform(-1, 1)], np.float32), "value")
    return None


def _inference_safe(model: onnx.ModelProto) -> bool:
    """Whether onnx's shape inference can look at ``model`` without aborting the process:
    its C++ asserts (SIGABRT) on a Split whose num_outputs differs from its output count."""
    for node in model.graph.node:
        counts = [a.i for a in node.attribute if node.op_type == "Split" and a.name == "num_outputs"]
        if counts and counts[0] != len(node.output):
            return False
    return True


def _infers(draft: _Draft, outputs: list[str]) -> bool:
    model = draft.model([helper.make_empty_tensor_value_info(o) for o in outputs])
    if not _inference_safe(model):
        return False
    try:
        onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # any inference error means "draw again"
        return False
    return True


def _infer_outputs(draft: _Draft, outputs: list[str]) -> list[onnx.ValueInfoProto]:
    """Typed value infos for ``outputs`` (float32 of unknown shape where inference fails)."""
    model = draft.model([helper.make_empty_tensor_value_info(o) for o in outputs])
    try:
        if not _inference_safe(model):
            raise ValueError("onnx's shape inference would abort on this model")
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # an invalid model is still a case
        inferred = model.graph
    known = {v.name: v for v in [*inferred.value_info, *inferred.output]}
    typed = []
    for name in outputs:
        info = known.get(name)
        if info is not None and info.type.tensor_type.elem_type:
            typed.append(info)
        else:
            typed.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return typed

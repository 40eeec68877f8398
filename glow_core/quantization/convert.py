"""The quantization pass: float layers of an optimized graph become integer layers.

It runs on the optimized, not yet lowered graph (where the profile's names come from, see
``profiled_values``). Walking in topological order, a layer of a kind in ``RULES`` is
rebuilt on int8/uint8 operands (``arithmetic``) when its float operands can be quantized;
a float operand that is not already quantized gets a Quantize at the region's edge. Every
rebuilt layer's old float value is then replaced by a Dequantize of its integer one, so
float consumers are untouched and integer consumers read the integer value directly; the
float layers, now unused, go to dead-code elimination.

Layers whose parameters are not constants, whose kind or name the caller keeps, or whose
primitives the backend does not declare for the kinds they need, stay float; the returned
``QuantizationReport`` says which and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.graph.nodes.quantized import requantized_output
from glow_core.lowering.lower import lower_node
from glow_core.quantization import arithmetic as ar
from glow_core.quantization.calibration import calibrated_range
from glow_core.quantization.mode import Quantize
from glow_core.quantization.schema import QuantParams, choose_params, weight_params
from glow_core.types import ElemKind


def profiled_values(fn: Function) -> dict[str, Node]:
    """The values a profile records, by name: every float32 result of ``fn``'s operator
    nodes and every float32 input placeholder it reads (Saves and constants excluded)."""
    values: dict[str, Node] = {p.name: p for p in fn.inputs if p.type.elem is ElemKind.float32}
    for n in fn.topological_order():
        if n.kind != "Save" and n.type.elem is ElemKind.float32:
            values[n.name] = n
    return values


@dataclass
class QuantizationReport:
    """What the pass did: layers now integer, and layers left float with the reason."""

    quantized: list[str] = field(default_factory=list)
    kept_float: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        reasons: dict[str, int] = {}
        for why in self.kept_float.values():
            reasons[why] = reasons.get(why, 0) + 1
        kept = "; ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
        return f"{len(self.quantized)} layer(s) quantized, {len(self.kept_float)} kept float" + (
            f" ({kept})" if kept else ""
        )


class _Quantizer:
    """State of one run of the pass over one function."""

    def __init__(self, fn: Function, mode: Quantize, supports: Callable[[str, ElemKind], bool]):
        self.fn, self.mode, self.supports = fn, mode, supports
        self.b = Builder(fn)
        self.params: dict[Node, QuantParams] = {}  # float value -> how its integer twin is quantized
        self.integer: dict[Node, Node] = {}  # float value -> its integer twin
        self.layers: list[Node] = []  # the float layers rebuilt as integer ones, in order
        self.report = QuantizationReport()

    # ---- operands ---------------------------------------------------------------------

    def activation_params(self, value: Node) -> QuantParams:
        if isinstance(value, Constant):
            x = np.asarray(value.value, np.float64)
            low, high = float(np.min(x, initial=0.0)), float(np.max(x, initial=0.0))
        else:
            low, high = calibrated_range(self.mode.loaded_profile[value.name], self.mode.calibration)
        return choose_params(low, high, self.mode.schema)

    def operand(self, value: Node) -> tuple[Node, QuantParams]:
        """The integer form of float ``value``, quantized at the region's edge if need be."""
        if value not in self.integer:
            p = self.activation_params(value)
            self.integer[value] = ar.quantize(self.b, value, p, f"{value.name}/quantize")
            self.params[value] = p
        return self.integer[value], self.params[value]

    def weights(self, w: Constant, axis: int) -> tuple[Node, np.ndarray]:
        """int8 weights and their scale(s), per channel along ``axis`` when asked."""
        scales, q = weight_params(w.value, axis if self.mode.per_channel else None, self.mode.schema)
        return ar.constant(self.b, q.astype(np.int8), f"{w.name}/int8"), scales

    def done(self, n: Node, q: Node, p: QuantParams) -> None:
        self.integer[n], self.params[n] = q, p
        self.layers.append(n)
        self.report.quantized.append(n.name)

    # ---- rules: one per layer kind ---------------------------------------------------------

    def conv(self, n: Node) -> str | None:
        if not (isinstance(n.filter, Constant) and isinstance(n.bias, Constant)):
            return "weights are not constants"
        if n.activation not in ("none", "relu"):
            return f"fused activation {n.activation}"
        x, px = self.operand(n.input)
        w, sw = self.weights(n.filter, 0)
        window = {"strides": n.strides, "pads": n.pads, "dilations": n.dilations, "group": n.group}
        self.integer_layer(n, "QuantizedConv", x, px, w, sw, n.bias.value, window)
        return None

    def fully_connected(self, n: Node) -> str | None:
        if not (isinstance(n.weights, Constant) and isinstance(n.bias, Constant)):
            return "weights are not constants"
        if n.activation not in ("none", "relu"):
            return f"fused activation {n.activation}"
        x, px = self.operand(n.input)
        w, sw = self.weights(n.weights, 1)
        self.integer_layer(n, "QuantizedFullyConnected", x, px, w, sw, n.bias.value, {})
        return None

    def integer_layer(
        self,
        n: Node,
        kind: str,
        x: Node,
        px: QuantParams,
        w: Node,
        sw: np.ndarray,
        bias: np.ndarray,
        attrs: dict[str, object],
    ) -> None:
        """``n`` as a QuantizedConv / QuantizedFullyConnected (glow_core.graph.nodes.quantized):
        int32 bias at the accumulator's scale, per-channel multiplier to the profiled output
        range, a fused ReLU as the lower saturation bound."""
        channels = w.type.shape[0] if kind == "QuantizedConv" else w.type.shape[1]
        acc_scale = np.broadcast_to(px.scale * sw, (channels,))
        p = self.activation_params(n)
        bias_q = ar.constant(self.b, ar.int32_bias(bias, acc_scale).astype(np.int32), f"{n.name}/bias_int32")
        multiplier = ar.constant(self.b, acc_scale / p.scale, f"{n.name}/multiplier")
        q = self.b.create(
            kind,
            x,
            w,
            bias_q,
            multiplier,
            input_offset=px.offset,
            name=f"{n.name}/int",
            **requantized_output(p.scale, p.offset, p.elem, 0.0 if n.activation == "relu" else -math.inf),
            **attrs,
        )
        self.done(n, q, p)

    def matmul(self, n: Node) -> str | None:
        (a, pa), (c, pc) = self.operand(n.lhs), self.operand(n.rhs)
        acc = self.b.MatMul(ar.centered(self.b, a, pa), ar.centered(self.b, c, pc))
        p = self.activation_params(n)
        self.done(n, ar.requantize(self.b, acc, pa.scale * pc.scale / p.scale, p, f"{n.name}/int"), p)
        return None

    def add(self, n: Node) -> str | None:
        """A ``QuantizedAdd`` (glow_core.graph.nodes.quantized), a Relu or Clip that alone
        reads the sum fused as saturation bounds (the result takes the activation's
        parameters, as the QDQ fold's takes its QuantizeLinear's). A backend that declares
        the node keeps it whole (glow-cpu's int8_add kernel); for any other the node's own
        lowering is built here, the same float64 arithmetic in primitives, so both compute
        one function bit for bit."""
        (a, pa), (c, pc) = self.operand(n.lhs), self.operand(n.rhs)
        result, low, high = self.fused_activation(n)
        p = self.activation_params(result)
        q = self.b.create(
            "QuantizedAdd",
            a,
            c,
            lhs_multiplier=pa.scale / p.scale,
            rhs_multiplier=pc.scale / p.scale,
            lhs_offset=pa.offset,
            rhs_offset=pc.offset,
            name=f"{n.name}/int",
            **requantized_output(p.scale, p.offset, p.elem, low, high),
        )
        if not self.supports("QuantizedAdd", p.elem):
            q = lower_node(self.fn, q)
        if result is not n:
            self.report.quantized.append(n.name)
        self.done(result, q, p)
        return None

    def fused_activation(self, n: Node) -> tuple[Node, float, float]:
        """The float Relu or Clip that alone reads ``n``, unless kept float, and the real
        range it clamps to; else ``n`` itself and an unbounded range."""
        users = [u for u, _ in n.users]
        if len(users) == 1 and users[0].kind in ("Relu", "Clip") and not _kept(users[0], self.mode):
            activation = users[0]
            if activation.type.elem is ElemKind.float32:
                if activation.kind == "Relu":
                    return activation, 0.0, math.inf
                return activation, activation.low, activation.high
        return n, -math.inf, math.inf

    def mul(self, n: Node) -> str | None:
        (a, pa), (c, pc) = self.operand(n.lhs), self.operand(n.rhs)
        p = self.activation_params(n)
        product = self.b.Mul(ar.centered(self.b, a, pa), ar.centered(self.b, c, pc))
        self.done(n, ar.requantize(self.b, product, pa.scale * pc.scale / p.scale, p, f"{n.name}/int"), p)
        return None

    def average(self, n: Node) -> str | None:
        """AvgPool and ReduceMean: the mean of centered integers, requantized."""
        x, px = self.operand(n.inputs[0])
        mean = self.b.create(n.kind, ar.centered(self.b, x, px), **n.attrs)
        p = self.activation_params(n)
        self.done(n, ar.requantize(self.b, mean, px.scale / p.scale, p, f"{n.name}/int"), p)
        return None

    def concat(self, n: Node) -> str | None:
        p = self.activation_params(n)
        parts = []
        for value in n.inputs:
            q, pv = self.operand(value)
            if pv != p:
                q = ar.requantize(
                    self.b, ar.centered(self.b, q, pv), pv.scale / p.scale, p, f"{value.name}/to_{n.name}"
                )
            parts.append(q)
        self.done(n, self.b.Concat(*parts, axis=n.axis), p)
        return None

    def same_params(self, n: Node) -> str | None:
        """Layers that commute with quantization (max, data movement): run on the integers
        with the input's parameters; only inside a region (alone they would gain nothing)."""
        source = n.inputs[0]
        if source not in self.integer:
            return "its input is float"
        x, p = self.integer[source], self.params[source]
        if n.kind == "Relu":
            q = self.b.Max(x, self.b.splat(p.offset, x))
        elif n.kind == "Clip":
            low, high = (
                int(p.quantize(np.array(v)).item()) if np.isfinite(v) else None for v in (n.low, n.high)
            )
            q = x if low is None else self.b.Max(x, self.b.splat(low, x))
            q = q if high is None else self.b.Min(q, self.b.splat(high, q))
        else:
            q = self.b.create(n.kind, x, **n.attrs)
        self.done(n, q, p)
        return None


_WIDE_OPS = (
    "Convert",
    "Sub",
    "Mul",
    "Div",
    "Add",
    "Floor",
    "Compare",
    "Select",
    "Max",
    "Min",
    "Splat",
    "Broadcast",
)
"""Primitives every quantized layer uses in float64 (centering, rounding, requantizing)."""
_NARROW_OPS = ("Convert", "Max", "Min", "Splat", "Broadcast")
"""Primitives applied to the int8/uint8 values themselves."""

RULES: dict[str, tuple[Callable[[_Quantizer, Node], str | None], tuple[str, ...], tuple[str, ...]]] = {
    # kind: (rule, float64 primitives it needs besides _WIDE_OPS, int8 primitives besides _NARROW_OPS)
    "Conv": (_Quantizer.conv, ("Convolution",), ()),
    "FullyConnected": (_Quantizer.fully_connected, ("MatMul",), ()),
    "MatMul": (_Quantizer.matmul, ("MatMul",), ()),
    "Add": (_Quantizer.add, (), ()),
    "Mul": (_Quantizer.mul, (), ()),
    "AvgPool": (_Quantizer.average, ("AvgPool",), ()),
    "ReduceMean": (_Quantizer.average, ("ReduceSum",), ()),
    # The ONNX pools arrive as pooling nodes (quantized before lowering); a CNN's 2-D ones
    # lower to the AvgPool/MaxPool primitive, a global average to ReduceSum.
    "AvgPoolNd": (_Quantizer.average, ("AvgPool",), ()),
    "GlobalAveragePool": (_Quantizer.average, ("ReduceSum",), ()),
    "Concat": (_Quantizer.concat, (), ("Concat",)),
    "MaxPool": (_Quantizer.same_params, (), ("MaxPool",)),
    "MaxPoolNd": (_Quantizer.same_params, (), ("MaxPool",)),
    "Relu": (_Quantizer.same_params, (), ()),
    "Clip": (_Quantizer.same_params, (), ()),
    "Reshape": (_Quantizer.same_params, (), ()),
    "Transpose": (_Quantizer.same_params, (), ("Transpose",)),
}
"""The layer kinds the pass quantizes; everything else stays float."""

POOL_PRIMITIVE = {"AvgPoolNd": "AvgPool", "MaxPoolNd": "MaxPool"}
"""Pooling node -> the primitive a CNN's pool lowers to: ``keep={"AvgPool"}`` keeps both."""


def _unsupported(
    kind: str, supports: Callable[[str, ElemKind], bool], schema_kinds: tuple[ElemKind, ...]
) -> str | None:
    _, wide, narrow = RULES[kind]
    missing = [f"{op}[f64]" for op in (*_WIDE_OPS, *wide) if not supports(op, ar.WIDE)]
    missing += [
        f"{op}[{k.name}]" for op in (*_NARROW_OPS, *narrow) for k in schema_kinds if not supports(op, k)
    ]
    return f"the backend lacks {', '.join(missing)}" if missing else None


def quantize_function(
    fn: Function, mode: Quantize, supports: Callable[[str, ElemKind], bool]
) -> QuantizationReport:
    """Rewrite ``fn`` (optimized, not lowered) to integer layers by ``mode``; ``supports``
    says whether the backend runs a primitive for an element kind."""
    mode.loaded_profile.check_names(set(profiled_values(fn)), f"function {fn.name!r}")
    quantizer = _Quantizer(fn, mode, supports)
    kinds = (ElemKind.int8, ElemKind.uint8) if mode.schema == "symmetric-uint8" else (ElemKind.int8,)
    refused = {kind: _unsupported(kind, supports, kinds) for kind in RULES}
    for n in fn.topological_order():
        if n.kind not in RULES or n.type.elem is not ElemKind.float32 or n in quantizer.integer:
            continue  # not a layer it knows, or an activation fused into the layer before it
        if _kept(n, mode):
            quantizer.report.kept_float[n.name] = "kept by request"
            continue
        why = refused[n.kind] or _float_operands(n) or RULES[n.kind][0](quantizer, n)
        if why:
            quantizer.report.kept_float[n.name] = why
    _leave_regions(fn, quantizer)
    return quantizer.report


def _kept(n: Node, mode: Quantize) -> bool:
    """Whether the caller keeps ``n`` float, by kind (a pooling node by its primitive's
    kind too) or by name."""
    return n.kind in mode.keep or POOL_PRIMITIVE.get(n.kind) in mode.keep or n.name in mode.keep


def _float_operands(n: Node) -> str | None:
    if any(i.type.elem is not ElemKind.float32 for i in n.inputs):
        return "an operand is not float32"
    return None


def _leave_regions(fn: Function, quantizer: _Quantizer) -> None:
    """Float readers of a quantized layer read a Dequantize of its integer value instead."""
    rebuilt = set(quantizer.layers)
    for old in quantizer.layers:
        if all(user in rebuilt for user, _ in old.users):
            continue  # only integer layers read it: they read its twin already
        twin, p = quantizer.integer[old], quantizer.params[old]
        fn.replace_all_uses(old, ar.dequantize(quantizer.b, twin, p, old.type.elem, f"{old.name}/dequantize"))

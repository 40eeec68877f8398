"""fold-qdq: an imported QDQ model's integer layers become the int8 nodes of the quantize pass.

A QDQ model (onnxruntime's ``quantize_static``) marks each integer layer as float
arithmetic between boundaries: ``DequantizeLinear(x_q) -> Conv(filter = DQ(w_int8),
bias = DQ(b_int32)) [-> Relu or Clip] -> QuantizeLinear``. Computed as written, that is float
emulation; the meaning is an int8 convolution with int32 accumulation, which is what
``QuantizedConv`` / ``QuantizedFullyConnected`` declare (``glow_core.graph.nodes.quantized``),
so backends with int8 kernels run them and the others run the exact integer reference.

The same pass folds the other integer patterns such models spell in float: a residual
``DQ(a_q) + DQ(b_q) [-> Relu|Clip] -> Q`` becomes ``QuantizedAdd(a_q, b_q)`` (multipliers
``s_a / s_y`` and ``s_b / s_y``, the activation as saturation bounds), and ``DQ(x_q) ->
MaxPool -> Q`` with Q's parameters equal to DQ's becomes the MaxPool of ``x_q`` itself
(max commutes with a monotone dequantization), and ``DQ(x_q) -> BatchNorm -> Q`` (a
BatchNorm left unfolded beside its Conv) becomes a depthwise 1x1 ``QuantizedConv``, its
per-channel affine map in integers, so no float tensor is left between layers.

The accumulator's scale is ``s_x * s_w[c]`` and the requantization multiplier
``s_x * s_w[c] / s_y`` (float64 of the float32 scales); the bias is used as stored when its
scale is that of the accumulator (onnxruntime's rule), else re-rounded to it. A pattern
that does not fit (a weight zero point, a float weight, a per-axis activation scale, a
second reader of the float result) stays as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.graph.nodes.quantized import requantized_output
from glow_core.passes.manager import graph_pass


@dataclass(frozen=True)
class _Boundary:
    """One side of an integer layer: the integer value and its per-tensor scale and offset."""

    value: Node
    scale: float
    offset: int


def _constant(n: Node) -> np.ndarray | None:
    return np.asarray(n.value) if isinstance(n, Constant) else None


def _per_tensor(scale: Node, zero: Node) -> tuple[float, int] | None:
    s, z = _constant(scale), _constant(zero)
    if s is None or z is None or s.size != 1:
        return None
    return float(s.reshape(())), int(z.reshape(()))


def _integer_input(value: Node) -> tuple[_Boundary, tuple[int, ...] | None] | None:
    """``value`` as DequantizeLinear(q) per tensor, and the shape of a Reshape between them
    (it moves onto q when the layer is folded)."""
    shape = None
    if value.kind == "Reshape" and len(value.users) == 1:
        shape, value = value.type.shape, value.inputs[0]
    if value.kind != "DequantizeLinear" or value.inputs[0].type.elem.name not in ("int8", "uint8"):
        return None
    params = _per_tensor(value.scale, value.zero_point)
    if params is None:
        return None
    return _Boundary(value.inputs[0], *params), shape


def _int8_weights(value: Node, channel_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weights, float64 scale per channel) of a DequantizeLinear of constant int8
    weights with zero zero points, the scale per tensor or along ``channel_axis``."""
    if value.kind != "DequantizeLinear" or value.inputs[0].type.elem.name != "int8":
        return None
    w, s, z = (_constant(i) for i in value.inputs)
    if w is None or s is None or z is None or np.any(z != 0):
        return None
    if s.size != 1 and value.axis != channel_axis:
        return None
    channels = w.shape[channel_axis]
    return w.astype(np.int8), np.broadcast_to(s.astype(np.float64).reshape(-1), (channels,)).copy()


def _int32_bias(value: Node, acc_scale: np.ndarray) -> np.ndarray | None:
    """The bias in int32 at the accumulator's scale."""
    if value.kind == "DequantizeLinear" and value.inputs[0].type.elem.name == "int32":
        b, s, z = (_constant(i) for i in value.inputs)
        if b is None or s is None or z is None:
            return None
        real = (b.astype(np.float64) - z) * s.astype(np.float64)
        if np.all(z == 0) and np.allclose(s.astype(np.float64), acc_scale, rtol=1e-6, atol=0):
            return b.astype(np.int32)
    else:
        real = _constant(value)
        if real is None:
            return None
    info = np.iinfo(np.int32)
    return np.clip(np.rint(np.asarray(real, np.float64) / acc_scale), info.min, info.max).astype(np.int32)


def _output(layer: Node) -> tuple[Node, float, float] | None:
    """The QuantizeLinear that alone reads ``layer``, directly or through one Relu or Clip,
    and that activation's range (quantization is monotone, so clipping the real value is
    clamping the quantized one to the quantized bounds)."""
    users = [u for u, _ in layer.users]
    low, high = -math.inf, math.inf
    if len(users) == 1 and users[0].kind in ("Relu", "Clip"):
        activation = users[0]
        low, high = (0.0, math.inf) if activation.kind == "Relu" else (activation.low, activation.high)
        users = [u for u, _ in activation.users]
    if len(users) != 1 or users[0].kind != "QuantizeLinear":
        return None
    return users[0], low, high


def _fold(fn: Function, layer: Node) -> bool:
    """Fold ``layer`` (a float32 Conv or FullyConnected) if its pattern fits; else no change."""
    conv = layer.kind == "Conv"
    filter_node = layer.filter if conv else layer.weights
    transposed = not conv and filter_node.kind == "Transpose"  # Gemm's transB
    if transposed:
        weights = _int8_weights(filter_node.inputs[0], 0)
    else:
        weights = _int8_weights(filter_node, 0 if conv else 1)
    found = _output(layer)
    source = _integer_input(layer.input)
    if layer.activation != "none" or weights is None or found is None or source is None:
        return False
    (quantize, low, high), (x, shape) = found, source
    out = _per_tensor(quantize.scale, quantize.zero_point)
    w, w_scale = weights
    acc_scale = x.scale * w_scale
    bias = _int32_bias(layer.bias, acc_scale)
    if out is None or bias is None:
        return False
    y_scale, y_offset = out
    window = {a: layer.attrs[a] for a in ("strides", "pads", "dilations", "group")} if conv else {}
    b, module = Builder(fn), fn.module
    folded = b.create(
        "QuantizedConv" if conv else "QuantizedFullyConnected",
        x.value if shape is None else b.Reshape(x.value, shape=shape),
        module.create_constant(f"{layer.name}/int8", np.ascontiguousarray(w.T) if transposed else w),
        module.create_constant(f"{layer.name}/bias_int32", bias),
        module.create_constant(f"{layer.name}/multiplier", acc_scale / y_scale),
        input_offset=x.offset,
        name=f"{layer.name}/int",
        **requantized_output(y_scale, y_offset, quantize.type.elem, low, high),
        **window,
    )
    fn.replace_all_uses(quantize, folded)
    return True


def _fold_add(fn: Function, add: Node) -> bool:
    """Fold a float32 Add of two per-tensor DequantizeLinear (one shape, no broadcast) whose
    result, through one Relu or Clip at most, only a QuantizeLinear reads."""
    found = _output(add)
    sides = [_integer_input(i) for i in add.inputs]
    if found is None or any(s is None or s[1] is not None for s in sides):
        return False
    (quantize, low, high), (lhs, _), (rhs, _) = found, *sides
    out = _per_tensor(quantize.scale, quantize.zero_point)
    if out is None or lhs.value.type.shape != rhs.value.type.shape:
        return False
    y_scale, y_offset = out
    folded = Builder(fn).create(
        "QuantizedAdd",
        lhs.value,
        rhs.value,
        lhs_multiplier=lhs.scale / y_scale,
        rhs_multiplier=rhs.scale / y_scale,
        lhs_offset=lhs.offset,
        rhs_offset=rhs.offset,
        name=f"{add.name}/int",
        **requantized_output(y_scale, y_offset, quantize.type.elem, low, high),
    )
    fn.replace_all_uses(quantize, folded)
    return True


def _fold_max_pool(fn: Function, pool: Node) -> bool:
    """Fold DQ(x_q) -> MaxPool -> Q when Q has DQ's scale, zero point and kind: dequantization
    is monotone (a positive scale), so the maximum of the dequantized values is the
    dequantized maximum of the integers, and quantizing it back gives that integer exactly."""
    found = _output(pool)
    source = _integer_input(pool.inputs[0])
    if found is None or source is None or source[1] is not None:
        return False
    (quantize, low, high), (x, _) = found, source
    out = _per_tensor(quantize.scale, quantize.zero_point)
    same = out is not None and out == (x.scale, x.offset) and quantize.type.elem is x.value.type.elem
    if not same or x.scale <= 0 or (low, high) != (-math.inf, math.inf):
        return False
    folded = Builder(fn).create("MaxPoolNd", x.value, name=f"{pool.name}/int", **pool.attrs)
    fn.replace_all_uses(quantize, folded)
    return True


@dataclass(frozen=True)
class _ChannelMaps:
    """A quantized per-channel affine map ``y = x * slope[c] + shift[c]`` (float32, as the
    BatchNorm's lowering has them) between an integer input and an integer output: the
    float graph's table of it, and the integer layer's for given weights and bias."""

    slope: np.ndarray
    shift: np.ndarray
    source: _Boundary
    scale: float  # the output's
    offset: int
    low: int
    high: int

    def integers(self) -> np.ndarray:
        """Every value the input kind holds, minus the input's zero point."""
        info = np.iinfo(self.source.value.type.dtype)
        return np.arange(int(info.min), int(info.max) + 1, dtype=np.int64) - self.source.offset

    def float_table(self) -> np.ndarray:
        """[channels, values] outputs of DQ -> BatchNorm -> Q computed as the float graph
        does: each step rounded to float32, the quantization rounded half to even."""
        x = self.integers().astype(np.float32) * np.float32(self.source.scale)
        y = x[None, :] * self.slope[:, None] + self.shift[:, None]
        return np.clip(np.rint(y / np.float32(self.scale)) + self.offset, self.low, self.high)

    def integer_table(self, weights: np.ndarray, bias: np.ndarray, multiplier: np.ndarray) -> np.ndarray:
        """The same outputs from QuantizedConv's arithmetic (exact integers, one float64
        requantization, as ``quantized._requantize``), for channel parameters of any
        leading shape."""
        acc = (self.integers() * weights[..., None] + bias[..., None]).astype(np.float64)
        return np.clip(np.rint(acc * multiplier[..., None]) + self.offset, self.low, self.high)


def _affine_in_integers(maps: _ChannelMaps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per channel, the int8 weight ``k`` (the slope's sign, magnitude 1..127), the bias
    and the multiplier with which ``(x_q - z_x) * k + bias``, at the accumulator step ``u =
    s_x * |slope| / |k|``, stands for ``(x_q - z_x) * s_x * slope + shift``.

    The products are exact integers; only the shift is rounded, to a whole ``u``. The input
    holds 256 values, so whether a choice is exact is checked, not hoped: magnitudes are
    tried in the order of how little their step misses the shift by, and each channel takes
    the first whose integer table equals the float graph's on every input value; a channel
    none matches (the float graph's own roundings put an output across a boundary) keeps
    the closest, one output step off there at most. A zero slope leaves the shift alone, at
    the output's step (weight 0)."""
    slope, shift = maps.slope.astype(np.float64), maps.shift.astype(np.float64)
    magnitudes = np.arange(127, 0, -1, dtype=np.float64)[:, None]  # largest first among equals
    flat = slope == 0
    steps = np.where(flat, maps.scale, maps.source.scale * np.abs(slope) / magnitudes)  # [127, channels]
    rounded = np.rint(shift / steps)
    order = np.argsort(np.abs(rounded * steps - shift), axis=0, kind="stable")
    channels = np.arange(slope.size)

    def candidates(rank: np.ndarray | int, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pick = order[rank, c]
        weights = np.where(flat[c], 0, np.sign(slope[c]) * magnitudes[pick, 0]).astype(np.int64)
        return weights, rounded[pick, c], steps[pick, c] / maps.scale

    wanted = maps.float_table()
    weights, bias, multiplier = candidates(0, channels)
    rest = channels[np.any(maps.integer_table(weights, bias, multiplier) != wanted, axis=1)]
    for c in np.array_split(rest, max(1, rest.size // 32)):  # the others, all magnitudes at once
        k, b, m = candidates(np.arange(1, magnitudes.shape[0])[:, None], c[None, :])  # [126, len(c)]
        hit = np.all(maps.integer_table(k, b, m) == wanted[c], axis=2)
        first, found = hit.argmax(axis=0), hit.any(axis=0)
        take = c[found], first[found], np.nonzero(found)[0]
        weights[take[0]], bias[take[0]] = k[take[1], take[2]], b[take[1], take[2]]
        multiplier[take[0]] = m[take[1], take[2]]
    return weights.astype(np.int8), bias, multiplier


def _real_constant(value: Node, depth: int = 8) -> np.ndarray | None:
    """A value computed from constants alone, as the float graph computes it: a Constant, a
    DequantizeLinear of constants (``(q - zero_point) * scale`` in float32, per tensor or
    along the one axis of a 1-D tensor, what a BatchNorm's parameters are), or a primitive
    of such values evaluated by its own reference (the importer spells a DequantizeLinear
    whose scale is [1]-shaped as Convert/Sub/Mul primitives, and fold-constants has not run
    yet). ``depth`` bounds the walk: parameters are a few nodes from their constants."""
    if isinstance(value, Constant) or value.kind == "Splat":
        return (
            np.asarray(value.value) if isinstance(value, Constant) else value.spec.evaluate([], value.attrs)
        )
    if depth == 0:
        return None
    operands = [_real_constant(i, depth - 1) for i in value.inputs]
    if not value.inputs or any(o is None for o in operands):
        return None
    if value.kind == "DequantizeLinear":
        q, s, z = operands
        if z.size != s.size or (s.size != 1 and (q.ndim != 1 or s.shape != q.shape)):
            return None  # not per tensor nor along a 1-D tensor's one axis
        if s.size == 1:
            s, z = s.reshape(()), z.reshape(())
        return (q.astype(np.float32) - z.astype(np.float32)) * s.astype(np.float32)
    if not value.spec.is_primitive:
        return None
    return (
        np.asarray(value.spec.evaluate(operands, value.attrs))
        .astype(value.type.dtype)
        .reshape(value.type.shape)
    )


def _fold_batch_norm(fn: Function, bn: Node) -> bool:
    """Fold DQ(x_q) -> BatchNorm -> [Relu|Clip] -> Q (NCHW, constant parameters): a BatchNorm
    that a quantizer left beside its Conv (onnxruntime 1.30's ``quant_pre_process`` loses
    its optimizer's fold) is a per-channel affine map of the integers, ``y = (x_q - z_x) * s_x * a[c] +
    shift[c]`` with ``a = gamma / sqrt(var + eps)`` and ``shift = beta - mean * a`` (both in
    float32, as the BatchNorm's lowering has them), which is a depthwise 1x1 QuantizedConv:
    weight ``k[c] = sign(a[c]) * m``, accumulator step ``u[c] = s_x * |a[c]| / m``, bias
    ``rint(shift[c] / u[c])`` and multiplier ``u[c] / s_y`` (``_affine_in_integers`` picks m).

    Bit-equal to the float graph (float32 at each step, as the interpreter runs it) on every
    input value for each channel where one of the 127 magnitudes makes it so, which
    ``_affine_in_integers`` checks; on the others the shift's rounding to a whole ``u`` can
    put an output one step from the float graph's (docs/quantization.md has the rates)."""
    found = _output(bn)
    source = _integer_input(bn.inputs[0])
    params = [_real_constant(i) for i in bn.inputs[1:]]
    if found is None or source is None or source[1] is not None or any(p is None for p in params):
        return False
    (quantize, low, high), (x, _) = found, source
    out = _per_tensor(quantize.scale, quantize.zero_point)
    if out is None or bn.type.rank != 4:
        return False
    y_scale, y_offset = out
    # slope and shift in float32, as the BatchNorm's lowering computes them
    gamma, beta, mean, var = (np.asarray(p, np.float32).reshape(-1) for p in params)
    if not np.all(var + np.float32(bn.epsilon) > 0):
        return False  # no real slope: left to the float graph, which computes what it says
    slope = gamma / np.sqrt(var + np.float32(bn.epsilon))
    output = requantized_output(y_scale, y_offset, quantize.type.elem, low, high)
    maps = _ChannelMaps(slope, beta - mean * slope, x, y_scale, y_offset, output["low"], output["high"])
    weights, bias, multiplier = _affine_in_integers(maps)
    # the accumulator (x_q - z_x) * k + bias must stay an int32
    if not np.all(np.isfinite(bias)) or np.abs(bias).max() > np.iinfo(np.int32).max - 255 * 127:
        return False
    module = fn.module
    folded = Builder(fn).create(
        "QuantizedConv",
        x.value,
        module.create_constant(f"{bn.name}/int8", weights.reshape(-1, 1, 1, 1)),
        module.create_constant(f"{bn.name}/bias_int32", bias.astype(np.int32)),
        module.create_constant(f"{bn.name}/multiplier", multiplier),
        input_offset=x.offset,
        group=weights.shape[0],
        name=f"{bn.name}/int",
        **output,
    )
    fn.replace_all_uses(quantize, folded)
    return True


_FOLDS = {
    "Conv": _fold,
    "FullyConnected": _fold,
    "Add": _fold_add,
    "MaxPoolNd": _fold_max_pool,
    "BatchNorm": _fold_batch_norm,
}
"""Float32 node kind -> the fold of its integer pattern."""


@graph_pass("fold-qdq")
def fold_qdq(fn: Function) -> bool:
    """DQ(x_q) -> Conv/FullyConnected(DQ(w_int8), bias) [-> Relu|Clip] -> Q  =>  QuantizedConv /
    QuantizedFullyConnected(x_q, w_int8, bias_int32, multiplier); DQ(a_q) + DQ(b_q) [-> Relu|Clip]
    -> Q  =>  QuantizedAdd(a_q, b_q); DQ(x_q) -> MaxPool -> Q (same parameters)  =>  MaxPool(x_q);
    DQ(x_q) -> BatchNorm [-> Relu|Clip] -> Q  =>  depthwise 1x1 QuantizedConv(x_q)."""
    changed = False
    for n in list(fn.topological_order()):
        fold = _FOLDS.get(n.kind)
        if fold is not None and n.type.elem.name == "float32":
            changed |= fold(fn, n)
    return changed

"""THE contract: every primitive, declared once.

A primitive is what a backend must implement. Each block holds its operands, attributes,
type rule (which is also its verifier), numpy reference semantics (float64 where precision
matters; the interpreter runs these and the conformance suite uses them as an oracle), the
element kinds it is defined for, traits read by passes, and the examples conformance builds.

The set is small on purpose: every high-level node (``glow_core.graph.nodes``) lowers into
these, so a backend implementing only these runs every supported model.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from glow_core.spec import (
    PRIMITIVES,
    Attr,
    In,
    ex,
    expect,
    normalize_axis,
    primitive,
    random_tensor,
    same_type,
)
from glow_core.types import ALL_KINDS, FLOAT_KINDS, INT_KINDS, ElemKind, Type

NUMERIC_KINDS = FLOAT_KINDS | INT_KINDS
INDEX_KINDS = frozenset({ElemKind.int32, ElemKind.int64})
_WIDE = np.float64


def _wide(x: np.ndarray) -> np.ndarray:
    """Float operands are computed in float64 so the reference is an oracle, not a peer."""
    return x.astype(_WIDE) if x.dtype.kind == "f" or x.dtype.kind == "V" else x


def _positive(rng: np.random.Generator, t: Type) -> np.ndarray:
    return rng.uniform(0.1, 4.0, t.shape).astype(t.dtype)


# ---- element-wise -----------------------------------------------------------------------

_BINARY_EXAMPLES = (ex("f32[4,5]", "f32[4,5]"), ex("f32[3,1,7]", "f32[3,1,7]"), ex("f32[1]", "f32[1]"))
_UNARY_EXAMPLES = (ex("f32[4,5]"), ex("f32[2,3,17]"), ex("f32[1]"), ex("f32[]"))


@primitive
class Add:
    """Element-wise sum of two tensors of one type."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return _wide(lhs) + _wide(rhs)


@primitive
class Sub:
    """Element-wise difference ``lhs - rhs``."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return _wide(lhs) - _wide(rhs)


@primitive
class Mul:
    """Element-wise product."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return _wide(lhs) * _wide(rhs)


@primitive
class Div:
    """Element-wise quotient ``lhs / rhs`` (integer kinds truncate toward zero, as ONNX)."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def sample(rng, lhs, rhs):
        sign = np.where(rng.random(rhs.shape) < 0.5, -1, 1)
        return [random_tensor(rng, lhs), (sign * _positive(rng, rhs)).astype(rhs.dtype)]

    def reference(lhs, rhs):
        if lhs.dtype.kind in "iu":
            return np.trunc(lhs / rhs).astype(lhs.dtype)
        return _wide(lhs) / _wide(rhs)


@primitive
class Max:
    """Element-wise maximum (Relu and Clip lower to it)."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return np.maximum(lhs, rhs)


@primitive
class Min:
    """Element-wise minimum."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return np.minimum(lhs, rhs)


@primitive
class Pow:
    """Element-wise power ``lhs ** rhs`` (float kinds)."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def sample(rng, lhs, rhs):
        return [_positive(rng, lhs), rng.uniform(-2, 2, rhs.shape).astype(rhs.dtype)]

    def reference(lhs, rhs):
        return np.power(_wide(lhs), _wide(rhs))


def _unary(name: str, doc: str, fn, *, positive: bool = False):
    """Declare a float element-wise unary primitive computed in float64 by ``fn``."""

    def type_rule(input: Type) -> Type:
        return input

    def reference(input):
        return fn(_wide(input))

    body = {
        "__doc__": doc,
        "input": In(),
        "elementwise": True,
        "inplace": ("input",),
        "examples": _UNARY_EXAMPLES,
        "type": type_rule,
        "reference": reference,
    }
    if positive:
        body["sample"] = lambda rng, input: [_positive(rng, input)]
    return primitive(type(name, (), body))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


Exp = _unary("Exp", "Element-wise e**x.", np.exp)
Log = _unary("Log", "Element-wise natural logarithm.", np.log, positive=True)
Sqrt = _unary("Sqrt", "Element-wise square root.", np.sqrt, positive=True)
Tanh = _unary("Tanh", "Element-wise hyperbolic tangent.", np.tanh)
Erf = _unary("Erf", "Element-wise Gauss error function (GELU uses it).", _erf)


# ---- tensor creation and data movement ------------------------------------------------


@primitive
class Splat:
    """A tensor of ``shape`` filled with one ``value`` (Glow's Splat): no operands."""

    shape = Attr(tuple)
    value = Attr((int, float, bool))
    elem = Attr(str, "float32")
    kinds = ALL_KINDS
    examples = (ex(shape=(3, 5), value=1.5), ex(shape=(), value=-2.0))

    def type(shape, value, elem):
        return Type(shape, ElemKind.parse(elem))

    def reference(shape, value, elem):
        return np.full(shape, value, dtype=ElemKind.parse(elem).dtype)


@primitive
class Broadcast:
    """Repeat size-1 (or missing leading) dimensions of ``input`` up to ``shape`` (numpy rules)."""

    input = In()
    shape = Attr(tuple)
    kinds = ALL_KINDS
    examples = (ex("f32[1,5]", shape=(4, 5)), ex("f32[3,1,1]", shape=(2, 3, 4, 6)), ex("f32[]", shape=(7,)))

    def type(input, shape):
        expect(len(shape) >= input.rank, f"cannot broadcast to fewer dimensions {shape}", input)
        tail = shape[len(shape) - input.rank :]
        ok = all(d in (1, s) for d, s in zip(input.shape, tail, strict=True))
        expect(ok, f"dimensions not broadcastable to {shape}", input)
        return input.with_shape(shape)

    def reference(input, shape):
        return np.broadcast_to(input, shape).copy()


@primitive
class Reshape:
    """The same elements in another shape; IRGen makes it a view, never a copy."""

    input = In()
    shape = Attr(tuple)
    view = True
    kinds = ALL_KINDS
    examples = (ex("f32[4,6]", shape=(2, 12)), ex("f32[2,3,4]", shape=(24,)))

    def type(input, shape):
        expect(all(d >= 0 for d in shape), f"reshape target {shape} has negative dims", input)
        expect(math.prod(shape) == input.size, f"cannot reshape to {shape}", input)
        return input.with_shape(shape)

    def reference(input, shape):
        return input.reshape(shape)


@primitive
class Transpose:
    """Permute dimensions: result dim ``i`` is input dim ``shuffle[i]``."""

    input = In()
    shuffle = Attr(tuple)
    kinds = ALL_KINDS
    examples = (ex("f32[4,5]", shuffle=(1, 0)), ex("f32[2,3,4,5]", shuffle=(0, 2, 3, 1)))

    def type(input, shuffle):
        expect(sorted(shuffle) == list(range(input.rank)), f"bad shuffle {shuffle}", input)
        return input.with_shape(tuple(input.shape[i] for i in shuffle))

    def reference(input, shuffle):
        return np.transpose(input, shuffle).copy()


@primitive
class Slice:
    """Elements ``starts[i]:ends[i]:steps[i]`` along every dimension (bounds already clamped)."""

    input = In()
    starts = Attr(tuple)
    ends = Attr(tuple)
    steps = Attr(tuple, None)
    kinds = ALL_KINDS
    examples = (
        ex("f32[6,7]", starts=(1, 2), ends=(5, 7)),
        ex("f32[10]", starts=(9,), ends=(0,), steps=(-2,)),
    )

    def type(input, starts, ends, steps):
        steps = steps or (1,) * input.rank
        expect(len(starts) == len(ends) == len(steps) == input.rank, "slice needs one range per dim", input)
        dims = []
        for d, s, e, st in zip(input.shape, starts, ends, steps, strict=True):
            # Bounds are clamped like ONNX does before they get here: for a positive step
            # 0 <= start, end <= d; for a negative step -1 <= start, end <= d - 1, where -1
            # means "past the front" (so the reference never meets Python's negative indexing).
            expect(st != 0, "slice step must not be 0", input)
            if st > 0:
                ok = 0 <= s <= d and 0 <= e <= d
            else:
                ok = (0 <= s <= d - 1 and -1 <= e <= d - 1) or (d == 0 and s == e == -1)
            expect(ok, f"range {s}:{e}:{st} out of bounds for size {d}", input)
            dims.append(len(range(s, e, st)))
        return input.with_shape(tuple(dims))

    def reference(input, starts, ends, steps):
        steps = steps or (1,) * input.ndim
        index = tuple(
            slice(s if s >= 0 else None, e if e >= 0 else None, st)
            for s, e, st in zip(starts, ends, steps, strict=True)
        )
        return input[index].copy()


@primitive
class Concat:
    """Join ``inputs`` along ``axis``; all other dimensions agree."""

    inputs = In(variadic=True)
    axis = Attr(int)
    kinds = ALL_KINDS
    examples = (ex("f32[2,3]", "f32[2,5]", axis=1), ex("f32[1,4]", "f32[3,4]", "f32[2,4]", axis=0))

    def type(inputs, axis):
        expect(len(inputs) >= 1, "concat needs at least one input")
        first = inputs[0]
        expect(first.rank >= 1, "cannot concatenate rank-0 tensors", *inputs)
        axis = normalize_axis(axis, first.rank, first)
        for t in inputs[1:]:
            same = t.elem == first.elem and t.rank == first.rank
            same = same and all(
                a == b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
            )
            expect(same, f"inputs disagree outside axis {axis}", *inputs)
        dims = list(first.shape)
        dims[axis] = sum(t.shape[axis] for t in inputs)
        return first.with_shape(tuple(dims))

    def reference(inputs, axis):
        return np.concatenate(inputs, axis=axis)


@primitive
class Pad:
    """Constant padding: ``pads`` holds all begins then all ends (ONNX order)."""

    input = In()
    pads = Attr(tuple)
    value = Attr((int, float), 0.0)
    kinds = NUMERIC_KINDS
    examples = (
        ex("f32[2,3]", pads=(1, 0, 2, 3)),
        ex("f32[1,2,4,4]", pads=(0, 0, 1, 1, 0, 0, 1, 1), value=-1.0),
    )

    def type(input, pads, value):
        expect(len(pads) == 2 * input.rank, f"pads {pads} need two entries per dim", input)
        expect(all(p >= 0 for p in pads), f"negative pads {pads} (use Slice)", input)
        r = input.rank
        return input.with_shape(tuple(d + pads[i] + pads[i + r] for i, d in enumerate(input.shape)))

    def reference(input, pads, value):
        r = input.ndim
        return np.pad(input, [(pads[i], pads[i + r]) for i in range(r)], constant_values=value)


@primitive
class Gather:
    """Take slices of ``data`` along ``axis`` at ``indices`` (negative indices count back)."""

    data = In()
    indices = In()
    axis = Attr(int, 0)
    kinds = ALL_KINDS
    examples = (ex("f32[5,4]", "i64[3]"), ex("f32[3,6]", "i32[2,2]", axis=1), ex("f32[4,3]", "i64[]"))

    def type(data, indices, axis):
        expect(indices.elem in INDEX_KINDS, "indices must be int32 or int64", indices)
        axis = normalize_axis(axis, data.rank, data)
        return data.with_shape(data.shape[:axis] + indices.shape + data.shape[axis + 1 :])

    def sample(rng, data, indices, axis):
        n = data.shape[axis % data.rank]
        return [random_tensor(rng, data), rng.integers(-n, n, indices.shape).astype(indices.dtype)]

    def reference(data, indices, axis):
        return np.take(data, indices, axis=axis)


@primitive
class Convert:
    """Change the element kind (float <-> int truncates toward zero, as ONNX Cast)."""

    input = In()
    elem = Attr(str)
    kinds = ALL_KINDS
    examples = (ex("f32[4,5]", elem="int32"), ex("i64[7]", elem="float32"))

    def type(input, elem):
        return input.with_elem(ElemKind.parse(elem))

    def reference(input, elem):
        return input.astype(ElemKind.parse(elem).dtype)


# ---- linear algebra -------------------------------------------------------------------


@primitive
class MatMul:
    """[m,k] x [k,n] -> [m,n]."""

    lhs = In()
    rhs = In()
    examples = (ex("f32[4,3]", "f32[3,5]"), ex("f32[1,64]", "f32[64,33]"), ex("f32[17,1]", "f32[1,9]"))

    def type(lhs, rhs):
        expect(lhs.rank == rhs.rank == 2, "operands must be 2-D", lhs, rhs)
        expect(lhs.shape[1] == rhs.shape[0], "inner dimensions differ", lhs, rhs)
        expect(lhs.elem == rhs.elem, "element kinds differ", lhs, rhs)
        return lhs.with_shape((lhs.shape[0], rhs.shape[1]))

    def reference(lhs, rhs):
        return _wide(lhs) @ _wide(rhs)


@primitive
class BatchMatMul:
    """[b,m,k] x [b,k,n] -> [b,m,n]: one MatMul per batch entry (attention uses it)."""

    lhs = In()
    rhs = In()
    examples = (ex("f32[3,4,5]", "f32[3,5,2]"), ex("f32[1,7,16]", "f32[1,16,7]"))

    def type(lhs, rhs):
        expect(lhs.rank == rhs.rank == 3, "operands must be 3-D", lhs, rhs)
        expect(lhs.shape[0] == rhs.shape[0], "batch dimensions differ", lhs, rhs)
        expect(lhs.shape[2] == rhs.shape[1], "inner dimensions differ", lhs, rhs)
        expect(lhs.elem == rhs.elem, "element kinds differ", lhs, rhs)
        return lhs.with_shape((lhs.shape[0], lhs.shape[1], rhs.shape[2]))

    def reference(lhs, rhs):
        return np.matmul(_wide(lhs), _wide(rhs))


@primitive
class ReduceSum:
    """Sum over ``axes``; reduced dimensions are kept with size 1."""

    input = In()
    axes = Attr(tuple)
    kinds = NUMERIC_KINDS
    examples = (ex("f32[4,5]", axes=(1,)), ex("f32[2,3,4]", axes=(0, 2)), ex("f32[9]", axes=(0,)))

    def type(input, axes):
        return _reduced(input, axes)

    def reference(input, axes):
        return np.sum(_wide(input), axis=axes, keepdims=True)


@primitive
class ReduceMax:
    """Maximum over ``axes``; reduced dimensions are kept with size 1."""

    input = In()
    axes = Attr(tuple)
    kinds = NUMERIC_KINDS
    examples = (ex("f32[4,5]", axes=(1,)), ex("f32[2,3,4]", axes=(0, 2)))

    def type(input, axes):
        return _reduced(input, axes)

    def reference(input, axes):
        return np.max(input, axis=axes, keepdims=True)


def _reduced(input: Type, axes: tuple[int, ...]) -> Type:
    expect(len(axes) > 0, "reduce needs at least one axis", input)
    expect(all(0 <= a < input.rank for a in axes), f"axes {axes} out of range", input)
    expect(len(set(axes)) == len(axes), f"repeated axes {axes}", input)
    return input.with_shape(tuple(1 if i in axes else d for i, d in enumerate(input.shape)))


# ---- convolution and pooling (NCHW) ------------------------------------------------


def _window_out(size: int, kernel: int, stride: int, pad_total: int, dilation: int = 1) -> int:
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


def _check_window(input: Type, kernel, strides, pads, dilations=(1, 1)) -> tuple[int, int]:
    expect(input.rank == 4, "input must be NCHW", input)
    expect(len(kernel) == 2 and len(strides) == 2 and len(pads) == 4, "2-D window attrs expected", input)
    expect(min(strides) >= 1 and min(dilations) >= 1 and min(pads) >= 0, "bad strides/pads/dilations", input)
    oh = _window_out(input.shape[2], kernel[0], strides[0], pads[0] + pads[2], dilations[0])
    ow = _window_out(input.shape[3], kernel[1], strides[1], pads[1] + pads[3], dilations[1])
    expect(oh >= 1 and ow >= 1, f"window {kernel} larger than padded input", input)
    return oh, ow


def _check_pool_pads(input: Type, kernel, pads) -> None:
    # A pooling window lying wholly in padding has no input element: NaN for a mean,
    # -inf for a max. (Convolution has no such problem: padding there is plain zeros.)
    ok = all(pads[i] < kernel[i % 2] for i in range(4))
    expect(ok, f"pads {pads} must be smaller than the kernel {tuple(kernel)}", input)


def _windows(x: np.ndarray, kernel, strides, pads, dilations, fill: float) -> np.ndarray:
    """[N,C,OH,OW,kh,kw] strided view of the padded input (pads: top, left, bottom, right)."""
    xp = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=fill)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations, strict=True))
    win = sliding_window_view(xp, span, axis=(2, 3))
    return win[:, :, :: strides[0], :: strides[1], :: dilations[0], :: dilations[1]]


@primitive
class Convolution:
    """2-D convolution, NCHW input, filter [Cout, Cin/group, kh, kw]; bias is a separate Add."""

    input = In()
    filter = In()
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right")
    dilations = Attr(tuple, (1, 1))
    group = Attr(int, 1)
    examples = (
        ex("f32[1,3,8,8]", "f32[4,3,3,3]", pads=(1, 1, 1, 1)),
        ex("f32[2,4,9,7]", "f32[6,2,3,2]", strides=(2, 1), group=2),
        ex("f32[1,5,6,6]", "f32[5,1,3,3]", pads=(1, 1, 1, 1), group=5),
        ex("f32[1,2,11,11]", "f32[3,2,3,3]", dilations=(2, 2), pads=(0, 1, 2, 0)),
    )

    def type(input, filter, strides, pads, dilations, group):
        expect(filter.rank == 4, "filter must be [Cout, Cin/group, kh, kw]", filter)
        cout, cin_g = filter.shape[:2]
        expect(
            group >= 1 and input.shape[1] == cin_g * group, f"channels differ (group={group})", input, filter
        )
        expect(cout % group == 0, f"output channels not divisible by group {group}", filter)
        oh, ow = _check_window(input, filter.shape[2:], strides, pads, dilations)
        return input.with_shape((input.shape[0], cout, oh, ow))

    def reference(input, filter, strides, pads, dilations, group):
        win = _windows(_wide(input), filter.shape[2:], strides, pads, dilations, 0.0)
        n, c, oh, ow, kh, kw = win.shape
        w = _wide(filter).reshape(group, -1, c // group, kh, kw)
        win = win.reshape(n, group, c // group, oh, ow, kh, kw)
        out = np.einsum("ngchwij,gocij->ngohw", win, w, optimize=True)
        return out.reshape(n, -1, oh, ow)


@primitive
class MaxPool:
    """Maximum over each window; padding never wins."""

    input = In()
    kernel = Attr(tuple)
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0))
    examples = (
        ex("f32[1,3,8,8]", kernel=(2, 2), strides=(2, 2)),
        ex("f32[2,2,7,9]", kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
    )

    def type(input, kernel, strides, pads):
        oh, ow = _check_window(input, kernel, strides, pads)
        _check_pool_pads(input, kernel, pads)
        return input.with_shape(input.shape[:2] + (oh, ow))

    def reference(input, kernel, strides, pads):
        return _windows(input, kernel, strides, pads, (1, 1), -np.inf).max(axis=(4, 5))


@primitive
class AvgPool:
    """Mean over each window; ``count_include_pad`` decides whether pads count in the divisor."""

    input = In()
    kernel = Attr(tuple)
    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0))
    count_include_pad = Attr(bool, False)
    examples = (
        ex("f32[1,3,8,8]", kernel=(2, 2), strides=(2, 2)),
        ex("f32[2,2,7,9]", kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
        ex("f32[1,4,5,5]", kernel=(3, 3), pads=(1, 1, 1, 1), count_include_pad=True),
    )

    def type(input, kernel, strides, pads, count_include_pad):
        oh, ow = _check_window(input, kernel, strides, pads)
        _check_pool_pads(input, kernel, pads)
        return input.with_shape(input.shape[:2] + (oh, ow))

    def reference(input, kernel, strides, pads, count_include_pad):
        sums = _windows(_wide(input), kernel, strides, pads, (1, 1), 0.0).sum(axis=(4, 5))
        if count_include_pad:
            return sums / (kernel[0] * kernel[1])
        ones = np.ones((1, 1) + input.shape[2:])
        counts = _windows(ones, kernel, strides, pads, (1, 1), 0.0).sum(axis=(4, 5))
        return sums / counts


ELEMENTWISE = frozenset(name for name, spec in PRIMITIVES.items() if spec.elementwise)
"""Names of the element-wise primitives, computed from the declarations."""

"""Recurrent layers (ONNX LSTM, GRU, RNN) as one kernel: a loop over the time steps.

Lowered, a recurrence is unrolled (``glow_core.graph.nodes.recurrent_lowering``): every time
step becomes a dozen graph nodes, so compile time grows with the sequence (a one-layer
bidirectional GRU over 400 steps took 10 s to compile, this kernel 0.3 s: docs/performance.md).
Kept whole, the layer is one instruction whatever its length, and this kernel runs what
the lowering's ``_step`` builds, in a loop:

- per direction, the input projection of every step at once: ``x @ W^T``, one GEMM over
  ``seq * batch`` rows (``kernels/gemm.py``, W packed at compile time, or by the kernel
  when it is an input);
- per step, the recurrent product ``h @ R^T`` of every batch row (a GEMM of ``batch`` rows,
  R packed), then, row by row in 16-float chunks of the hidden state, the gates with their
  biases, clip and activations, the new states, and the output row;
- GRU without ``linear_before_reset`` multiplies ``r * h`` by R's candidate block: a
  second product per step between two passes over the rows.

Sequence lengths are read at run time: a row whose sequence has ended keeps its states and
outputs zeros, and the reverse direction starts each row at its own last step (the
lowering's reversal within the length). The arithmetic is the lowering's, operation for
operation (the same exponential and tanh, the biases added where it adds them), so the
results differ from the lowered ones only in the GEMMs' summation order.

A bidirectional layer's two directions are independent: with several threads each part
runs whole directions (its states and projection in its own private scratch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_core.graph.node import Node
from glow_core.graph.nodes.recurrent_cells import GATES, activation_specs
from glow_core.spec import NODES
from glow_core.types import ElemKind
from glow_cpu.emit import VECTOR, Kernel, emits
from glow_cpu.kernels import mathfn
from glow_cpu.kernels.gemm import emit_gemm
from glow_cpu.kernels.gemm_shape import Gemm, tile_for
from glow_cpu.kernels.ops import apply
from glow_cpu.kernels.simd import vector_load, vector_store
from glow_cpu.loops import F32, I64, float_at, for_range, i64, vector_constant

KINDS = ("LSTM", "GRU", "RNN")
F32_ONLY = frozenset({ElemKind.float32})
_F = ElemKind.float32

Vector = ir.Value


def kept(node: Node) -> bool:
    """Whether the cpu backend runs recurrent ``node`` as this kernel (else it is unrolled):
    float32 throughout (the lengths aside) and at least one step and one batch row."""
    names = NODES[node.kind].operands
    operands = [i.type for name, i in zip(names, node.inputs, strict=True) if name != "lengths"]
    return all(t.elem is ElemKind.float32 for t in operands) and operands[0].size > 0


@dataclass(frozen=True)
class _Layer:
    """The layer's dims and where each (step, direction, batch row) sits in its tensors."""

    op: str
    seq: int
    batch: int
    width: int  # I: input features
    hidden: int  # H
    dirs: int
    layout: int
    clip: float

    @property
    def gates(self) -> int:
        """G * H: the width of a row of W, R and the projection."""
        return GATES[self.op] * self.hidden

    @property
    def steps(self) -> int:
        """The result's sequence axis: Y's steps, then the final hidden (and cell) state."""
        return self.seq + (2 if self.op == "LSTM" else 1)

    def x_row(self, b: ir.IRBuilder, time: ir.Value, row: ir.Value) -> ir.Value:
        """The input's (and projection's) row of step ``time`` of batch row ``row``."""
        if self.layout == 0:
            return b.add(b.mul(time, i64(self.batch)), row)
        return b.add(b.mul(row, i64(self.seq)), time)

    def y_at(self, b: ir.IRBuilder, step: ir.Value, d: int, row: ir.Value) -> ir.Value:
        """The element offset of the result's H floats at (step, direction ``d``, row)."""
        if self.layout == 0:
            outer = b.add(b.mul(b.add(b.mul(step, i64(self.dirs)), i64(d)), i64(self.batch)), row)
        else:
            outer = b.add(b.mul(b.add(b.mul(row, i64(self.steps)), step), i64(self.dirs)), i64(d))
        return b.mul(outer, i64(self.hidden))

    def state_at(self, b: ir.IRBuilder, d: int, row: ir.Value) -> ir.Value:
        """The element offset of initial_h/initial_c's H floats of direction ``d``, row."""
        if self.layout == 0:
            return b.mul(b.add(i64(d * self.batch), row), i64(self.hidden))
        return b.mul(b.add(b.mul(row, i64(self.dirs)), i64(d)), i64(self.hidden))


@dataclass(frozen=True)
class _Product:
    """``c[m, n] = a[m, depth] @ panels``, the B panels one direction's after another's
    (``packing.recurrent_panels``): what ``emit_gemm`` needs, less the pointers."""

    m: int
    depth: int
    n: int
    mr: int
    nr: int
    packed: ir.Value  # every direction's panels

    @classmethod
    def packing(cls, k: Kernel, operand: int, m: int, columns: tuple[int, int]) -> _Product:
        """Columns ``[start, stop)`` of operand ``operand``'s transpose in panels: packed at
        compile time for a constant, else by the kernel at each run, into private scratch."""
        dirs, _, depth = k.types[operand].shape
        n = columns[1] - columns[0]
        mr, nr = tile_for(m, n, accumulators=k.accumulators)
        if k.values[operand] is not None:
            packed = k.pack(operand, "recurrent_panels", nr=nr, start=columns[0], stop=columns[1])
            return cls(m, depth, n, mr, nr, packed)
        product = cls(m, depth, n, mr, nr, k.private_scratch(dirs * _panel_floats(n, nr, depth) * 4))
        product._pack_at_run_time(k, operand, columns[0])
        return product

    def _pack_at_run_time(self, k: Kernel, operand: int, start: int) -> None:
        """``packing.recurrent_panels`` of a weight that is an input, column by column of
        its transpose (once per run, for the ``seq`` steps that read it)."""
        b = k.b
        dirs, rows, _ = k.types[operand].shape
        source = k.sources[operand - 1].ptr
        width = -(-self.n // self.nr) * self.nr  # columns with the last panel's padding
        with for_range(b, dirs * width, name="col") as flat:
            d, col = b.sdiv(flat, i64(width)), b.srem(flat, i64(width))
            panel, lane = b.sdiv(col, i64(self.nr)), b.srem(col, i64(self.nr))
            in_direction = b.add(b.mul(panel, i64(self.depth * self.nr)), lane)
            first = b.add(b.mul(d, i64(width * self.depth)), in_direction)
            inside = b.icmp_signed("<", col, i64(self.n))
            read = b.select(inside, col, i64(self.n - 1))  # the padding reads a real column
            row = b.mul(b.add(b.mul(d, i64(rows)), b.add(read, i64(start))), i64(self.depth))
            with for_range(b, self.depth, name="kk") as kk:
                value = b.load(float_at(b, source, b.add(row, kk)), typ=F32)
                value = b.select(inside, value, ir.Constant(F32, 0.0))
                b.store(value, float_at(b, self.packed, b.add(first, b.mul(kk, i64(self.nr)))))

    def run(self, k: Kernel, d: int, a: ir.Value, c: ir.Value, ldc: int) -> None:
        panels = float_at(k.b, self.packed, d * _panel_floats(self.n, self.nr, self.depth))
        gemm = Gemm(
            m=self.m,
            n=self.n,
            outer=self.depth,
            taps=(0,),
            a=a,
            a_panel=self.mr * self.depth,
            a_row=self.depth,
            a_k=1,
            b=panels,
            b_panel=self.depth * self.nr,
            b_outer=self.nr,
            b_padded=True,
            c=c,
            ldc=ldc,
            mr=self.mr,
            nr=self.nr,
        )
        emit_gemm(k, gemm, split=False)


def _panel_floats(n: int, nr: int, depth: int) -> int:
    """Floats of one direction's panels of ``n`` columns (``packing.recurrent_panels``)."""
    return -(-n // nr) * nr * depth


def _splat(value: float) -> ir.Constant:
    """``value`` in all 16 lanes, the process's shared constant (``loops.vector_constant``)."""
    return vector_constant(F32, (float(value),) * VECTOR)


def _op(b: ir.IRBuilder, kind: str, *args: Vector) -> Vector:
    return apply(b, kind, _F, list(args))


def _activation(b: ir.IRBuilder, name: str, alpha: float, beta: float, x: Vector) -> Vector:
    """ONNX activation ``name`` as ``recurrent_cells._activation`` lowers it, operation for
    operation (Sigmoid as its own lowering: 1 / (1 + exp(0 - x)))."""
    zero, one = _splat(0.0), _splat(1.0)
    if name == "Sigmoid":
        return _op(b, "Div", one, _op(b, "Add", one, mathfn.exp(b, _op(b, "Sub", zero, x))))
    if name == "Tanh":
        return mathfn.tanh(b, x)
    if name == "Relu":
        return _op(b, "Max", x, zero)
    if name == "Affine":
        return _op(b, "Add", _op(b, "Mul", x, _splat(alpha)), _splat(beta))
    if name == "LeakyRelu":
        negative = _op(b, "Mul", _op(b, "Min", x, zero), _splat(alpha))
        return _op(b, "Add", _op(b, "Max", x, zero), negative)
    if name == "ScaledTanh":
        return _op(b, "Mul", mathfn.tanh(b, _op(b, "Mul", x, _splat(beta))), _splat(alpha))
    if name == "HardSigmoid":
        affine = _op(b, "Add", _op(b, "Mul", x, _splat(alpha)), _splat(beta))
        return _op(b, "Min", _op(b, "Max", affine, zero), one)
    magnitude = _op(b, "Max", x, _op(b, "Sub", zero, x))
    if name == "Softsign":
        return _op(b, "Div", x, _op(b, "Add", one, magnitude))
    assert name == "Softplus", name
    tail = _op(b, "Log", _op(b, "Add", one, mathfn.exp(b, _op(b, "Sub", zero, magnitude))))
    return _op(b, "Add", _op(b, "Max", x, zero), tail)


class _Cell:
    """One direction's activations and clip, applied to vectors."""

    def __init__(self, b: ir.IRBuilder, specs: list[tuple[str, float, float]], clip: float):
        self.b, self.specs, self.clip = b, specs, clip

    def act(self, which: int, x: Vector, clipped: bool = True) -> Vector:
        """Activation ``which`` (0: f, 1: g, 2: h) of ``x``, clipped first unless told."""
        if clipped and not math.isinf(self.clip):
            x = _op(self.b, "Min", _op(self.b, "Max", x, _splat(-self.clip)), _splat(self.clip))
        return _activation(self.b, *self.specs[which], x)


def _chunks(k: Kernel, hidden: int, body: Callable[[ir.Value, int], None]) -> None:
    """``body(offset, lanes)`` over the hidden state in 16-float chunks (the last masked)."""
    full, rest = divmod(hidden, VECTOR)
    if full:
        with for_range(k.b, full, name="j") as j:
            body(k.b.mul(j, i64(VECTOR)), VECTOR)
    if rest:
        body(i64(full * VECTOR), rest)


@emits(*KINDS, kinds=F32_ONLY)
def emit_recurrent(k: Kernel) -> None:
    op = k.instr.kind
    x, _, recurrence, bias, lengths, initial_h = k.sources[:6]
    attrs = k.attrs
    layout = attrs["layout"]
    seq, batch, width = x.shape if layout == 0 else (x.shape[1], x.shape[0], x.shape[2])
    dirs, gates, hidden = recurrence.shape
    layer = _Layer(op, seq, batch, width, hidden, dirs, layout, attrs["clip"])
    b = k.b
    k.work = dirs * seq * batch * gates * (width + hidden) // VECTOR
    split_product = op == "GRU" and not attrs["linear_before_reset"]
    projection = _Product.packing(k, 2, seq * batch, (0, gates))
    recurrent = _Product.packing(k, 3, batch, (0, 2 * hidden if split_product else gates))
    candidate = _Product.packing(k, 3, batch, (2 * hidden, gates)) if split_product else None
    scratch = {
        "projected": k.private_scratch(seq * batch * gates * 4),
        "h": k.private_scratch(batch * hidden * 4),
        "hw": k.private_scratch(batch * gates * 4),
    }
    if op == "LSTM":
        scratch["c"] = k.private_scratch(batch * hidden * 4)
    if split_product:
        scratch["rh"] = k.private_scratch(batch * hidden * 4)
        scratch["rhw"] = k.private_scratch(batch * hidden * 4)
    specs = activation_specs(op, dirs, attrs)
    start, stop = k.split(dirs)
    for d in range(dirs):
        inside = b.and_(b.icmp_signed("<=", start, i64(d)), b.icmp_signed("<", i64(d), stop))
        with b.if_then(inside):
            direction = _Direction(k, layer, d, _Cell(b, specs[d], layer.clip), scratch)
            direction.run(x.ptr, (projection, recurrent, candidate), (bias.ptr, lengths, initial_h.ptr))


class _Direction:
    """The code of one direction: projection, the loop over steps, the final states."""

    def __init__(self, k: Kernel, layer: _Layer, d: int, cell: _Cell, scratch: dict[str, ir.Value]):
        self.k, self.b, self.layer, self.d, self.cell, self.s = k, k.b, layer, d, cell, scratch
        self.backward = k.attrs["direction"] == "reverse" or d == 1
        self.dest = k.dest.ptr

    def run(self, x: ir.Value, products: tuple, operands: tuple) -> None:
        k, b, layer, s = self.k, self.b, self.layer, self.s
        projection, recurrent, candidate = products
        bias, lengths, initial_h = operands
        sources = k.sources
        self.bias = float_at(b, bias, self.d * 2 * layer.gates)
        self.peephole = float_at(b, sources[7].ptr, self.d * 3 * layer.hidden) if layer.op == "LSTM" else None
        projection.run(k, self.d, x, s["projected"], layer.gates)
        with for_range(b, layer.batch, name="row") as row:
            self._copy(float_at(b, initial_h, layer.state_at(b, self.d, row)), self._row("h", row))
            if layer.op == "LSTM":
                self._copy(float_at(b, sources[6].ptr, layer.state_at(b, self.d, row)), self._row("c", row))
            if candidate is not None:  # a row past its length multiplies its r * h of before
                self._zero(self._row("rh", row))
        with for_range(b, layer.seq, name="t") as t:
            recurrent.run(k, self.d, s["h"], s["hw"], layer.gates)
            self._rows(t, lengths, self._first_pass, zero_outputs=True)
            if candidate is not None:
                candidate.run(k, self.d, s["rh"], s["rhw"], layer.hidden)
                self._rows(t, lengths, self._second_pass, zero_outputs=False)
        with for_range(b, layer.batch, name="row") as row:
            final_h = layer.y_at(b, i64(layer.seq), self.d, row)
            self._copy(self._row("h", row), float_at(b, self.dest, final_h))
            if layer.op == "LSTM":
                final_c = layer.y_at(b, i64(layer.seq + 1), self.d, row)
                self._copy(self._row("c", row), float_at(b, self.dest, final_c))

    # ---- rows ---------------------------------------------------------------------------

    def _row(self, name: str, row: ir.Value) -> ir.Value:
        width = self.layer.gates if name == "hw" else self.layer.hidden
        return float_at(self.b, self.s[name], self.b.mul(row, i64(width)))

    def _copy(self, source: ir.Value, target: ir.Value) -> None:
        def body(j: ir.Value, lanes: int) -> None:
            value = vector_load(self.k, float_at(self.b, source, j), lanes)
            vector_store(self.k, float_at(self.b, target, j), value, lanes)

        _chunks(self.k, self.layer.hidden, body)

    def _rows(self, t: ir.Value, lengths, cell_pass: Callable, zero_outputs: bool) -> None:
        """``cell_pass(row, time)`` for every batch row still inside its sequence at step
        ``t``; with ``zero_outputs`` the others' output at ``t`` is zeros."""
        b, layer = self.b, self.layer
        with for_range(b, layer.batch, name="row") as row:
            length = lengths.load(b, row)
            if lengths.elem is not ElemKind.int64:
                length = b.sext(length, I64)
            length = b.select(b.icmp_signed("<", length, i64(0)), i64(0), length)
            length = b.select(b.icmp_signed(">", length, i64(layer.seq)), i64(layer.seq), length)
            active = b.icmp_signed("<", t, length)
            time = b.sub(b.sub(length, i64(1)), t) if self.backward else t
            if zero_outputs:
                with b.if_else(active) as (inside, ended):
                    with inside:
                        cell_pass(row, time)
                    with ended:
                        self._zero_output(t, row)
            else:
                with b.if_then(active):
                    cell_pass(row, time)

    def _zero_output(self, t: ir.Value, row: ir.Value) -> None:
        self._zero(float_at(self.b, self.dest, self.layer.y_at(self.b, t, self.d, row)))

    def _zero(self, target: ir.Value) -> None:
        """H zeros at ``target``."""

        def body(j: ir.Value, lanes: int) -> None:
            vector_store(self.k, float_at(self.b, target, j), _splat(0.0), lanes)

        _chunks(self.k, self.layer.hidden, body)

    # ---- the cells ----------------------------------------------------------------------

    def _view(self, row: ir.Value, time: ir.Value) -> _RowView:
        b, layer = self.b, self.layer
        projected = float_at(b, self.s["projected"], b.mul(layer.x_row(b, time, row), i64(layer.gates)))
        out = float_at(b, self.dest, layer.y_at(b, time, self.d, row))
        return _RowView(row, projected, self._row("hw", row), self._row("h", row), out)

    def _load(self, base: ir.Value, j: ir.Value, lanes: int, index: int = 0) -> Vector:
        """Chunk ``j`` of gate block ``index`` (H floats each) at ``base``."""
        at = self.b.add(j, i64(index * self.layer.hidden))
        return vector_load(self.k, float_at(self.b, base, at), lanes)

    def _bias(self, index: int, j: ir.Value, lanes: int, recurrent: bool = False) -> Vector:
        """Chunk ``j`` of gate ``index`` of W's bias (or R's): B holds W's then R's."""
        start = self.layer.gates if recurrent else 0
        return self._load(float_at(self.b, self.bias, start), j, lanes, index)

    def _store(self, base: ir.Value, j: ir.Value, value: Vector, lanes: int) -> None:
        vector_store(self.k, float_at(self.b, base, j), value, lanes)

    def _first_pass(self, row: ir.Value, time: ir.Value) -> None:
        view = self._view(row, time)
        step = {"GRU": self._gru_gates, "LSTM": self._lstm_gates, "RNN": self._rnn_gates}[self.layer.op]
        _chunks(self.k, self.layer.hidden, lambda j, lanes: step(view, j, lanes))

    def _rnn_gates(self, v: _RowView, j: ir.Value, lanes: int) -> None:
        """h' = f(x W^T + (Wb + Rb) + h R^T)."""
        b = self.b
        both = _op(b, "Add", self._bias(0, j, lanes), self._bias(0, j, lanes, True))
        xw = _op(b, "Add", self._load(v.projected, j, lanes), both)
        h_new = self.cell.act(0, _op(b, "Add", xw, self._load(v.hw, j, lanes)))
        self._store(v.h, j, h_new, lanes)
        self._store(v.out, j, h_new, lanes)

    def _gru_gates(self, v: _RowView, j: ir.Value, lanes: int) -> None:
        """z, r and (with ``linear_before_reset``) the new state; else z kept and r * h."""
        b, cell = self.b, self.cell

        def pre(index: int) -> Vector:
            xw = _op(b, "Add", self._load(v.projected, j, lanes, index), self._bias(index, j, lanes))
            hw = _op(b, "Add", self._load(v.hw, j, lanes, index), self._bias(index, j, lanes, True))
            return _op(b, "Add", xw, hw)

        z, r = cell.act(0, pre(0)), cell.act(0, pre(1))
        h_old = self._load(v.h, j, lanes)
        if self.k.attrs["linear_before_reset"]:
            hh = _op(b, "Add", self._load(v.hw, j, lanes, 2), self._bias(2, j, lanes, True))
            self._gru_update(v, j, lanes, (z, _op(b, "Mul", r, hh), h_old))
            return
        self._store(v.hw, j, z, lanes)  # z's columns of hw are read no more this step
        self._store(self._row("rh", v.row), j, _op(b, "Mul", r, h_old), lanes)

    def _second_pass(self, row: ir.Value, time: ir.Value) -> None:
        """GRU without ``linear_before_reset``: the candidate from (r * h) R_h + Rb_h."""
        view = self._view(row, time)
        products = self._row("rhw", row)

        def body(j: ir.Value, lanes: int) -> None:
            recurrent = _op(self.b, "Add", self._load(products, j, lanes), self._bias(2, j, lanes, True))
            z, h_old = self._load(view.hw, j, lanes), self._load(view.h, j, lanes)
            self._gru_update(view, j, lanes, (z, recurrent, h_old))

        _chunks(self.k, self.layer.hidden, body)

    def _gru_update(self, v: _RowView, j: ir.Value, lanes: int, values: tuple[Vector, ...]) -> None:
        """h' = (1 - z) * g(x W_h^T + Wb_h + recurrent) + z * h."""
        b = self.b
        z, recurrent, h_old = values
        xw = _op(b, "Add", self._load(v.projected, j, lanes, 2), self._bias(2, j, lanes))
        candidate = self.cell.act(1, _op(b, "Add", xw, recurrent))
        keep = _op(b, "Mul", z, h_old)
        h_new = _op(b, "Add", _op(b, "Mul", _op(b, "Sub", _splat(1.0), z), candidate), keep)
        self._store(v.h, j, h_new, lanes)
        self._store(v.out, j, h_new, lanes)

    def _lstm_gates(self, v: _RowView, j: ir.Value, lanes: int) -> None:
        """Gates i, o, f, c (peepholes on i and f from c, on o from the new c), c' and h'."""
        b, cell = self.b, self.cell
        c = self._row("c", v.row)

        def pre(index: int) -> Vector:
            both = _op(b, "Add", self._bias(index, j, lanes), self._bias(index, j, lanes, True))
            xw = _op(b, "Add", self._load(v.projected, j, lanes, index), both)
            return _op(b, "Add", xw, self._load(v.hw, j, lanes, index))

        def peep(index: int, state: Vector) -> Vector:
            return _op(b, "Mul", self._load(self.peephole, j, lanes, index), state)

        c_old = self._load(c, j, lanes)
        i = cell.act(0, _op(b, "Add", pre(0), peep(0, c_old)))
        if self.k.attrs["input_forget"]:
            forget = _op(b, "Sub", _splat(1.0), i)
        else:
            forget = cell.act(0, _op(b, "Add", pre(2), peep(2, c_old)))
        candidate = cell.act(1, pre(3))
        c_new = _op(b, "Add", _op(b, "Mul", forget, c_old), _op(b, "Mul", i, candidate))
        o = cell.act(0, _op(b, "Add", pre(1), peep(1, c_new)))
        h_new = _op(b, "Mul", o, cell.act(2, c_new, clipped=False))
        self._store(c, j, c_new, lanes)
        self._store(v.h, j, h_new, lanes)
        self._store(v.out, j, h_new, lanes)


@dataclass(frozen=True)
class _RowView:
    """Where one batch row's step reads and writes: its projected input at its time, its
    recurrent products, its hidden state and its output row."""

    row: ir.Value
    projected: ir.Value
    hw: ir.Value
    h: ir.Value
    out: ir.Value

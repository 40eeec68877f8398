"""The emitter table and the context an emitter builds one instruction's kernel in.

``EMIT`` maps an instruction kind to the functions that emit its kernel, each with the
element kinds it handles (float32 convolution and float64 convolution are different code in
different modules); the backend's declared support is their union, read from the table,
never written by hand. An emitter receives a ``Kernel``: an LLVM function specialized to
the instruction's static shapes and attributes, with its operands as pointer arguments.
How each element kind is stored and computed in LLVM, and the kind families emitters
declare, are ``kinds.py``'s.

A kernel may have several *phases* (separate functions run one after the other, with a
barrier between them when threads > 1), so a convolution can pad its input with all
threads, then run its GEMM with all threads, each phase seeing the previous one's writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir

from glow_core.ir.instructions import Instr, Value
from glow_core.types import ElemKind, Type
from glow_cpu.chain_ops import Access, Op
from glow_cpu.kinds import storage_type, to_compute, to_storage
from glow_cpu.loops import F32, I8, I32, I64, PTR, VOID, i64
from glow_cpu.packing import packed_nbytes

ALIGN = 64
PARALLEL_WORK = 32768
"""Below this much work (about one element or one 16-lane FMA per unit) a kernel runs on
one thread: waking another and meeting at a barrier costs more than it saves."""
VECTOR = 16  # float lanes of a 512-bit register
F32X16 = ir.VectorType(F32, VECTOR)


@dataclass(frozen=True)
class Emitter:
    """How one instruction kind becomes code, and for which selecting element kinds."""

    fn: Callable[[Kernel], None]
    kinds: frozenset[ElemKind]


class Emitters:
    """Every emitter of one instruction kind, each for its own (disjoint) element kinds.

    A primitive may need different code per element kind (the float32 GEMM is a packed,
    register-blocked micro-kernel; float64 and the half kinds are plain loops), and those
    live in different modules. The kinds the backend declares are the union, so support is
    still read from this one table. ``fn`` picks the emitter by the kernel's selecting kind
    (the result's, or the ``kind_operand``'s), so a caller treats it as a single emitter.
    """

    def __init__(self, name: str):
        self.name = name
        self.choices: list[Emitter] = []

    @property
    def kinds(self) -> frozenset[ElemKind]:
        """Every element kind some emitter of this instruction kind handles."""
        return frozenset().union(*(e.kinds for e in self.choices))

    def add(self, emitter: Emitter) -> None:
        """Register ``emitter``; two emitters claiming one element kind is a programming error."""
        overlap = self.kinds & emitter.kinds
        if overlap:
            names = ", ".join(sorted(k.name for k in overlap))
            raise TypeError(f"two emitters for {self.name}[{names}]")
        self.choices.append(emitter)

    def handles(self, elem: ElemKind) -> bool:
        """Whether some emitter handles ``elem`` (without building the union ``kinds`` makes:
        asked once per instruction)."""
        return any(elem in e.kinds for e in self.choices)

    def for_kind(self, elem: ElemKind) -> Emitter:
        """The emitter handling ``elem`` (KeyError when none does)."""
        for emitter in self.choices:
            if elem in emitter.kinds:
                return emitter
        raise KeyError(f"no emitter for {self.name}[{elem.name}]")

    def fn(self, kernel: Kernel) -> None:
        """Emit ``kernel`` with the emitter of its selecting element kind."""
        self.for_kind(kernel.elem).fn(kernel)


EMIT: dict[str, Emitters] = {}


def emits(*names: str, kinds: frozenset[ElemKind]) -> Callable[[Callable[[Kernel], None]], Any]:
    """Register the decorated function as the emitter of ``names`` for selecting ``kinds``
    (a name may get several emitters, for disjoint kinds)."""

    def register(fn: Callable[[Kernel], None]) -> Callable[[Kernel], None]:
        for name in names:
            EMIT.setdefault(name, Emitters(name)).add(Emitter(fn, frozenset(kinds)))
        return fn

    return register


@dataclass
class Tensor:
    """One operand inside the current phase: its pointer argument and glow type."""

    ptr: ir.Value
    type: Type
    value: np.ndarray | None = None  # known at compile time (a constant weight)

    @property
    def elem(self) -> ElemKind:
        return self.type.elem

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def at(self, b: ir.IRBuilder, index: ir.Value) -> ir.Value:
        """Pointer to element ``index`` (i64, row-major linear)."""
        return b.gep(self.ptr, [index], inbounds=True, source_etype=storage_type(self.elem))

    def load(self, b: ir.IRBuilder, index: ir.Value) -> ir.Value:
        raw = b.load(self.at(b, index), typ=storage_type(self.elem))
        return to_compute(b, raw, self.elem)

    def store(self, b: ir.IRBuilder, index: ir.Value, value: ir.Value) -> None:
        b.store(to_storage(b, value, self.elem), self.at(b, index))


@dataclass
class Packed:
    """A constant the emitter re-laid out at compile time, placed after the plan's constants."""

    offset: int
    packer: str
    instr: int  # position of the instruction in the IR function
    operand: int  # which operand of it (0 is the destination)
    params: dict[str, Any]


@dataclass(frozen=True)
class KernelPack:
    """A constant one kernel reads re-laid out: where it sits in the kernel's own block of
    packed constants (every instruction sharing the kernel gets such a block of its own)."""

    packer: str
    operand: int  # which operand of the instruction (0 is the destination)
    params: dict[str, Any]
    offset: int  # bytes from the start of the instruction's block


@dataclass
class Layout:
    """The constant region as the code reads it, and the kernels' scratch sizes.

    The region starts with the packed copies the emitters asked for (``packed``,
    ``constant_bytes`` of them), then, from ``constant_base``, the constants whose own bytes
    some kernel reads, at ``constant_offsets`` (by weight name; ``region_bytes`` in all). A
    constant read only through its packed copy has no place: each weight is stored once.
    """

    constant_base: int = 0
    constant_bytes: int = 0
    packed: list[Packed] = field(default_factory=list)
    shared_scratch: int = 0
    private_scratch: int = 0
    constant_offsets: dict[str, int] = field(default_factory=dict)
    region_bytes: int = 0


@dataclass(frozen=True)
class Tail:
    """An instruction computed inside its producer's kernel (``fusion.FusionPlan.tails``):
    it reads the end of the producer's chain, which then never reaches memory; the kernel
    stores the end of the tail's own ``epilogue``."""

    instr: Instr
    epilogue: list[Op]


@dataclass
class Fused:
    """What the fusion plan gave one kernel: the Access of each source, the epilogue after
    it, which pointer argument holds each buffer they read (by ``id`` of the Value), and
    the instruction it computes after them, if any (``tail``)."""

    accesses: list[Access] = field(default_factory=list)
    epilogue: list[Op] = field(default_factory=list)
    bind: dict[int, int] = field(default_factory=dict)
    tail: Tail | None = None


@dataclass
class Phase:
    """One function of a kernel and whether every thread runs it (else thread 0 alone)."""

    fn: ir.Function
    parallel: bool = False


class Kernel:
    """The code of one instruction under construction.

    Each phase function takes ``(operand pointers..., packed constants, shared scratch,
    private scratch, part)``: a parallel phase is cut into ``parts`` parts (``threads`` times
    the parts per thread), each run by whichever thread claims it (``claims.py``; the private
    scratch is that thread's, reused by every part it runs), a serial phase is part 0 on
    thread 0. Operands that cannot overlap the destination are
    ``noalias``.

    The code depends on nothing but the instruction's kind, attributes, operand types, which
    operands are constants (never their values), aliasing, fusion and the thread settings:
    ``codegen.kernel_key`` lists exactly that, and every instruction with the same key calls
    the same functions with its own pointers (its packed constants included).
    """

    def __init__(
        self,
        module: ir.Module,
        instr: Instr,
        name: str,
        values: Sequence[np.ndarray | None],
        noalias: Sequence[bool],
        threads: int,
        layout: Layout,
        fused: Fused | None = None,
        accumulators: int = 24,
        parts_per_thread: int = 1,
    ):
        self.module = module
        self.instr = instr
        self.name = name
        self.types = [v.type for v, _ in instr.operands]
        self.values = list(values)
        self.noalias = list(noalias)
        self.fused = fused or Fused()
        self.epilogue_done = False  # set by emitters that applied the epilogue themselves
        self.threads = threads
        # More parts than threads let a thread that finishes early claim another part instead
        # of idling until the slowest part is done; one thread runs everything as one part.
        self.parts = threads * parts_per_thread if threads > 1 else 1
        self.layout = layout
        self.accumulators = accumulators  # 16-lane vectors a register tile may keep live (registers.py)
        self.phases: list[Phase] = []
        self.packs: list[KernelPack] = []
        self.packed_bytes = 0
        self.work = max(t.size for t in self.types)  # emitters of heavy kernels raise it
        self.min_work = PARALLEL_WORK
        self._shared = 0
        self._private = 0
        self.phase()

    # ---- phases and operands ----------------------------------------------------

    def phase(self) -> None:
        """Start a new phase: a new function; the builder is positioned in its body."""
        if self.phases:
            self.b.ret_void()
        arg_types = [PTR] * (len(self.noalias) + 3) + [I32]
        fn = ir.Function(self.module, ir.FunctionType(VOID, arg_types), f"{self.name}.p{len(self.phases)}")
        fn.linkage = "internal"
        mark_function(fn)
        # Kept out of line: inlining every kernel into one body makes LLVM's function
        # passes superlinear (seconds per model) and saves nothing measurable.
        fn.attributes.add("noinline")
        for arg, alias_free in zip(fn.args, [*self.noalias, True, True, True], strict=False):
            if alias_free:
                arg.add_attribute("noalias")
        self.phases.append(Phase(fn))
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def finish(self) -> list[Phase]:
        self.b.ret_void()
        self.layout.shared_scratch = max(self.layout.shared_scratch, self._shared)
        self.layout.private_scratch = max(self.layout.private_scratch, self._private)
        return self.phases

    @property
    def fn(self) -> ir.Function:
        return self.phases[-1].fn

    @property
    def attrs(self) -> dict[str, Any]:
        return self.instr.attrs

    @property
    def elem(self) -> ElemKind:
        """The element kind that selects this kernel's code: the result's, or for primitives
        with a fixed result kind (ArgMax, TopK, Compare) the ``kind_operand``'s."""
        spec = self.instr.spec
        if spec is None:
            return self.types[0].elem
        return spec.selecting_kind(self.types[0], self.types[1:])

    @property
    def dest(self) -> Tensor:
        return Tensor(self.fn.args[0], self.types[0], None)

    @property
    def sources(self) -> list[Tensor]:
        return [Tensor(self.fn.args[i], self.types[i], self.values[i]) for i in range(1, len(self.types))]

    @property
    def epilogue(self) -> list[Op]:
        """Element-wise operations fused after this instruction (applied as it stores)."""
        return self.fused.epilogue

    def access(self, operand: int) -> Access:
        """How source ``operand`` (1-based, as in ``instr.operands``) is read element-wise."""
        return self.fused.accesses[operand - 1]

    def pointer(self, value: Value) -> ir.Value:
        """The pointer argument bound to ``value`` (an operand, or a buffer an epilogue reads)."""
        return self.fn.args[self.fused.bind[id(value)]]

    @property
    def part(self) -> ir.Value:
        """Which of the ``parts`` parts of a parallel phase this call runs."""
        return self.fn.args[-1]

    # ---- threads -------------------------------------------------------------------

    def split(self, count: int, grain: int = 1) -> tuple[ir.Value, ir.Value]:
        """This part's ``[start, stop)`` of ``count`` items, in whole multiples of ``grain``.

        Marks the current phase parallel unless the instruction's work is too small to
        share. A part gets the same items for a given number of parts whichever thread
        runs it, so a result never depends on timing.
        """
        if self.parts == 1 or self.work < self.min_work:
            return i64(0), i64(count)
        self.phases[-1].parallel = True
        chunks = -(-count // grain)
        per = -(-chunks // self.parts) * grain
        part = self.b.zext(self.part, I64)
        start = self._min(self.b.mul(part, i64(per)), count)
        stop = self._min(self.b.add(start, i64(per)), count)
        return start, stop

    def _min(self, value: ir.Value, limit: int) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", value, i64(limit)), value, i64(limit))

    # ---- memory the emitter adds ---------------------------------------------------

    def pack(self, operand: int, packer: str, **params: Any) -> ir.Value:
        """A pointer to constant ``operand`` re-laid out by ``packing.PACKERS[packer]``.

        The packed copy is placed in a block of this instruction's own, at the start of the
        constant region (the originals some kernel still reads follow the blocks), which the
        body passes in: instructions sharing this code read their own weights. The runtime
        computes it by name, so a cached object can be used without running the emitters
        again.
        """
        value = self.values[operand]
        assert value is not None, f"{self.name}: operand {operand} is not a constant"
        offset = self.packed_bytes
        self.packs.append(KernelPack(packer, operand, params, offset))
        self.packed_bytes += _aligned(packed_nbytes(packer, value.shape, params))
        return self.b.gep(self.fn.args[-4], [i64(offset)], source_etype=I8)

    def shared_scratch(self, nbytes: int) -> int:
        """Reserve scratch memory seen by every thread, alive across this instruction's
        phases; returns its handle for ``shared``."""
        offset = self._shared
        self._shared += _aligned(nbytes)
        return offset

    def shared(self, handle: int) -> ir.Value:
        """The pointer to reserved shared scratch ``handle`` in the current phase."""
        return self.b.gep(self.fn.args[-3], [i64(handle)], source_etype=I8)

    def private_scratch(self, nbytes: int) -> ir.Value:
        """Scratch memory of this thread alone (call once per phase per buffer)."""
        offset = self._private
        self._private += _aligned(nbytes)
        return self.b.gep(self.fn.args[-2], [i64(offset)], source_etype=I8)

    def alloca(self, ty: ir.Type) -> ir.Value:
        """A stack slot in the entry block (so LLVM promotes it to a register, even in loops)."""
        with self.b.goto_entry_block():
            return self.b.alloca(ty)

    # ---- intrinsics --------------------------------------------------------------

    def intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
        return intrinsic(self.module, name, ret, args)


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The declaration of LLVM intrinsic ``name`` (created once per module)."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ret, list(args)), name)


class _VectorWidth(ir.values.FunctionAttributes):
    """Function attributes plus ``"prefer-vector-width"="512"`` (llvmlite lists only enum ones)."""

    def _to_list(self, ret_type: ir.Type) -> list[str]:
        return [*super()._to_list(ret_type), '"prefer-vector-width"="512"']


def mark_function(fn: ir.Function) -> None:
    """Ask for 512-bit vectors and promise no unwinding."""
    attrs = _VectorWidth()
    attrs.add("nounwind")
    fn.attributes = attrs


def _aligned(n: int) -> int:
    return (max(n, 1) + ALIGN - 1) // ALIGN * ALIGN

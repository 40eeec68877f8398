"""Phases shared by claiming parts, and waits on completion instead of barriers.

A parallel phase is cut into a fixed number of parts (threads times the parts per thread:
``Kernel.split`` by part number), so results never depend on timing. Each thread
*claims* parts and runs them; a thread that is late (descheduled by a busy host, still
waking) finds them claimed by the others and goes on. Before a phase, a thread waits until
every part of the previous phase is *done* (counted by whoever ran it) rather than until
every thread has *arrived*, so nobody waits for a thread that has no work left. A serial
phase runs on thread 0 and counts itself done.

**Home parts first.** Thread ``t`` tries its own parts first (``t * parts_per_thread`` on),
then the next threads' in turn, taking a part by swapping its flag from 0 to 1. So on time,
part ``p`` of every phase runs on the same thread, and a layer whose split matches the one
before it reads what its own core wrote: the same output channels (a residual, a Winograd
layer's input channel blocks after a 1x1 convolution split by rows), the same pixels. With
one counter for the whole phase, the next free part went to whichever thread asked first,
which changed from phase to phase with the finishing order, and half of such reads came
from the other core's cache. Measured on an Intel Xeon with 2 threads, alternating in one
process, both compile orders (docs/performance.md): whole runs at batch 1 1.2-2.0% faster
on ResNet-50, 1.7-1.9% on BERT-mini, 0.4-2.9% on MobileNetV2.

The claim words live in one module global, whole cache lines per phase (the counter the
benches can switch back to, the done count, a flag per part); the entry zeroes them
(``RESET``) before it wakes the workers for a call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from glow_cpu.loops import I32, I64, PTR, VOID, for_range, i32, i64
from glow_cpu.spin import wait_until_equal

RESET = "glow_reset_claims"
_WORDS = 16  # i32 per cache line
_FLAGS = 2  # a phase's words: the claim counter at 0, done at 1, a flag per part from 2 on

HOME_PARTS_FIRST = True
"""Whether each thread claims its own parts of a phase first (benches and tests turn it off
to compare with one counter per phase)."""


class Claims:
    """Emits the claim loops and completion waits of one body."""

    def __init__(self, module: ir.Module, parts: int, phases: int, threads: int):
        self.module = module
        self.parts = parts  # of every parallel phase (``Kernel.parts``): threads x per thread
        self.per_thread = max(1, parts // threads)
        self.stride = _WORDS * -(-(_FLAGS + parts) // _WORDS)
        self.counters = ir.GlobalVariable(
            module, ir.ArrayType(I32, self.stride * max(phases, 1)), "glow_claims"
        )
        self.counters.linkage = "internal"
        self.counters.initializer = ir.Constant(self.counters.value_type, None)
        self.counters.align = 64
        self.next = 0  # the number the next phase gets (in a loop: in its first iteration)
        self.previous: tuple[int | ir.Value, int] | None = None  # (number, parts) of the last phase
        self._iteration: tuple[ir.IRBuilder, ir.Value, int] | None = None  # see ``loop``
        self._reset(phases)

    def _word(
        self, phase: int | ir.Value, word: int, b: ir.IRBuilder | None = None, extra: ir.Value | None = None
    ) -> ir.Value:
        """Word ``word`` (plus ``extra``, computed, when given) of phase ``phase``'s line(s)."""
        if isinstance(phase, int) and extra is None:
            return self.counters.gep([i32(0), i32(phase * self.stride + word)])
        if b is None:
            b = self._iteration[0] if self._iteration else None
        assert b is not None, "a computed phase number outside a loop"
        phase = i32(phase) if isinstance(phase, int) else phase
        index = b.add(b.mul(phase, i32(self.stride)), i32(word))
        if extra is not None:
            index = b.add(index, extra)
        return b.gep(self.counters, [i32(0), index])

    def _number(self) -> int | ir.Value:
        """The next phase's number: a constant, or in a loop's body the first iteration's
        number plus the iteration times the phases per iteration."""
        number = self.next
        self.next += 1
        if self._iteration is None:
            return number
        b, iteration, per_iteration = self._iteration
        return b.add(i32(number), b.mul(b.trunc(iteration, I32), i32(per_iteration)))

    @contextmanager
    def loop(self, b: ir.IRBuilder, iteration: ir.Value, per_iteration: int, repeats: int) -> Iterator[None]:
        """Phases run in the body of a loop (``body_loops.py``): iteration ``iteration`` of
        ``repeats`` runs the ``per_iteration`` phases numbered from the first iteration's
        plus ``iteration * per_iteration``, the numbers the unrolled body gave them. The
        wait for the phase before the loop belongs before the loop (emitted here only if
        the caller has not); each iteration ends waiting for its last phase, the wait the
        next phase would begin with."""
        self.wait_previous(b)
        first = self.next
        self._iteration = (b, iteration, per_iteration)
        try:
            yield
            self.wait_previous(b)
        finally:
            self._iteration = None
        assert self.next == first + per_iteration, "a loop's iteration ran another number of phases"
        self.next = first + per_iteration * repeats

    def run(
        self,
        b: ir.IRBuilder,
        fn: ir.Value,
        args: list[ir.Value],
        parallel: bool,
        is_main: ir.Value,
        tid: ir.Value,
    ) -> None:
        """Run phase ``fn(args..., part)`` after the previous phase is done: its parts
        claimed by whichever threads come (thread ``tid`` its own first), or part 0 on
        thread 0 for a serial phase."""
        self.wait_previous(b)
        number = self._number()
        done = self._word(number, 1, b)
        if not parallel:
            with b.if_then(is_main):
                b.call(fn, [*args, i32(0)])
                b.store_atomic(i32(1), done, "release", 4)
            self.previous = (number, 1)
            return
        if HOME_PARTS_FIRST:
            self._claim_home_first(b, (number, done), fn, args, tid)
        else:
            self._claim_in_order(b, (number, done), fn, args)
        self.previous = (number, self.parts)

    def _claim_home_first(
        self,
        b: ir.IRBuilder,
        phase: tuple[int | ir.Value, ir.Value],
        fn: ir.Value,
        args: list[ir.Value],
        tid: ir.Value,
    ) -> None:
        """Thread ``tid`` tries every part once, its home parts (``tid * per_thread`` on)
        first, then the next threads' in turn: a part is its thread's whose flag it swaps
        from 0 to 1. ``phase``: the phase's number and its done word."""
        number, done = phase
        home = b.mul(tid, i32(self.per_thread))
        with for_range(b, self.parts, name="claim", vectorize=False) as offset:
            part = b.add(home, b.trunc(offset, I32))
            part = b.select(b.icmp_unsigned("<", part, i32(self.parts)), part, b.sub(part, i32(self.parts)))
            flag = self._word(number, _FLAGS, b, part)
            # a plain read first: the swap (a locked write) only for a part still free
            free = b.icmp_unsigned("==", b.load_atomic(flag, "monotonic", 4, typ=I32), i32(0))
            with b.if_then(free):
                taken = b.atomic_rmw("xchg", flag, i32(1), "monotonic")
                with b.if_then(b.icmp_unsigned("==", taken, i32(0))):
                    b.call(fn, [*args, part])
                    b.atomic_rmw("add", done, i32(1), "release")

    def _claim_in_order(
        self, b: ir.IRBuilder, phase: tuple[int | ir.Value, ir.Value], fn: ir.Value, args: list[ir.Value]
    ) -> None:
        """Parts claimed from one counter, the next free part to whichever thread asks.
        ``phase``: the phase's number and its done word."""
        number, done = phase
        claim, body, after = (
            b.function.append_basic_block(f"{fn.name or 'kernel'}.{n}") for n in ("claim", "run", "after")
        )
        b.branch(claim)
        b.position_at_end(claim)
        part = b.atomic_rmw("add", self._word(number, 0, b), i32(1), "monotonic")
        b.cbranch(b.icmp_unsigned("<", part, i32(self.parts)), body, after)
        b.position_at_end(body)
        b.call(fn, [*args, part])
        b.atomic_rmw("add", done, i32(1), "release")
        b.branch(claim)
        b.position_at_end(after)

    def wait_previous(self, b: ir.IRBuilder) -> None:
        """Wait until every part of the last phase run is done. The counts only grow within
        a call, so a thread that has waited once need not wait for it again: a later wait
        with no phase in between emits nothing."""
        if self.previous is None:
            return
        number, parts = self.previous
        label = f"wait{number}" if isinstance(number, int) else "wait"
        wait_until_equal(b, self._word(number, 1), parts, label)
        self.previous = None

    def _reset(self, phases: int) -> None:
        """``void glow_reset_claims(void)``: zero every counter (workers idle)."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, []), RESET)
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        base = b.inttoptr(b.ptrtoint(self.counters, I64), PTR)
        with for_range(b, max(phases, 1) * self.stride, name="word") as word:
            b.store(i32(0), b.gep(base, [b.mul(word, i64(4))], source_etype=ir.IntType(8)))
        b.ret_void()

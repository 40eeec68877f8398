"""Phases shared by claiming parts, and waits on completion instead of barriers.

A parallel phase is cut into a fixed number of parts (threads times the parts per thread:
``Kernel.split`` by part number), so results never depend on timing. Each thread
*claims* parts from the phase's counter and runs them; a thread that is late (descheduled
by a busy host, still waking) finds them claimed by the others and goes on. Before a
phase, a thread waits until every part of the previous phase is *done* (counted by whoever
ran it) rather than until every thread has *arrived*, so nobody waits for a thread that
has no work left. A serial phase runs on thread 0 and counts itself done.

The counters live in one module global, a cache line per phase; the entry zeroes them
(``RESET``) before it wakes the workers for a call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from glow_cpu.loops import I32, I64, PTR, VOID, for_range, i32, i64
from glow_cpu.spin import wait_until_equal

RESET = "glow_reset_claims"
_WORDS = 16  # i32 per phase: claimed at 0, done at 1, the rest of the cache line empty


class Claims:
    """Emits the claim loops and completion waits of one body."""

    def __init__(self, module: ir.Module, parts: int, phases: int):
        self.module = module
        self.parts = parts  # of every parallel phase (``Kernel.parts``)
        self.counters = ir.GlobalVariable(module, ir.ArrayType(I32, _WORDS * max(phases, 1)), "glow_claims")
        self.counters.linkage = "internal"
        self.counters.initializer = ir.Constant(self.counters.value_type, None)
        self.counters.align = 64
        self.next = 0  # the number the next phase gets (in a loop: in its first iteration)
        self.previous: tuple[int | ir.Value, int] | None = None  # (number, parts) of the last phase
        self._iteration: tuple[ir.IRBuilder, ir.Value, int] | None = None  # see ``loop``
        self._reset(phases)

    def _word(self, phase: int | ir.Value, word: int) -> ir.Value:
        if isinstance(phase, int):
            return self.counters.gep([i32(0), i32(phase * _WORDS + word)])
        b = self._iteration[0] if self._iteration else None
        assert b is not None, "a computed phase number outside a loop"
        index = b.add(b.mul(phase, i32(_WORDS)), i32(word))
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

    def run(self, b: ir.IRBuilder, fn: ir.Value, args: list[ir.Value], parallel: bool, is_main: ir.Value):
        """Run phase ``fn(args..., part)`` after the previous phase is done: its parts
        claimed by whichever threads come, or part 0 on thread 0 for a serial phase."""
        self.wait_previous(b)
        number = self._number()
        done = self._word(number, 1)
        if not parallel:
            with b.if_then(is_main):
                b.call(fn, [*args, i32(0)])
                b.store_atomic(i32(1), done, "release", 4)
            self.previous = (number, 1)
            return
        claim, body, after = (
            b.function.append_basic_block(f"{fn.name or 'kernel'}.{n}") for n in ("claim", "run", "after")
        )
        b.branch(claim)
        b.position_at_end(claim)
        part = b.atomic_rmw("add", self._word(number, 0), i32(1), "monotonic")
        b.cbranch(b.icmp_unsigned("<", part, i32(self.parts)), body, after)
        b.position_at_end(body)
        b.call(fn, [*args, part])
        b.atomic_rmw("add", done, i32(1), "release")
        b.branch(claim)
        b.position_at_end(after)
        self.previous = (number, self.parts)

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
        with for_range(b, max(phases, 1), name="phase") as p:
            for word in (0, 1):
                offset = b.add(b.mul(p, i64(_WORDS * 4)), i64(word * 4))
                b.store(i32(0), b.gep(base, [offset], source_etype=ir.IntType(8)))
        b.ret_void()

"""Waiting in generated code: spin on a shared word, then also yield the CPU.

The machine may be shared (or have fewer cores than threads), so a waiting thread pauses
for about 10 us and then yields on every further check instead of burning a core another
thread needs.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from glow_cpu.emit import intrinsic
from glow_cpu.loops import I32, VOID, i32

SPINS_BEFORE_YIELD = 200
"""Pause instructions (~50 ns each) before each check also yields the CPU."""


def wait_until_equal(b: ir.IRBuilder, word: ir.Value, expected: int | ir.Value, name: str) -> None:
    """Emit: loop until the i32 at ``word`` equals ``expected``."""
    expected = i32(expected) if isinstance(expected, int) else expected
    wait_until(b, word, lambda value: b.icmp_unsigned("==", value, expected), name)


def wait_until(b: ir.IRBuilder, word: ir.Value, done: Callable[[ir.Value], ir.Value], name: str) -> None:
    """Emit: loop until ``done(value)`` holds for the i32 at ``word`` (read with acquire);
    the builder is left after the loop."""
    pause = intrinsic(b.module, "llvm.x86.sse2.pause", VOID, [])
    sched_yield = intrinsic(b.module, "sched_yield", I32, [])
    start = b.block
    check, spin, ready = (
        b.function.append_basic_block(f"{name}.{part}") for part in ("check", "spin", "ready")
    )
    b.branch(check)
    b.position_at_end(check)
    spins = b.phi(I32)
    spins.add_incoming(i32(0), start)
    b.cbranch(done(b.load_atomic(word, "acquire", 4, typ=I32)), ready, spin)
    b.position_at_end(spin)
    b.call(pause, [])
    with b.if_then(b.icmp_unsigned(">", spins, i32(SPINS_BEFORE_YIELD))):
        b.call(sched_yield, [])
    spins.add_incoming(b.add(spins, i32(1)), b.block)
    b.branch(check)
    b.position_at_end(ready)

"""How the threads claim the parts of a parallel phase (``claims.py``).

Each thread tries its own parts first (thread ``t`` of ``threads``, ``parts_per_thread``
each: parts ``t * parts_per_thread`` on), then the next threads' in turn, and every part
runs exactly once whoever comes. These tests run the claim loop the body emits on the
calling thread alone, as thread ``t``, with a phase that records the order in which it was
handed its parts: what one thread does when the others are late, and the order it asks in.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from glow_cpu import claims
from glow_cpu.claims import RESET, Claims
from glow_cpu.jit import llvm_in_use
from llvmlite import binding as llvm
from llvmlite import ir

I32 = ir.IntType(32)
PTR = ir.PointerType()
VOID = ir.VoidType()


def _claim_program(threads: int, parts: int):
    """``drive(order, tid)``: one phase of ``parts`` parts claimed as thread ``tid``; the
    phase stores a ticket (how many parts ran before it) at ``order[part]`` and counts at
    ``order[parts]``. ``reset()``: the entry's reset of the claims before a call."""
    module = ir.Module("claims_test")
    module.triple = llvm.get_process_triple()
    phase = ir.Function(module, ir.FunctionType(VOID, [PTR, I32]), "phase")
    b = ir.IRBuilder(phase.append_basic_block())
    order, part = phase.args
    slots = ir.ArrayType(I32, parts + 1)
    counter = b.gep(order, [I32(0), I32(parts)], source_etype=slots)
    ticket = b.atomic_rmw("add", counter, I32(1), "monotonic")
    b.store(ticket, b.gep(order, [I32(0), part], source_etype=slots))
    b.ret_void()

    chosen = Claims(module, parts, phases=1, threads=threads)
    drive = ir.Function(module, ir.FunctionType(VOID, [PTR, I32]), "drive")
    b = ir.IRBuilder(drive.append_basic_block())
    order, tid = drive.args
    chosen.run(b, phase, [order], True, b.icmp_unsigned("==", tid, I32(0)), tid)
    chosen.wait_previous(b)
    b.ret_void()

    reset = ir.Function(module, ir.FunctionType(VOID, []), "reset")
    b = ir.IRBuilder(reset.append_basic_block())
    b.call(module.globals[RESET], [])
    b.ret_void()
    return str(module)


@pytest.fixture(scope="module")
def engine_for():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    engines = []

    def build(threads: int, parts: int):
        with llvm_in_use():
            module = llvm.parse_assembly(_claim_program(threads, parts))
            module.verify()
            machine = llvm.Target.from_default_triple().create_target_machine()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
        engines.append(engine)
        drive = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(engine.get_function_address("drive"))
        reset = ctypes.CFUNCTYPE(None)(engine.get_function_address("reset"))
        return drive, reset

    yield build
    engines.clear()


def _claimed_order(drive, parts: int, tid: int) -> list[int]:
    """The parts thread ``tid`` ran, in the order it ran them."""
    order = np.full(parts + 1, -1, dtype=np.int32)
    order[parts] = 0
    drive(order.ctypes.data, tid)
    assert order[parts] == parts, "a part ran twice, or not at all"
    return [int(p) for p in np.argsort(order[:parts])]


@pytest.mark.parametrize(
    ("threads", "per_thread", "tid", "expected"),
    [
        (2, 1, 0, [0, 1]),
        (2, 1, 1, [1, 0]),
        (2, 2, 1, [2, 3, 0, 1]),
        (3, 2, 2, [4, 5, 0, 1, 2, 3]),
        (3, 2, 1, [2, 3, 4, 5, 0, 1]),
        (4, 1, 3, [3, 0, 1, 2]),
    ],
)
def test_a_thread_claims_its_own_parts_first_then_the_others(engine_for, threads, per_thread, tid, expected):
    """A thread alone (the others late) runs every part once: its own, then the next
    threads' in turn."""
    parts = threads * per_thread
    drive, reset = engine_for(threads, parts)
    reset()
    assert _claimed_order(drive, parts, tid) == expected


def test_claimed_parts_are_not_run_again_until_the_reset(engine_for):
    """A second thread arriving after the first took every part runs none; after the
    entry's reset (the next call) the parts are free again."""
    drive, reset = engine_for(2, 4)
    reset()
    first = np.full(5, -1, dtype=np.int32)
    first[4] = 0
    drive(first.ctypes.data, 0)
    late = np.full(5, -1, dtype=np.int32)
    late[4] = 0
    drive(late.ctypes.data, 1)  # the phase is done: its wait passes at once
    assert late[4] == 0 and (late[:4] == -1).all()
    reset()
    assert _claimed_order(drive, 4, 1) == [2, 3, 0, 1]


def test_claims_in_order_when_home_parts_are_off(engine_for, monkeypatch):
    """The counter the benches compare against: the next free part to whoever asks."""
    monkeypatch.setattr(claims, "HOME_PARTS_FIRST", False)
    drive, reset = engine_for(2, 4)
    reset()
    assert _claimed_order(drive, 4, 1) == [0, 1, 2, 3]

"""The entry point's worker threads: started on the first call, kept between inferences.

``glow_entry`` runs the function's body on the calling thread as thread 0 and on
``threads - 1`` workers. Starting and joining POSIX threads on every call cost tens of
microseconds, and a fresh thread often waits for a core that has gone idle; so the workers
live on. Each waits for the next *generation*: it spins on the counter for a while (a model
run in a loop calls again within microseconds), then sleeps on a condition variable. The
entry publishes the arenas, bumps the generation under the mutex (a worker going to sleep
checks it under the same mutex: no lost wake-up), wakes sleepers, runs its share, and waits
until every worker has counted itself finished. A worker that could not be started
(``pthread_create`` failed) is simply not counted: the others claim its parts
(``claims.py``).

``glow_shutdown`` stops and joins the workers; the runtime calls it before the code is
unloaded (a worker must never run in unmapped code). A forked child finds the workers'
owner pid differs from its own and starts its own workers.

The mutex and condition variable are zero-filled globals: glibc's and musl's static
initializers are all zeros; 64 bytes covers both on x86-64 and AArch64. They are zeroed
again whenever workers are started (none exists then), so a child forked while a worker
held the mutex does not inherit it locked.
"""

from __future__ import annotations

from llvmlite import ir

from glow_cpu.claims import RESET
from glow_cpu.emit import intrinsic, mark_function
from glow_cpu.loops import I32, I64, PTR, VOID, for_range, i32, i64
from glow_cpu.spin import wait_until_equal

SHUTDOWN = "glow_shutdown"
IDLE_SPIN_CYCLES = 1 << 20
"""Cycle-counter ticks a worker spins for the next call before it sleeps (~0.3 ms)."""


class _Pool:
    """The module globals and library functions the entry, workers and shutdown share."""

    def __init__(self, module: ir.Module, threads: int):
        self.module = module
        self.threads = threads

        def word(name: str, typ: ir.Type = I32) -> ir.GlobalVariable:
            var = ir.GlobalVariable(module, typ, name)
            var.linkage = "internal"
            var.initializer = ir.Constant(typ, None)
            var.align = 64  # its own cache line: workers poll some of these
            return var

        self.generation = word("glow_pool_generation")
        self.finished = word("glow_pool_finished")
        self.stop = word("glow_pool_stop")
        self.sleepers = word("glow_pool_sleepers")
        self.owner = word("glow_pool_owner")  # pid that started the workers; 0: none
        self.workers = word("glow_pool_workers")  # how many started
        self.args = word("glow_pool_args", ir.ArrayType(I64, 3))
        self.handles = word("glow_pool_handles", ir.ArrayType(I64, threads))
        self.mutex = word("glow_pool_mutex", ir.ArrayType(I64, 8))
        self.cond = word("glow_pool_cond", ir.ArrayType(I64, 8))

        self.pthread_create = intrinsic(module, "pthread_create", I32, [PTR, PTR, PTR, PTR])
        self.pthread_join = intrinsic(module, "pthread_join", I32, [I64, PTR])
        self.lock = intrinsic(module, "pthread_mutex_lock", I32, [PTR])
        self.unlock = intrinsic(module, "pthread_mutex_unlock", I32, [PTR])
        self.wait = intrinsic(module, "pthread_cond_wait", I32, [PTR, PTR])
        self.broadcast = intrinsic(module, "pthread_cond_broadcast", I32, [PTR])
        self.getpid = intrinsic(module, "getpid", I32, [])
        self.pause = intrinsic(module, "llvm.x86.sse2.pause", VOID, [])
        self.cycles = intrinsic(module, "llvm.readcyclecounter", I64, [])

    def ptr(self, b: ir.IRBuilder, var: ir.GlobalVariable, index: int | ir.Value = 0) -> ir.Value:
        """An opaque pointer to element ``index`` of an array global (0: the global), as
        library calls and plain loads and stores take it."""
        base = b.inttoptr(b.ptrtoint(var, I64), PTR)
        if isinstance(index, int) and index == 0:
            return base
        offset = i64(index * 8) if isinstance(index, int) else b.mul(index, i64(8))
        return b.gep(base, [offset], source_etype=ir.IntType(8))

    def load(self, b: ir.IRBuilder, var: ir.GlobalVariable, order: str = "acquire") -> ir.Value:
        # llvmlite's atomics want the global's own (typed) pointer.
        return b.load_atomic(var, order, 4, typ=I32)

    def store(
        self, b: ir.IRBuilder, var: ir.GlobalVariable, value: int | ir.Value, order: str = "release"
    ) -> None:
        b.store_atomic(i32(value) if isinstance(value, int) else value, var, order, 4)

    def add(self, b: ir.IRBuilder, var: ir.GlobalVariable, delta: int, order: str) -> None:
        b.atomic_rmw("add", var, i32(delta), order)


def emit_pooled_entry(module: ir.Module, entry: ir.Function, body: ir.Function, threads: int) -> None:
    """Fill ``entry`` (constants, placeholders, activations) with the pooled dispatch of
    ``body(regions..., tid)``, and add the workers and ``glow_shutdown``."""
    pool = _Pool(module, threads)
    worker = _worker(pool, body)
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    pid = b.call(pool.getpid, [])
    with b.if_then(b.icmp_signed("!=", pool.load(b, pool.owner), pid), likely=False):
        for var in (pool.generation, pool.finished, pool.stop, pool.sleepers, pool.workers):
            pool.store(b, var, 0, "monotonic")
        # No worker exists here (first call, after shutdown, or in a forked child, where a
        # parent's worker may have held the mutex at the fork): back to the initializers.
        for var in (pool.mutex, pool.cond):
            for word in range(8):
                b.store(i64(0), pool.ptr(b, var, word))
        with for_range(b, threads, 1, name="start") as t:
            handle = pool.ptr(b, pool.handles, t)
            failed = b.call(pool.pthread_create, [handle, ir.Constant(PTR, None), worker, b.inttoptr(t, PTR)])
            with b.if_else(b.icmp_signed("==", failed, i32(0))) as (started, not_started):
                with started:
                    pool.add(b, pool.workers, 1, "monotonic")
                with not_started:
                    b.store(i64(0), handle)  # the handle is undefined after a failure
        pool.store(b, pool.owner, pid)
    reset = module.globals.get(RESET)
    if reset is not None:  # the body's claim counters (workers are idle now)
        b.call(reset, [])
    for slot, region in enumerate(entry.args):
        b.store(b.ptrtoint(region, I64), pool.ptr(b, pool.args, slot))
    pool.store(b, pool.finished, 0, "monotonic")
    b.call(pool.lock, [pool.ptr(b, pool.mutex)])
    pool.add(b, pool.generation, 1, "release")
    with b.if_then(b.icmp_signed(">", pool.load(b, pool.sleepers, "monotonic"), i32(0))):
        b.call(pool.broadcast, [pool.ptr(b, pool.cond)])
    b.call(pool.unlock, [pool.ptr(b, pool.mutex)])
    b.call(body, [*entry.args, i32(0)])
    # A worker that could not be started never counts; its parts are claimed by the others.
    wait_until_equal(b, pool.finished, pool.load(b, pool.workers, "monotonic"), "workers")
    b.ret_void()
    _shutdown(pool)


def _worker(pool: _Pool, body: ir.Function) -> ir.Function:
    """``void* glow_pool_worker(void* tid)``: wait for a generation, run the body as thread
    ``tid``, count itself finished; until stopped."""
    worker = ir.Function(pool.module, ir.FunctionType(PTR, [PTR]), "glow_pool_worker")
    worker.linkage = "internal"
    mark_function(worker)
    blocks = ["entry", "loop", "spin", "idle", "sleep", "recheck", "doze", "woken", "check", "run", "exit"]
    bb = {name: worker.append_basic_block(name) for name in blocks}
    b = ir.IRBuilder(bb["entry"])
    tid = b.trunc(b.ptrtoint(worker.args[0], I64), I32)
    b.branch(bb["loop"])

    b.position_at_end(bb["loop"])  # seen: the generation this worker ran last
    seen = b.phi(I32)
    seen.add_incoming(i32(0), bb["entry"])
    since = b.call(pool.cycles, [])
    b.branch(bb["spin"])

    b.position_at_end(bb["spin"])
    changed = b.icmp_unsigned("!=", pool.load(b, pool.generation), seen)
    stopped = b.icmp_unsigned("!=", pool.load(b, pool.stop), i32(0))
    b.cbranch(b.or_(changed, stopped), bb["check"], bb["idle"])

    b.position_at_end(bb["idle"])
    b.call(pool.pause, [])
    waited = b.sub(b.call(pool.cycles, []), since)
    b.cbranch(b.icmp_unsigned("<", waited, i64(IDLE_SPIN_CYCLES)), bb["spin"], bb["sleep"])

    b.position_at_end(bb["sleep"])
    b.call(pool.lock, [pool.ptr(b, pool.mutex)])
    b.branch(bb["recheck"])

    b.position_at_end(bb["recheck"])  # under the mutex the entry bumps the generation with
    same = b.icmp_unsigned("==", pool.load(b, pool.generation, "monotonic"), seen)
    running = b.icmp_unsigned("==", pool.load(b, pool.stop, "monotonic"), i32(0))
    b.cbranch(b.and_(same, running), bb["doze"], bb["woken"])

    b.position_at_end(bb["doze"])
    pool.add(b, pool.sleepers, 1, "monotonic")
    b.call(pool.wait, [pool.ptr(b, pool.cond), pool.ptr(b, pool.mutex)])
    pool.add(b, pool.sleepers, -1, "monotonic")
    b.branch(bb["recheck"])

    b.position_at_end(bb["woken"])
    b.call(pool.unlock, [pool.ptr(b, pool.mutex)])
    b.branch(bb["check"])

    b.position_at_end(bb["check"])
    b.cbranch(b.icmp_unsigned("!=", pool.load(b, pool.stop), i32(0)), bb["exit"], bb["run"])

    b.position_at_end(bb["run"])
    generation = pool.load(b, pool.generation)
    regions = [b.inttoptr(b.load(pool.ptr(b, pool.args, slot), typ=I64), PTR) for slot in range(3)]
    b.call(body, [*regions, tid])
    pool.add(b, pool.finished, 1, "release")
    seen.add_incoming(generation, bb["run"])
    b.branch(bb["loop"])

    b.position_at_end(bb["exit"])
    b.ret(ir.Constant(PTR, None))
    return worker


def _shutdown(pool: _Pool) -> None:
    """``void glow_shutdown(void)``: stop and join this process's workers (if it has any)."""
    fn = ir.Function(pool.module, ir.FunctionType(VOID, []), SHUTDOWN)
    mark_function(fn)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ours = b.icmp_signed("==", pool.load(b, pool.owner), b.call(pool.getpid, []))
    with b.if_then(ours):
        b.call(pool.lock, [pool.ptr(b, pool.mutex)])
        pool.store(b, pool.stop, 1)
        b.call(pool.broadcast, [pool.ptr(b, pool.cond)])
        b.call(pool.unlock, [pool.ptr(b, pool.mutex)])
        with for_range(b, pool.threads, 1, name="join") as t:
            handle = b.load(pool.ptr(b, pool.handles, t), typ=I64)
            with b.if_then(b.icmp_unsigned("!=", handle, i64(0))):  # 0: never started
                b.call(pool.pthread_join, [handle, ir.Constant(PTR, None)])
        pool.store(b, pool.owner, 0)
    b.ret_void()

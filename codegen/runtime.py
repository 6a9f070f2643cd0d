"""Kiln's fork-join thread pool: LLVM IR built here, JIT-compiled once per process.

Why not libgomp: at the end of a parallel region libgomp's caller waits at a barrier for
every thread of the team, including one that has not started yet. On a 2-core machine where
another process holds a core, the late worker waits for a time slice (milliseconds), so a
2-thread kernel ran 10-50x slower than on one thread. Here the iteration range is split into
chunks that threads claim one at a time, and the caller claims chunks too: it waits only for
chunks that a running thread has already taken, never for a thread that has not woken up (a
late worker finds the job finished and goes back to sleep).

Protocol (all atomics sequentially consistent). One job at a time is posted in globals:
`state` packs generation (bits 32-63), the number of workers allowed to join (24-31) and the
chunks not yet claimed (0-23). Claiming a chunk is a compare-exchange of `state` that also
checks the generation, so a worker that wakes late can never claim a chunk of a newer job
with an older job's view. A job's parameters are read only after a successful claim, which
the caller cannot outlive: it returns when `done` reaches the chunk count. Idle workers spin
for a while (back-to-back kernels of a model start fast) and then sleep on a futex. A worker
that finds itself on the CPU the caller posted its last job from moves off it: it narrows its
own affinity to the CPUs the process may use but that one (or, if there is no other, sleeps).
Why: after a pause between calls (a server between requests) the other CPU of a VM is halted,
the scheduler counts a halted vCPU as busy and wakes the worker on the caller's CPU; there the
two share one core for tens of calls before the load balancer parts them, and a 2-thread
ResNet-18 int8 ran 9-11 ms instead of 5 (slower than 1 thread; 2026-11-26 17:30 UTC). A second
caller while a job runs (another Python thread), or a kernel called from inside a job, runs
its loop serially. After fork() the child sees a pool that is not its own (pid check) and
starts a fresh one.

Kernels reach the pool through a per-kernel global function pointer that the loader fills
in (codegen.kernel), so every kernel of the process - JIT-compiled or loaded from a shared
library - shares one pool.
"""
from __future__ import annotations

import ctypes.util
import logging
import platform
import threading
from functools import cache

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ..te.errors import CodegenError
from . import llvm_types as T
from .cache_store import make_key, open_generic_store, open_store
from .runtime_config import parallel_runtime_setting

log = logging.getLogger(__name__)

ENTRY = "kiln_rt_parallel_for"
# Chunking: a loop of at least HEAD_MIN_PER_THREAD iterations per thread gives 3/4 of its
# iterations as one big chunk per thread (claimed first: on a quiet machine each thread takes
# one, as a static schedule would) and splits the last quarter into TAIL_CHUNKS_PER_THREAD
# small chunks per thread that balance the finish (a thread that started late, or runs on a
# shared core, takes fewer). Shorter loops get equal chunks, at most that many per thread.
HEAD_MIN_PER_THREAD = 8
TAIL_CHUNKS_PER_THREAD = 4
# One x86 `pause` takes ~26 ns on these Zen 3 cores (measured), so an idle worker spins
# ~200 us before it sleeps (a model's next kernel usually comes sooner), and a caller waiting
# for a chunk another thread holds spins ~25 us before it yields its core to that thread.
# A spinning worker checks every CPU_CHECK_SPINS pauses whether it shares the caller's CPU.
WORKER_SPINS = 1 << 13
CALLER_SPINS = 1 << 10
CPU_CHECK_SPINS = 1 << 6
CPU_SET_WORDS = 16             # cpu_set_t: 1024 bits
MAX_WORKERS = 255              # fits the state word's 8-bit worker field
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}

I64, I32 = ir.IntType(64), ir.IntType(32)
SEQ = "seq_cst"
BODY_TYPE = ir.FunctionType(ir.VoidType(), [T.PTR, I32, I32])   # body(closure, begin, end)
ENTRY_TYPE = ir.FunctionType(ir.VoidType(), [T.PTR, T.PTR, I32, I32])


@cache
def gomp_available() -> bool:
    """Load libgomp into the process once; False (with one warning) when it is missing."""
    name = ctypes.util.find_library("gomp")
    if name is None:
        log.warning("libgomp not found: PARALLEL loops will run serially. Install libgomp1 "
                    "(apt-get install libgomp1) for multi-threaded kernels.")
        return False
    try:
        llvm.load_library_permanently(name)
    except RuntimeError as exc:
        log.warning("cannot load %s (%s): PARALLEL loops will run serially", name, exc)
        return False
    return True


def backend() -> str:
    """How PARALLEL loops run: 'kiln' (this pool), 'gomp' (libgomp) or 'serial'.
    KILN_PARALLEL_RUNTIME overrides the default ('kiln' where the futex call is known)."""
    raw = parallel_runtime_setting()
    if raw and raw not in ("kiln", "gomp", "serial"):
        raise CodegenError(f"KILN_PARALLEL_RUNTIME={raw!r} is not one of kiln, gomp, serial")
    if raw == "serial":
        return "serial"
    if raw == "gomp" or _futex_number() is None:
        return "gomp" if gomp_available() else "serial"
    return "kiln"


def _futex_number() -> int | None:
    if platform.system() != "Linux":
        return None
    return SYS_FUTEX.get(platform.machine().lower())


def link_flags() -> list[str]:
    """Libraries a shared library of kernels built now must link."""
    return ["-lgomp", "-lm"] if backend() == "gomp" else ["-lm"]


class _Pool:
    """The globals of the pool, declared in `module`."""

    def __init__(self, module: ir.Module, shutdown: bool = False):
        def var(name, ty, init):
            gv = ir.GlobalVariable(module, ty, f"kiln_rt_{name}")
            gv.initializer = ir.Constant(ty, init)
            gv.linkage = "internal"
            gv.align = 64          # one cache line each: no false sharing between them
            return gv

        self.state = var("state", I64, 0)
        self.done = var("done", I32, 0)
        self.futex = var("futex", I32, 0)
        self.sleepers = var("sleepers", I32, 0)
        self.busy = var("busy", I32, 0)
        self.workers = var("workers", I32, 0)
        self.pid = var("pid", I32, 0)
        self.caller_cpu = var("caller_cpu", I32, -1)   # the CPU the last job was posted from
        self.fn = var("fn", T.PTR, None)
        self.data = var("data", T.PTR, None)
        self.extent = var("extent", I32, 0)
        self.chunks = var("chunks", I32, 0)
        self.bigs = var("bigs", I32, 0)          # big chunks at the head (0: equal chunks)
        self.head = var("head", I32, 0)          # iterations in the big chunks
        self.forks = var("forks", I64, 0)        # jobs posted to workers (FORKS reads it)
        if shutdown:       # (only then: the JIT's pool module stays as it was)
            self.quit = var("quit", I32, 0)      # workers exit at the next generation
            self.exited = var("exited", I32, 0)  # workers that have exited since


SHUTDOWN = "kiln_rt_shutdown"
FORKS = "kiln_rt_fork_count"
PREWAKE = "kiln_rt_prewake"


def build_runtime_module(triple: str, futex: int, shutdown: bool = False) -> ir.Module:
    """The pool as an LLVM module exporting ENTRY(body, closure, extent, threads).
    shutdown: also export SHUTDOWN() -> i32 (0, or 1 while a job runs), which makes every
    worker exit and waits for them (the C library export's `<prefix>_shutdown`; a process
    that JIT-loads kernels keeps its pool for its lifetime)."""
    module = ir.Module(name="kiln_runtime")
    module.triple = triple
    pool = _Pool(module, shutdown)
    x86 = triple.startswith(("x86_64", "i686", "i386"))

    def extern(name, ret, args, var_arg=False):
        return ir.Function(module, ir.FunctionType(ret, args, var_arg=var_arg), name)

    ext = {
        "syscall": extern("syscall", I64, [I64], var_arg=True),
        "getpid": extern("getpid", I32, []),
        "sched_yield": extern("sched_yield", I32, []),
        "sched_getcpu": extern("sched_getcpu", I32, []),
        "sched_getaffinity": extern("sched_getaffinity", I32, [I32, I64, T.PTR]),
        "sched_setaffinity": extern("sched_setaffinity", I32, [I32, I64, T.PTR]),
        "pthread_create": extern("pthread_create", I32, [T.PTR, T.PTR, T.PTR, T.PTR]),
        "pthread_detach": extern("pthread_detach", I32, [I64]),
        "pause": extern("llvm.x86.sse2.pause", ir.VoidType(), []) if x86 else None,
    }
    run_chunks = _emit_run_chunks(module, pool)
    move_off = _emit_move_off(module, ext)
    worker = _emit_worker(module, pool, run_chunks, move_off, ext, futex, shutdown)
    _emit_entry(module, pool, run_chunks, worker, ext, futex)
    _emit_fork_count(module, pool)
    _emit_prewake(module, pool, ext, futex)
    if shutdown:
        _emit_shutdown(module, pool, ext, futex)
    return module


def _pause(b: ir.IRBuilder, ext) -> None:
    if ext["pause"] is not None:
        b.call(ext["pause"], [])


def call_indirect(b: ir.IRBuilder, pointer: ir.Value, fnty: ir.FunctionType, args) -> None:
    """Call the function at opaque `pointer` (llvmlite needs a typed pointer to call through)."""
    slot = b.alloca(T.PTR)
    b.store(pointer, slot)
    b.call(b.load(slot, typ=fnty.as_pointer()), args)


def _gen_of(b: ir.IRBuilder, state: ir.Value) -> ir.Value:
    return b.trunc(b.lshr(state, ir.Constant(I64, 32)), I32)


def _emit_run_chunks(module: ir.Module, pool: _Pool) -> ir.Function:
    """run_chunks(gen): claim and run chunks of job `gen` until none is left."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I32]), "kiln_rt_run_chunks")
    fn.linkage = "internal"
    gen = fn.args[0]
    entry, loop, check, claim, run, out = (fn.append_basic_block(n) for n in
                                           ("entry", "loop", "check", "claim", "run", "out"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    s = b.load_atomic(pool.state, SEQ, 8, typ=I64)
    b.cbranch(b.icmp_unsigned("==", _gen_of(b, s), gen), check, out)
    b.position_at_end(check)
    remaining = b.trunc(b.and_(s, ir.Constant(I64, 0xFFFFFF)), I32)
    b.cbranch(b.icmp_unsigned("==", remaining, ir.Constant(I32, 0)), out, claim)
    b.position_at_end(claim)
    pair = b.cmpxchg(pool.state, s, b.sub(s, ir.Constant(I64, 1)), SEQ, SEQ)
    b.cbranch(b.extract_value(pair, 1), run, loop)
    b.position_at_end(run)
    chunks = b.load(pool.chunks, typ=I32)
    begin, end = _chunk_bounds(b, pool, b.sub(chunks, remaining), chunks)
    body = b.load(pool.fn, typ=BODY_TYPE.as_pointer())
    b.call(body, [b.load(pool.data, typ=T.PTR), begin, end])
    b.atomic_rmw("add", pool.done, ir.Constant(I32, 1), SEQ)
    b.branch(loop)
    b.position_at_end(out)
    b.ret_void()
    return fn


def _chunk_bounds(b: ir.IRBuilder, pool: _Pool, index: ir.Value, chunks: ir.Value):
    """[begin, end) of chunk `index`: big chunks share the head's iterations evenly, the
    others the tail's (see HEAD_MIN_PER_THREAD)."""
    one = ir.Constant(I64, 1)
    index, chunks = b.sext(index, I64), b.sext(chunks, I64)
    extent = b.sext(b.load(pool.extent, typ=I32), I64)
    bigs = b.sext(b.load(pool.bigs, typ=I32), I64)
    head = b.sext(b.load(pool.head, typ=I32), I64)
    in_head = b.icmp_signed("<", index, bigs)
    safe_bigs = b.select(b.icmp_signed("<", bigs, one), one, bigs)
    head_begin = b.sdiv(b.mul(index, head), safe_bigs)
    head_end = b.sdiv(b.mul(b.add(index, one), head), safe_bigs)
    j, smalls, tail = b.sub(index, bigs), b.sub(chunks, bigs), b.sub(extent, head)
    safe_smalls = b.select(b.icmp_signed("<", smalls, one), one, smalls)
    tail_begin = b.add(head, b.sdiv(b.mul(j, tail), safe_smalls))
    tail_end = b.add(head, b.sdiv(b.mul(b.add(j, one), tail), safe_smalls))
    return (b.trunc(b.select(in_head, head_begin, tail_begin), I32),
            b.trunc(b.select(in_head, head_end, tail_end), I32))


def _emit_move_off(module: ir.Module, ext) -> ir.Function:
    """move_off(cpu, allowed): restrict the calling thread to the CPUs of `allowed` (a
    cpu_set_t) but `cpu`; false when that leaves none or the kernel refuses."""
    fn = ir.Function(module, ir.FunctionType(ir.IntType(1), [I32, T.PTR]), "kiln_rt_move_off")
    fn.linkage = "internal"
    cpu, allowed = fn.args
    entry, clear, call, fail = (fn.append_basic_block(n)
                                for n in ("entry", "clear", "call", "fail"))
    b = ir.IRBuilder(entry)
    mask = _cpu_set(b)
    for k in range(CPU_SET_WORDS):
        b.store(b.load(_word(b, allowed, k), typ=I64), _word(b, mask, k))
    in_range = b.and_(b.icmp_signed(">=", cpu, ir.Constant(I32, 0)),
                      b.icmp_signed("<", cpu, ir.Constant(I32, 64 * CPU_SET_WORDS)))
    b.cbranch(in_range, clear, fail)
    b.position_at_end(clear)
    slot = _word(b, mask, b.lshr(cpu, ir.Constant(I32, 6)))
    bit = b.shl(ir.Constant(I64, 1), b.zext(b.and_(cpu, ir.Constant(I32, 63)), I64))
    b.store(b.and_(b.load(slot, typ=I64), b.not_(bit)), slot)
    left = ir.Constant(I64, 0)
    for k in range(CPU_SET_WORDS):
        left = b.or_(left, b.load(_word(b, mask, k), typ=I64))
    b.cbranch(b.icmp_unsigned("!=", left, ir.Constant(I64, 0)), call, fail)
    b.position_at_end(call)
    rc = b.call(ext["sched_setaffinity"], [ir.Constant(I32, 0),
                                           ir.Constant(I64, 8 * CPU_SET_WORDS), mask])
    b.ret(b.icmp_signed("==", rc, ir.Constant(I32, 0)))
    b.position_at_end(fail)
    b.ret(ir.Constant(ir.IntType(1), 0))
    return fn


def _cpu_set(b: ir.IRBuilder) -> ir.Value:
    """A zeroed cpu_set_t on the stack, as an opaque pointer."""
    words = b.alloca(ir.ArrayType(I64, CPU_SET_WORDS))
    words.align = 8
    words.type = T.PTR        # llvmlite types alloca results; the runtime uses opaque pointers
    for k in range(CPU_SET_WORDS):
        b.store(ir.Constant(I64, 0), _word(b, words, k))
    return words


def _word(b: ir.IRBuilder, cpu_set: ir.Value, k) -> ir.Value:
    index = k if isinstance(k, ir.Value) else ir.Constant(I32, k)
    return b.gep(cpu_set, [index], source_etype=I64)


def _emit_worker(module, pool: _Pool, run_chunks, move_off, ext, futex: int,
                 shutdown: bool = False) -> ir.Function:
    """worker(index): wait for a new generation (spin, then futex sleep); join it when the
    job admits this many workers; forever (with `shutdown`: until a generation comes with
    the quit flag set). Moves off the caller's CPU when it finds itself there (see the
    module docstring)."""
    fn = ir.Function(module, ir.FunctionType(T.PTR, [T.PTR]), "kiln_rt_worker")
    fn.linkage = "internal"
    entry, outer, wait, spin, sleep, wake, got, join = (
        fn.append_basic_block(n) for n in
        ("entry", "outer", "wait", "spin", "sleep", "wake", "got", "join"))
    b = ir.IRBuilder(entry)
    index = b.trunc(b.ptrtoint(fn.args[0], I64), I32)
    allowed = _cpu_set(b)                    # the CPUs it started with
    b.call(ext["sched_getaffinity"], [ir.Constant(I32, 0), ir.Constant(I64, 8 * CPU_SET_WORDS),
                                      allowed])
    first = _gen_of(b, b.load_atomic(pool.state, SEQ, 8, typ=I64))
    leave = None
    if shutdown:     # started after a shutdown posted its generation: `first` is that one
        leave = fn.append_basic_block("leave")
        quit_now = b.load_atomic(pool.quit, SEQ, 4, typ=I32)
        b.cbranch(b.icmp_unsigned("!=", quit_now, ir.Constant(I32, 0)), leave, outer)
        lb = ir.IRBuilder(leave)
        lb.atomic_rmw("add", pool.exited, ir.Constant(I32, 1), SEQ)
        lb.ret(ir.Constant(T.PTR, None))
    else:
        b.branch(outer)

    b.position_at_end(outer)
    seen = b.phi(I32, "seen")
    b.branch(wait)

    b.position_at_end(wait)
    spins = b.phi(I32, "spins")
    s = b.load_atomic(pool.state, SEQ, 8, typ=I64)
    gen = _gen_of(b, s)
    b.cbranch(b.icmp_unsigned("!=", gen, seen), got, spin)

    b.position_at_end(spin)
    more = b.add(spins, ir.Constant(I32, 1))
    _pause(b, ext)
    check = fn.append_basic_block("check_cpu")
    spin_on = b.and_(b.icmp_unsigned("<", more, ir.Constant(I32, WORKER_SPINS)),
                     b.icmp_unsigned("!=", b.and_(more, ir.Constant(I32, CPU_CHECK_SPINS - 1)),
                                     ir.Constant(I32, 0)))
    b.cbranch(spin_on, wait, check)

    b.position_at_end(check)    # on the caller's CPU, spinning only slows the caller
    caller = b.load_atomic(pool.caller_cpu, SEQ, 4, typ=I32)
    shared = b.icmp_signed("==", b.call(ext["sched_getcpu"], []), caller)
    move, check_more = fn.append_basic_block("move"), fn.append_basic_block("check_more")
    b.cbranch(shared, move, check_more)
    b.position_at_end(check_more)
    b.cbranch(b.icmp_unsigned(">=", more, ir.Constant(I32, WORKER_SPINS)), sleep, wait)
    b.position_at_end(move)
    moved = b.call(move_off, [caller, allowed])
    b.cbranch(moved, wait, sleep)

    b.position_at_end(sleep)
    b.atomic_rmw("add", pool.sleepers, ir.Constant(I32, 1), SEQ)
    word = b.load_atomic(pool.futex, SEQ, 4, typ=I32)
    b.cbranch(b.icmp_unsigned("==", word, seen), wake, join)

    b.position_at_end(wake)     # sleeps unless the word moved on since it was read
    b.call(ext["syscall"], [ir.Constant(I64, futex), pool.futex,
                            ir.Constant(I32, FUTEX_WAIT_PRIVATE), seen,
                            ir.Constant(T.PTR, None)])
    b.branch(join)

    b.position_at_end(join)
    b.atomic_rmw("sub", pool.sleepers, ir.Constant(I32, 1), SEQ)
    b.branch(outer)

    b.position_at_end(got)
    if shutdown:
        stay = fn.append_basic_block("stay")
        quit_now = b.load_atomic(pool.quit, SEQ, 4, typ=I32)
        b.cbranch(b.icmp_unsigned("!=", quit_now, ir.Constant(I32, 0)), leave, stay)
        b.position_at_end(stay)
    allowed = b.trunc(b.and_(b.lshr(s, ir.Constant(I64, 24)), ir.Constant(I64, 0xFF)), I32)
    run, skip = fn.append_basic_block("run"), fn.append_basic_block("skip")
    b.cbranch(b.icmp_unsigned("<=", index, allowed), run, skip)
    b.position_at_end(run)
    b.call(run_chunks, [gen])
    b.branch(skip)
    b.position_at_end(skip)
    b.branch(outer)

    seen.add_incoming(first, entry)
    seen.add_incoming(seen, join)
    seen.add_incoming(gen, skip)
    spins.add_incoming(ir.Constant(I32, 0), outer)
    spins.add_incoming(more, spin)
    spins.add_incoming(more, check_more)
    spins.add_incoming(more, move)
    return fn


def _emit_entry(module, pool: _Pool, run_chunks, worker, ext, futex: int) -> None:
    """ENTRY(body, closure, extent, threads): run body over [0, extent) on up to `threads`
    threads (the caller included)."""
    fn = ir.Function(module, ENTRY_TYPE, ENTRY)
    fn.attributes.add("nounwind")
    body, closure, extent, threads = fn.args
    names = ("entry", "serial", "pid", "reset", "lock", "spawn", "create", "created", "post",
             "solo", "wake", "work", "wait", "waited", "yield", "unlock")
    bb = {n: fn.append_basic_block(n) for n in names}
    b = ir.IRBuilder(bb["entry"])
    one, zero = ir.Constant(I32, 1), ir.Constant(I32, 0)
    tiny = b.or_(b.icmp_signed("<=", extent, one), b.icmp_signed("<=", threads, one))
    b.cbranch(tiny, bb["serial"], bb["pid"])

    b.position_at_end(bb["serial"])
    has_work = bb["serial"].function.append_basic_block("serial_run")
    done_bb = bb["serial"].function.append_basic_block("serial_done")
    b.cbranch(b.icmp_signed(">", extent, zero), has_work, done_bb)
    b.position_at_end(has_work)
    call_indirect(b, body, BODY_TYPE, [closure, zero, extent])
    b.branch(done_bb)
    b.position_at_end(done_bb)
    b.ret_void()

    b.position_at_end(bb["pid"])        # a fork()ed child owns none of its parent's threads
    pid = b.call(ext["getpid"], [])
    b.cbranch(b.icmp_signed("!=", pid, b.load(pool.pid, typ=I32)), bb["reset"], bb["lock"])
    b.position_at_end(bb["reset"])
    for gv in (pool.workers, pool.busy, pool.sleepers, pool.done, pool.futex):
        b.store_atomic(zero, gv, SEQ, 4)
    b.store_atomic(ir.Constant(I64, 0), pool.state, SEQ, 8)
    b.store(pid, pool.pid)
    b.branch(bb["lock"])

    b.position_at_end(bb["lock"])       # one job at a time; anyone else runs serially
    pair = b.cmpxchg(pool.busy, zero, one, SEQ, SEQ)
    b.cbranch(b.extract_value(pair, 1), bb["spawn"], bb["serial"])

    b.position_at_end(bb["spawn"])
    want = b.sub(threads, one)
    want = b.select(b.icmp_signed(">", want, ir.Constant(I32, MAX_WORKERS)),
                    ir.Constant(I32, MAX_WORKERS), want)
    have = b.load(pool.workers, typ=I32)
    b.cbranch(b.icmp_signed("<", have, want), bb["create"], bb["post"])

    b.position_at_end(bb["create"])
    tid = b.alloca(I64)
    index = b.add(have, one)
    rc = b.call(ext["pthread_create"], [tid, ir.Constant(T.PTR, None), worker,
                                        b.inttoptr(b.zext(index, I64), T.PTR)])
    b.cbranch(b.icmp_signed("==", rc, zero), bb["created"], bb["post"])
    b.position_at_end(bb["created"])
    b.call(ext["pthread_detach"], [b.load(tid, typ=I64)])
    b.store(index, pool.workers)
    b.branch(bb["spawn"])

    b.position_at_end(bb["post"])
    have = b.load(pool.workers, typ=I32)
    helpers = b.select(b.icmp_signed("<", have, want), have, want)
    b.cbranch(b.icmp_signed("<=", helpers, zero), bb["solo"], bb["wake"])

    b.position_at_end(bb["solo"])       # no worker could be started
    call_indirect(b, body, BODY_TYPE, [closure, zero, extent])
    b.store_atomic(zero, pool.busy, SEQ, 4)
    b.ret_void()

    b.position_at_end(bb["wake"])
    # one more fork: a plain increment, the job lock (`busy`) is held
    b.store(b.add(b.load(pool.forks, typ=I64), ir.Constant(I64, 1)), pool.forks)
    team = b.add(helpers, one)
    smalls = b.mul(team, ir.Constant(I32, TAIL_CHUNKS_PER_THREAD))
    long_loop = b.icmp_signed(">=", extent, b.mul(team, ir.Constant(I32, HEAD_MIN_PER_THREAD)))
    bigs = b.select(long_loop, team, zero)
    head = b.trunc(b.sdiv(b.mul(b.sext(extent, I64), ir.Constant(I64, 3)), ir.Constant(I64, 4)),
                   I32)
    head = b.select(long_loop, head, zero)
    chunks = b.select(long_loop, b.add(team, smalls),
                      b.select(b.icmp_signed("<", extent, smalls), extent, smalls))
    b.store(bigs, pool.bigs)
    b.store(head, pool.head)
    b.store(body, pool.fn)
    b.store(closure, pool.data)
    b.store(extent, pool.extent)
    b.store(chunks, pool.chunks)
    b.store_atomic(b.call(ext["sched_getcpu"], []), pool.caller_cpu, SEQ, 4)
    b.store_atomic(zero, pool.done, SEQ, 4)
    old = b.load_atomic(pool.state, SEQ, 8, typ=I64)
    gen = b.add(_gen_of(b, old), one)
    state = b.or_(b.shl(b.zext(gen, I64), ir.Constant(I64, 32)),
                  b.or_(b.shl(b.zext(helpers, I64), ir.Constant(I64, 24)),
                        b.zext(chunks, I64)))
    b.store_atomic(state, pool.state, SEQ, 8)
    b.store_atomic(gen, pool.futex, SEQ, 4)
    sleeping = b.load_atomic(pool.sleepers, SEQ, 4, typ=I32)
    call_wake = fn.append_basic_block("futex_wake")
    b.cbranch(b.icmp_signed(">", sleeping, zero), call_wake, bb["work"])
    b.position_at_end(call_wake)
    b.call(ext["syscall"], [ir.Constant(I64, futex), pool.futex,
                            ir.Constant(I32, FUTEX_WAKE_PRIVATE), helpers])
    b.branch(bb["work"])

    b.position_at_end(bb["work"])
    b.call(run_chunks, [gen])
    b.branch(bb["wait"])

    b.position_at_end(bb["wait"])       # only for chunks a running thread has taken
    spins = b.phi(I32, "spins")
    finished = b.load_atomic(pool.done, SEQ, 4, typ=I32)
    b.cbranch(b.icmp_signed(">=", finished, chunks), bb["unlock"], bb["waited"])
    b.position_at_end(bb["waited"])
    more = b.add(spins, one)
    _pause(b, ext)
    b.cbranch(b.icmp_unsigned("<", more, ir.Constant(I32, CALLER_SPINS)), bb["wait"],
              bb["yield"])
    b.position_at_end(bb["yield"])      # the claimer was preempted: give it this core
    b.call(ext["sched_yield"], [])
    b.branch(bb["wait"])
    spins.add_incoming(zero, bb["work"])
    spins.add_incoming(more, bb["waited"])
    spins.add_incoming(more, bb["yield"])

    b.position_at_end(bb["unlock"])
    b.store_atomic(zero, pool.busy, SEQ, 4)
    b.ret_void()


def _emit_fork_count(module, pool: _Pool) -> None:
    """FORKS() -> i64: the parallel loops this process has handed to worker threads so far
    (a loop run serially - one iteration, one thread, a busy pool - is not counted). Tests
    and benchmarks read it to count the fork/joins of a call; a counter under the job lock
    costs the caller one increment per fork."""
    fn = ir.Function(module, ir.FunctionType(I64, []), FORKS)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(b.load_atomic(pool.forks, SEQ, 8, typ=I64))


def _emit_prewake(module, pool: _Pool, ext, futex: int) -> None:
    """PREWAKE(): wake the sleeping workers without posting a job; they spin for the next
    one (WORKER_SPINS) and then sleep again. Why: a worker asleep on the futex when a fork
    is posted costs the caller 10-25 us on the rocketlake VM measured (the wake-up, then
    chunks the late worker claims), more than small kernels gain from it. A model calls this
    a few kernels ahead of a fork that follows a long serial stretch
    (graph/runtime/thread_choice.py), so the wake-up overlaps serial work. With nobody
    asleep it is one atomic load."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), PREWAKE)
    fn.attributes.add("nounwind")
    entry, wake, done = (fn.append_basic_block(n) for n in ("entry", "wake", "done"))
    b = ir.IRBuilder(entry)
    sleeping = b.load_atomic(pool.sleepers, SEQ, 4, typ=I32)
    b.cbranch(b.icmp_signed(">", sleeping, ir.Constant(I32, 0)), wake, done)
    b.position_at_end(wake)
    b.call(ext["syscall"], [ir.Constant(I64, futex), pool.futex,
                            ir.Constant(I32, FUTEX_WAKE_PRIVATE), sleeping])
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()


def _emit_shutdown(module, pool: _Pool, ext, futex: int) -> None:
    """SHUTDOWN() -> i32: take the job lock (1 if a job holds it), post a generation with the
    quit flag and no chunks, wake every sleeper, wait until every started worker has exited,
    then reset the pool to none started (the next job would start workers again)."""
    fn = ir.Function(module, ir.FunctionType(I32, []), SHUTDOWN)
    fn.attributes.add("nounwind")
    entry, busy, post, wait, spin, done = (fn.append_basic_block(n) for n in
                                           ("entry", "busy", "post", "wait", "spin", "done"))
    one, zero = ir.Constant(I32, 1), ir.Constant(I32, 0)
    b = ir.IRBuilder(entry)
    pair = b.cmpxchg(pool.busy, zero, one, SEQ, SEQ)
    b.cbranch(b.extract_value(pair, 1), post, busy)
    b.position_at_end(busy)
    b.ret(one)
    b.position_at_end(post)
    b.store_atomic(one, pool.quit, SEQ, 4)
    old = b.load_atomic(pool.state, SEQ, 8, typ=I64)
    gen = b.add(_gen_of(b, old), one)
    b.store_atomic(b.shl(b.zext(gen, I64), ir.Constant(I64, 32)), pool.state, SEQ, 8)
    b.store_atomic(gen, pool.futex, SEQ, 4)
    b.call(ext["syscall"], [ir.Constant(I64, futex), pool.futex,
                            ir.Constant(I32, FUTEX_WAKE_PRIVATE), ir.Constant(I32, 1 << 30)])
    b.branch(wait)
    b.position_at_end(wait)
    started = b.load_atomic(pool.workers, SEQ, 4, typ=I32)
    gone = b.load_atomic(pool.exited, SEQ, 4, typ=I32)
    b.cbranch(b.icmp_signed(">=", gone, started), done, spin)
    b.position_at_end(spin)     # a sleeping worker needs its time slice to leave
    b.call(ext["sched_yield"], [])
    b.branch(wait)
    b.position_at_end(done)
    for gv in (pool.workers, pool.exited, pool.quit, pool.busy):
        b.store_atomic(zero, gv, SEQ, 4)
    b.ret(zero)


_lock = threading.Lock()
_engine = None          # the pool's loaded code (codegen/object_loader.LoadedCode)
_address: int | None = None
_fork_count = None


def _compile_runtime(text: str, target) -> bytes:
    """The pool module's object code (LLVM O2)."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    tm = target.create_target_machine()
    mod.triple, mod.data_layout = target.triple, str(tm.target_data)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)


def runtime_object(target, futex: int) -> bytes:
    """The pool module's object code: from the persistent cache when it has this module
    (compiling it costs ~0.1-0.2 s in every process that runs a parallel kernel), else
    compiled and stored. The key is what the module is made of (its triple and futex
    number; Kiln's sources and LLVM's version are in every key), so a hit neither builds
    nor prints it (~25 ms)."""
    key = make_key("runtime", target=str(target), triple=target.triple, futex=futex)
    # the cache's copy, else the generic library's (per machine: a cold compile on an
    # emptied cache then need not build the pool before its first parallel run)
    stores = [open_store("runtime", "obj"), open_generic_store("runtime", "obj")]
    for store in stores:
        found = store.read(key) if store is not None else None
        if found is not None:
            mm, start = found
            code = mm[start:]
            mm.close()
            return code
    code = _compile_runtime(str(build_runtime_module(target.triple, futex)), target)
    for store in stores:
        if store is not None:
            store.write(key, [code])
    return code


def native_runtime_object() -> bytes | None:
    """runtime_object for this host, or None where Kiln's pool is not what parallel loops
    use (another backend, no futex): what a compile worker makes for its parent
    (graph/compile/parallel_build.py), which then loads it with pool_address(code)."""
    from .target import Target, init_llvm
    futex = _futex_number()
    if backend() != "kiln" or futex is None:
        return None
    init_llvm()
    return runtime_object(Target.from_string("native"), futex)


def pool_loaded() -> bool:
    """The pool's code is loaded in this process (pool_address() costs nothing more)."""
    return _address is not None


def _load_runtime(target, futex: int, code: bytes | None = None):
    """The pool's code, loaded (`code`, if given: runtime_object's, made elsewhere)."""
    from .object_loader import load_code
    code = runtime_object(target, futex) if code is None else code
    return load_code(target, [code], [ENTRY, FORKS, PREWAKE], "pool")


def pool_address(code: bytes | None = None) -> int:
    """The address of ENTRY in this process (compiled on first use; loaded from `code`,
    native_runtime_object's, when that is given and the pool is not loaded yet)."""
    global _engine, _address
    with _lock:
        if _address is None:
            from .target import Target, init_llvm
            init_llvm()
            futex = _futex_number()
            if futex is None:
                raise CodegenError("Kiln's thread pool needs Linux futexes on x86_64 or "
                                   "aarch64; set KILN_PARALLEL_RUNTIME=gomp")
            target = Target.from_string("native")
            _engine = _load_runtime(target, futex, code)
            _address = _engine.address(ENTRY)
            log.debug("Kiln thread pool compiled at %#x", _address)
        return _address


def fork_count() -> int:
    """Parallel loops handed to Kiln's pool's workers in this process so far (see FORKS);
    0 before the pool's first use."""
    global _fork_count
    if _address is None:
        return 0
    if _fork_count is None:
        import ctypes
        _fork_count = ctypes.CFUNCTYPE(ctypes.c_int64)(_engine.address(FORKS))
    return int(_fork_count())


def prewake_address() -> int:
    """The address of PREWAKE in this process (the pool is loaded first if it is not)."""
    pool_address()
    return _engine.address(PREWAKE)

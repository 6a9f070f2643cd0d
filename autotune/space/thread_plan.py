"""Which parallel loops pay for a fork at the thread count a kernel is built for.

A PARALLEL loop costs a fork and a join on Kiln's pool (about 1 us with a hot pool on the
machines measured) and, on the second core, a cold cache for the data it touches; it gains
the share of the loop's work the other threads take. A loop whose estimated 1-thread time is
a few microseconds, or whose iterations do not split (one iteration, or three on two threads
where one thread does two thirds), runs slower on two threads than on one
(benchmarks/RESULTS.md, "where the time goes at 2 threads": 53 of ~63 parallel kernel calls
under 10 us lost, median 0.7-0.8x). onnxruntime decides the same per op from a cost
estimate; so does this module, once per schedule, after the config is applied
(SearchSpace.apply), so the default, a tuned record, a record measured at another thread
count and a zero-shot pick all get the decision, and the tuner measures and featurizes the
kernel as it will run.

The estimate is the loop's arithmetic over a compute rate plus the bytes it reads and writes
over a memory rate (`estimate_us`), summed over the stages computed inside it; both rates
were fitted to kernel times measured at 1 thread (benchmarks/thread_scaling.py prints the
estimate next to each measured kernel). A loop keeps its parallel annotation when the time
the other threads save, `t * (1 - ceil(e / T) / e)` for `e` iterations on `T = min(threads,
e)` threads, exceeds FORK_COST_US; else it runs serially. At 1 thread nothing changes: the
kernel and its IR stay exactly what the config makes.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

from ...codegen.target import Target
from ...schedule.ir import ForKind
from ...schedule.schedule import AttachKind, Schedule, Stage
from ...te import expr as E
from ...te.dtype import itemsize
from ...te.tensor import ComputeOp
from ...te.visit import walk
from ..task import _op_flops

# What a fork must save to pay, in microseconds of 1-thread time: the fork/join itself
# (0.9-1.3 us measured) plus the second core's cold cache and the chunks' imbalance, which
# together made kernels of 2-10 us lose at 2 threads. With an even split on 2 threads a loop
# pays from an estimated 2 * FORK_COST_US of work on.
FORK_COST_US = 5.0
# Arithmetic per nanosecond on one core, per vector lane of the kernel's dtype, and bytes per
# nanosecond read or written (a model's tensors mostly in L1/L2). Fitted to 233 kernel calls
# of five models timed alone at 1 thread (benchmarks/thread_scaling.py, rocketlake, 2026-11-29;
# median error 1.4x; the split rule's total 2-thread time within 4% of the best per-kernel
# choice and 2.5% below parallelising everything). Matmuls reach near the FMA peak (10 per
# lane per ns is 160 GFLOP/s on 16 lanes); what the estimate misses most is outside its
# reach (exp's denormal slow path on masked softmax rows: 50 us measured, 3 us estimated).
FLOPS_PER_LANE_NS = 10.0
BYTES_PER_NS = 160.0
# ... but a tensor larger than a core's L2 comes from L3 or memory: its bytes beyond
# CACHED_BYTES go at FAR_BYTES_PER_NS (a 1 x 192 -> 1000 GEMV's 768 KB weight took 43 us,
# 18 bytes per ns; estimated 4.8 us at the cached rate, which made it serial).
CACHED_BYTES = 256 << 10
FAR_BYTES_PER_NS = 20.0
# A call (exp, erf, tanh, log, sqrt, ...) costs this many arithmetic operations: Kiln's
# float32 exp/log/tanh/erf are vectorised polynomials of a dozen or so operations.
CALL_OPS = 12


_enabled = True


def planned(threads: int) -> bool:
    """Whether schedules for `threads` get the decision (and row groups their row loop)."""
    return _enabled and threads > 1


@contextlib.contextmanager
def disabled():
    """Schedules made inside the block are as before this module: every parallel loop a
    config asks for is kept, row groups run in parallel from MIN_PARALLEL_POINTS on. For A/B
    benchmarks in one process (benchmarks/thread_scaling.py --ab); compile such models
    without the model cache, whose key does not know the switch."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before


@dataclass(frozen=True)
class LoopDecision:
    """One PARALLEL loop of a schedule and what was decided: its stage, its iterations, the
    estimated 1-thread time of the work inside it, and whether it stays parallel."""

    stage: str
    iterations: int
    estimate_us: float
    parallel: bool


def fork_pays(estimate_us: float, iterations: int, threads: int) -> bool:
    """True when `iterations` of a loop whose 1-thread time is `estimate_us`, split over
    `threads`, save more than a fork costs."""
    if threads <= 1 or iterations <= 1:
        return False
    team = min(threads, iterations)
    slowest = math.ceil(iterations / team) / iterations     # the busiest thread's share
    return estimate_us * (1.0 - slowest) > FORK_COST_US


def estimate_us(ops: list[ComputeOp], reads: dict, out_bytes: float, target: Target) -> float:
    """Estimated 1-thread microseconds of computing `ops` (arithmetic, calls weighted by
    CALL_OPS) that read `reads` ({placeholder op: bytes read}) and write `out_bytes`."""
    ns = 0.0
    for op in ops:
        lanes = max(1, target.vector_lanes(op.dtype))
        ns += _weighted_flops(op) / (FLOPS_PER_LANE_NS * lanes)
    for size in list(reads.values()) + [out_bytes]:
        near = min(size, CACHED_BYTES)
        ns += near / BYTES_PER_NS + (size - near) / FAR_BYTES_PER_NS
    return ns / 1e3


def _weighted_flops(op: ComputeOp) -> float:
    calls = sum(1 for n in walk(op.body) if isinstance(n, E.Call))
    if not calls:
        return _op_flops(op)
    return _op_flops(op) + _points(op) * calls * (CALL_OPS - 1)


def _points(op: ComputeOp) -> float:
    """Points the op's body is evaluated at (reduction points included)."""
    points = math.prod(op.shape) if op.shape else 1
    if isinstance(op.body, E.Reduce):
        points *= math.prod(a.extent for a in op.body.axis)
    return float(points)


def _root_of(stage: Stage) -> Stage:
    while stage.attach is AttachKind.AT and stage.attach_stage is not None:
        stage = stage.attach_stage
    return stage


def _parallel_ivar(stage: Stage):
    return next((v for v in stage.leaf_iter_vars
                 if stage.iter_kinds.get(v) is ForKind.PARALLEL), None)


def root_groups(sch: Schedule, target: Target) -> list[tuple[Stage, float]]:
    """(stage at root, estimated 1-thread us of its work) for every root stage of `sch`.
    Its work is its own and that of every stage computed at it; a stage inlined into them
    counts once; an input (or another root stage's result) counts the bytes its readers can
    touch (at most its size, at most one element per point they evaluate: a gathered table
    is not read whole)."""
    inlined = {s.op for s in sch.stages if s.attach is AttachKind.INLINE}
    groups: dict[Stage, list[ComputeOp]] = {}
    for s in sch.stages:
        if s.is_placeholder or s.attach is AttachKind.INLINE:
            continue
        groups.setdefault(_root_of(s), []).append(s.op)
    out = []
    for root, ops in groups.items():
        work, reads, seen, members = list(ops), {}, set(), set(ops)
        stack = list(ops)
        while stack:
            op = stack.pop()
            for t in op.input_tensors:
                src = t.op
                if src in inlined and src not in seen:
                    seen.add(src)
                    work.append(src)
                    stack.append(src)
                elif src not in members:        # an input, or another root stage's result
                    size = math.prod(src.shape) if src.shape else 1
                    touched = min(size, _points(op))
                    reads[src] = max(reads.get(src, 0.0), touched * itemsize(src.dtype))
        res = root.op
        out_bytes = (math.prod(res.shape) if res.shape else 1) * itemsize(res.dtype)
        out.append((root, estimate_us(work, reads, out_bytes, target)))
    return out


def kernel_estimate_us(sch: Schedule, target: Target) -> float:
    """Estimated 1-thread microseconds of the whole kernel `sch` makes."""
    return sum(est for _, est in root_groups(sch, target))


def decide_parallel(sch: Schedule, target: Target, threads: int) -> list[LoopDecision]:
    """Make serial every PARALLEL loop of `sch` that does not pay at `threads` (see the
    module docstring); returns the decisions. At 1 thread `sch` is left as it is."""
    if not planned(threads):
        return []
    decisions = []
    for stage, est in root_groups(sch, target):
        ivar = _parallel_ivar(stage)
        if ivar is None or stage.attach is not AttachKind.ROOT:
            continue
        keep = fork_pays(est, int(ivar.extent), threads)
        if not keep:
            stage.iter_kinds[ivar] = ForKind.SERIAL
        decisions.append(LoopDecision(stage.name, int(ivar.extent), est, keep))
    return decisions

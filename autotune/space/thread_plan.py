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
over a memory rate (`estimate_us`), summed over the stages computed inside it, plus what
those rates do not see: elements gathered across an input's rows (transposes, blocked-layout
copies; `_strided_reads`) and the dependent scalar steps of a row reduction's final sum; the
rates were fitted to kernel times measured at 1 thread (benchmarks/thread_scaling.py prints
the estimate next to each measured kernel). A loop keeps its parallel annotation when the
time the other threads save, `t * (1 - ceil(e / T) / e)` for `e` iterations on `T =
min(threads, e)` threads, exceeds FORK_COST_US; else it runs serially. A reduction-free
stage the config left without a parallel loop gets one over its rows when the same rule
says it pays (`_offer_rows`), and a parallel loop of few iterations fuses more outer tile
loops (`balanced_depth`, called where the loop is made). At 1 thread nothing changes: the
kernel and its IR stay exactly what the config makes.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

from ...codegen.target import Target
from ...schedule.ir import ForKind
from ...schedule.schedule import AttachKind, Schedule, Stage
from ...te import expr as E
from ...te.dtype import itemsize
from ...te.tensor import ComputeOp, TensorLoad
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
# A reduction with no vector loop (a row reduction's final sum over its partial's lanes) is a
# chain of dependent scalar operations: each waits for the one before (~4 cycles). Softmax's
# and layer norm's two such chains of 32 per row made their 64-wide rows cost ~75 ns each
# beyond the estimate (1 x 4 x 64 x 64 softmax: 22 us measured, 2.8 us estimated before).
CHAIN_NS = 0.6
# A data-movement stage (no reduction) reading an input along a dimension other than that
# input's last, contiguous one (a transpose, a blocked-layout conversion, a window
# partition) gathers one element per lane: ~0.45 ns per element read that way (transposes,
# from_blocked/to_blocked copies of 10K-55K elements: 0.39-0.51 ns; estimated at the bytes'
# rate they came out 8-25x too fast, so they stayed serial at 2 threads).
STRIDED_NS = 0.45
PROBE_POINTS = 33
# A parallel loop split over T threads gets at least this many iterations per thread where
# the outer tile loops allow (balanced_depth).
MIN_ITERATIONS_PER_THREAD = 4       # consecutive outputs looked at to tell a gather from a row


_enabled = True
_refined = True


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


@contextlib.contextmanager
def unrefined():
    """Schedules made inside the block get the decision without its data-movement terms
    (gathers, per-row chains), row offers and balanced depth: the first calibration's rule.
    For A/B benchmarks in one process (benchmarks/thread_scaling.py --ab --ab-refinements);
    compile such models without the model cache."""
    global _refined
    before, _refined = _refined, False
    try:
        yield
    finally:
        _refined = before


@dataclass(frozen=True)
class LoopDecision:
    """One PARALLEL loop of a schedule and what was decided: its stage, its iterations, the
    estimated 1-thread time of the work inside it, and whether it stays parallel."""

    stage: str
    iterations: int
    estimate_us: float
    parallel: bool


def balanced_depth(extents: list[int], depth: int, threads: int) -> int:
    """How many of the outer loops `extents` (outermost first) a parallel loop that a config
    asks to fuse `depth` of should fuse at `threads`: more, one by one, until it has at least
    MIN_ITERATIONS_PER_THREAD iterations per thread. A conv whose cache tiles leave 4 or 5
    outer iterations runs 3 of 5 on one thread of two, and cannot rebalance when one thread
    is slowed; the pool splits a longer loop into chunks that the threads claim as they go.
    Only spatial outer tile loops are fused (their order and tiles stay as they are); at
    one thread `depth` is returned unchanged."""
    if threads <= 1 or depth <= 0 or not _refined:
        return depth
    want = MIN_ITERATIONS_PER_THREAD * threads
    while depth < len(extents) and math.prod(extents[:depth]) < want:
        depth += 1
    return depth


def fork_pays(estimate_us: float, iterations: int, threads: int) -> bool:
    """True when `iterations` of a loop whose 1-thread time is `estimate_us`, split over
    `threads`, save more than a fork costs."""
    if threads <= 1 or iterations <= 1:
        return False
    team = min(threads, iterations)
    slowest = math.ceil(iterations / team) / iterations     # the busiest thread's share
    return estimate_us * (1.0 - slowest) > FORK_COST_US


def estimate_us(ops: list[ComputeOp], reads: dict, out_bytes: float, target: Target,
                scalar: frozenset = frozenset(), strided: float = 0.0,
                chains: frozenset = frozenset()) -> float:
    """Estimated 1-thread microseconds of computing `ops` (arithmetic, calls weighted by
    CALL_OPS) that read `reads` ({placeholder op: bytes read}) and write `out_bytes`.
    Ops in `scalar` are computed per row without a vector loop (one lane at a time); a
    reduction in `chains` (one accumulator: no unrolled lanes either) is a dependent chain,
    CHAIN_NS a step. `strided` elements are read across an input's rows (STRIDED_NS each)."""
    if not _refined:
        scalar, strided, chains = frozenset(), 0.0, frozenset()
    ns = strided * STRIDED_NS
    for op in ops:
        if op in chains and isinstance(op.body, E.Reduce):
            ns += _points(op) * CHAIN_NS
            continue
        lanes = 1 if op in scalar else max(1, target.vector_lanes(op.dtype))
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


def _strided_reads(op: ComputeOp, inlined: set) -> float:
    """Elements a reduction-free op gathers: the op's points for each load (of an input or a
    materialised stage, followed through the stages inlined into it) whose address does not
    step by one element, nor stay put, as the op's last index steps through its first
    PROBE_POINTS values (a transpose, a blocked-layout conversion, a window partition's
    reshape; a transpose undone by the next stage counts nothing)."""
    if isinstance(op.body, E.Reduce) or not op.axis or op.axis[-1].extent < 2:
        return 0.0
    last = op.axis[-1]
    if all(_plain(load, last.var, inlined) for load in _loads(op)):
        return 0.0
    at = {a.var: a.extent // 2 for a in op.axis}
    rows = []
    for k in range(min(last.extent, PROBE_POINTS)):
        at[last.var] = k
        rows.append(_addresses(op, at, inlined))
    gathered = 0
    for column in zip(*rows):
        if None in column:
            continue
        steps = {b - a for a, b in zip(column, column[1:])}
        gathered += not steps <= {0, 1}       # rows, clamped rows, broadcasts: no gather
    return gathered * _points(op)


def _addresses(op: ComputeOp, env: dict, inlined: set) -> list:
    """Flat element offsets of every load `op` makes at the point `env`, followed through
    inlined stages (None where an index is not a plain integer expression)."""
    out = []
    for node in _loads(op):
        indices = [_evaluate(i, env) for i in node.indices]
        src = node.tensor.op
        if src in inlined and None not in indices:
            out += _addresses(src, dict(zip((a.var for a in src.axis), indices)), inlined)
            continue
        if None in indices or len(indices) < 2:
            out.append(None)
            continue
        offset, stride = 0, 1
        for index, extent in zip(reversed(indices), reversed(node.tensor.shape)):
            offset += index * stride
            stride *= extent
        out.append(offset)
    return out


def _plain(load: TensorLoad, last: E.Var, inlined: set) -> bool:
    """A load that is certainly no gather without evaluating it: of a tensor not inlined,
    `last` in no index but the last, which is `last` or `last` plus terms without it (the
    elementwise case; anything else is probed)."""
    if load.tensor.op in inlined:
        return False
    *outer, inner = load.indices if load.indices else (None,)
    if any(_mentions(i, last) for i in outer):
        return False
    if inner is None or not _mentions(inner, last):
        return True
    while isinstance(inner, E.Add) and not isinstance(inner, E.Var):
        if not _mentions(inner.a, last):
            inner = inner.b
        elif not _mentions(inner.b, last):
            inner = inner.a
        else:
            return False
    return isinstance(inner, E.Var) and inner == last


def _mentions(expr, var: E.Var) -> bool:
    return any(isinstance(n, E.Var) and n == var for n in walk(expr))


@functools.lru_cache(maxsize=4096)
def _loads(op: ComputeOp) -> tuple:
    """The TensorLoads of `op`'s body, in walk order (walked once per op, not per point)."""
    return tuple(n for n in walk(op.body) if isinstance(n, TensorLoad))


_INT_OPS = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
            E.FloorDiv: lambda a, b: a // b if b else None,
            E.FloorMod: lambda a, b: a % b if b else None, E.Min: min, E.Max: max,
            E.LT: lambda a, b: a < b, E.LE: lambda a, b: a <= b, E.EQ: lambda a, b: a == b,
            E.NE: lambda a, b: a != b, E.And: lambda a, b: a and b,
            E.Or: lambda a, b: a or b}


def _evaluate(expr, env: dict):
    """The integer value of index expression `expr` with `env`'s variables, or None."""
    if isinstance(expr, E.IntImm):
        return expr.value
    if isinstance(expr, E.Var):
        return env.get(expr)
    if isinstance(expr, E.Cast) and expr.dtype.startswith(("int", "uint")):
        return _evaluate(expr.value, env)
    if isinstance(expr, E.Select):
        cond = _evaluate(expr.cond, env)
        return None if cond is None else _evaluate(expr.t if cond else expr.f, env)
    fn = _INT_OPS.get(type(expr))
    if fn is None:
        return None
    a, b = _evaluate(expr.a, env), _evaluate(expr.b, env)
    return None if a is None or b is None else fn(a, b)


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
    scalar, chains = set(), set()       # attached stages without a vector loop; of those,
    for s in sch.stages:                # the ones without unrolled (independent) lanes either
        if s.is_placeholder or s.attach is AttachKind.INLINE:
            continue
        groups.setdefault(_root_of(s), []).append(s.op)
        kinds = set(s.iter_kinds.values())
        if s.attach is AttachKind.AT and ForKind.VECTORIZED not in kinds:
            scalar.add(s.op)
            if ForKind.UNROLLED not in kinds:
                chains.add(s.op)
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
        strided = sum(_strided_reads(op, inlined) for op in ops)
        out.append((root, estimate_us(work, reads, out_bytes, target, frozenset(scalar),
                                      strided, frozenset(chains))))
    return out


def kernel_estimate_us(sch: Schedule, target: Target) -> float:
    """Estimated 1-thread microseconds of the whole kernel `sch` makes."""
    return sum(est for _, est in root_groups(sch, target))


def decide_parallel(sch: Schedule, target: Target, threads: int) -> list[LoopDecision]:
    """Make serial every PARALLEL loop of `sch` that does not pay at `threads` (see the
    module docstring), and give a row loop to a data-movement stage that has none when
    it pays (`_offer_rows`); returns the decisions. At 1 thread `sch` is left as it is."""
    if not planned(threads):
        return []
    decisions = []
    for stage, est in root_groups(sch, target):
        if stage.attach is not AttachKind.ROOT:
            continue
        ivar = _parallel_ivar(stage)
        if ivar is None:
            offered = _offer_rows(sch, stage, est, threads) if _refined else None
            if offered is not None:
                decisions.append(offered)
            continue
        keep = fork_pays(est, int(ivar.extent), threads)
        if not keep:
            stage.iter_kinds[ivar] = ForKind.SERIAL
        decisions.append(LoopDecision(stage.name, int(ivar.extent), est, keep))
    return decisions


def _offer_rows(sch: Schedule, stage: Stage, est: float, threads: int) -> LoopDecision | None:
    """A reduction-free stage with no parallel loop (an elementwise or layout-changing
    output below the defaults' MIN_PARALLEL_POINTS: a transpose, a blocked-layout copy, a
    concat) runs its rows - every axis but the last fused - in parallel when the fork pays.
    Only the row loop is fused: each row keeps its plain, vectorised inner loop (a loop
    fused down to the vector, as the elementwise `parallel` knob makes it, recovers every
    vector's indices by div/mod). None when nothing is offered."""
    op = stage.op
    rows_axes = list(op.axis[:-1])
    if (isinstance(op.body, E.Reduce) or not rows_axes
            or stage.leaf_iter_vars[:len(rows_axes)] != rows_axes
            or any(a in stage.iter_kinds for a in rows_axes)
            or any(s.attach_stage is stage for s in sch.stages)):
        return None
    rows = math.prod(a.extent for a in rows_axes)
    if not fork_pays(est, rows, threads):
        return None
    stage.parallel(stage.fuse(*rows_axes) if len(rows_axes) > 1 else rows_axes[0])
    return LoopDecision(stage.name, rows, est, True)

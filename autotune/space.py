"""Search spaces generated from a task's compute DAG by rules, not per-operator templates.

Rules, per stage of the DAG:
  * placeholder: nothing to schedule;
  * injective stage that is not an output: inlined into its consumers (a knob may keep it
    materialised at root instead when a reduction reads it, e.g. padding);
  * reduction stage ("anchor"): multi-level tiling SSRSRS (spatial axes in 3 levels, reduce
    axes in 2), a local accumulator (cache_write, or the reduction computed into a tile of its
    elementwise epilogue via compute_at), fused+parallel outer loops, vectorised innermost
    spatial loop, optionally unrolled register tile;
  * other (elementwise) outputs: vectorised innermost axis, fused+parallel outer axes;
  * an output read through row reductions (softmax, layer norm: reductions along the last,
    contiguous axis into [rows, 1]) may be computed row by row, each reduction split into a
    vectorised partial and a final reduction at the row loop (`rows` knob).
An epilogue reached through stages that branch and rejoin (GELU) is fused under the anchor's
`epilogue` knob. A config is a JSON-able dict knob name -> choice; `apply(config)` rebuilds
the schedule.

Knob names derive from the canonical DAG alone, as the workload key does: `s<k>/<kind>[/...]`
for the k-th compute stage in canonical topological order, `tile/<axis position>`,
`reduce/<position>`, `pack/in<j>` for the j-th input. A record tuned on one model therefore
applies to the same workload in any other, whatever its tensor and node names.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from ..codegen.runtime_config import num_threads_from_env
from ..codegen.target import Target
from ..schedule import create_schedule
from ..schedule.schedule import Schedule, Stage
from ..te.errors import ScheduleError
from ..te import expr as E
from ..te.expr import IterVar
from ..te.ops.linalg import MATMUL_PREPACKED
from ..te.ops.tags import PAD
from ..te.ops.winograd import INPUT_TAG as WINOGRAD_INPUT
from ..te.ops.winograd import winograd_tag_m
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor, TensorLoad, compute, reduce_axis
from ..te.visit import ExprMutator, substitute, walk
from ..te.workload import topo_ops
from .task import Task

MAX_INNER = 16            # inner (register) tile of a non-vector axis
MAX_VECTOR_TILE = 64      # inner tile of the vectorised axis
MAX_MID = 64              # middle (cache) tile
MAX_UNROLLED_POINTS = 64  # unrolled register tile larger than this is left rolled
MAX_WINDOW = 7            # reduce axes at most this long are a window (kernel taps)
MIN_CACHE_WORK = 64       # output points below which no local accumulator is offered
MAX_WHOLE_REDUCE = 256    # a GEMM's K at most this long is one register-tile loop
REDUCE_STEPS = 256        # multiply-adds per register-tile visit when several reduce axes nest
MIN_PARALLEL_POINTS = 1 << 16  # elementwise outputs smaller than this default to one loop
MIN_STREAM_BALANCE = 0.9  # a GEMV's column blocks keep the cores at least this busy
MAX_WHOLE_CACHE_AXIS = 8  # a cache-tile axis at most this long is taken whole by default
# outer tile loops an anchor's parallel loop may fuse. A channel-blocked conv's first two are
# batch (1) and output-channel blocks, so with depth 2 only a conv of many blocks ran in
# parallel: MobileNetV2's 32->16 1x1 conv at 112x112 (one block) ran serially at 2 threads,
# and 2-6 blocks left a core idle for part of the kernel. Depth 3 adds the output rows.
# Stored configs keep their meaning (0-2 are unchanged).
MAX_PARALLEL_DEPTH = 3
# value of a knob kind that a stored config made before the knob existed implicitly had
LEGACY = {"pack": 0, "window": 0, "epilogue": 0, "rows": 0}
# modes of the `<stage>/inline` knob of an injective producer of a reduction (e.g. padding);
# 0 and 1 are the original choices, so stored configs keep their meaning
ROOT_FLAT = 0     # materialised at root: every axis fused into one parallel loop
INLINE = 1        # substituted into the consumer
ROOT_ROWS = 2     # materialised at root: outer axes parallel, each row a plain inner loop
AT_ANCHOR = 3     # computed inside the consuming anchor's tile loop, only the part it reads


@dataclass(frozen=True)
class Knob:
    """One decision of the space: `choices` are JSON values, ordered so that neighbours in
    the tuple are similar schedules (mutations step along it)."""

    name: str
    choices: tuple

    def index(self, value) -> int:
        value = _freeze(value)
        for i, choice in enumerate(self.choices):
            if _freeze(choice) == value:
                return i
        raise ScheduleError(f"config value {value!r} is not a choice of knob '{self.name}' "
                            f"(choices: {list(self.choices)[:8]}...)")


def _freeze(value):
    return tuple(value) if isinstance(value, list) else value


def _factor_candidates(extent: int, cap: int) -> list[int]:
    """Divisors of `extent`, powers of two and 3 x powers of two (register tiles such as 6
    rows x 2 vectors fill a 16-register file; non-divisors are legal: tails are guarded)."""
    out = {d for d in range(1, min(extent, cap) + 1) if extent % d == 0}
    out |= {m << p for p in range(0, 12) for m in (1, 3) if (m << p) <= min(extent, cap)}
    return sorted(out)


def _tile_choices(extent: int, inner_cap: int) -> tuple:
    pairs = []
    for inner in _factor_candidates(extent, inner_cap):
        for mid in _factor_candidates(max(1, extent // inner), MAX_MID):
            pairs.append((mid, inner))
    return tuple(sorted(pairs, key=lambda p: (p[1], p[0])))


def _vector_lanes(target: str, dtype: str) -> int:
    from ..codegen.target import Target
    return Target.from_string(target).vector_lanes(dtype)


@dataclass
class _Anchor:
    """A reduction stage and, when it has one, the elementwise output that consumes it."""

    op: ComputeOp
    epilogue: ComputeOp | None
    is_output: bool
    packs: tuple = ()       # _Pack candidates: input operands worth a panel-major copy
    # the epilogue is reached through inlined stages that branch and rejoin (GELU's
    # x * 0.5 * (1 + erf(x / sqrt2)) reads x twice); its fusion is the `epilogue` knob
    joined: bool = False


@dataclass(frozen=True)
class _Pack:
    """Operand `tensor` of an anchor, indexed along dimension `dim` by exactly the anchor's
    spatial axis `axis_pos`: packing copies it as [dim // p, other dims..., dim % p] with
    p = that axis's register (inner) tile, so the tile's panel is contiguous."""

    tensor: Tensor
    dim: int
    axis_pos: int
    knob: str


@dataclass(frozen=True)
class _RowGroup:
    """An output computed one row (every axis but the last) at a time, under knob `knob`:
    its row reductions (`members`: reductions along the contiguous last axis into
    [rows..., 1], e.g. softmax's max and sum, layer norm's mean and variance) are split into
    a vectorised partial over a few vectors of lanes and a final reduction over those lanes,
    both computed per row, and the injective `stages` between them (softmax's exp) are
    inlined or computed per row. `out` may be a member itself (a row sum as the output)."""

    out: ComputeOp
    members: tuple[ComputeOp, ...]
    stages: tuple[ComputeOp, ...]
    knob: str


class SearchSpace:
    """The rule-generated space of schedules of `task` for its target."""

    def __init__(self, task: Task):
        self.task = task
        self._default: dict | None = None     # default_config(), cached by validate()
        every_op = topo_ops(task.outputs)
        self.ops = [op for op in every_op if isinstance(op, ComputeOp)]
        self._stage_index = {op: k for k, op in enumerate(self.ops)}
        self._input_index = {op: k for k, op in enumerate(
            o for o in every_op if isinstance(o, PlaceholderOp))}
        outputs = {t.op for t in task.outputs}
        consumers = {op: [c for c in self.ops if op in {t.op for t in c.input_tensors}]
                     for op in self.ops}
        self.inlined = [op for op in self.ops if not op.reduce_axis and op not in outputs]
        # an injective producer of a reduction (padding, exp of softmax) may instead be
        # materialised once: inlining re-evaluates it (selects, exp) in the hot loop
        self.optional_inline = [op for op in self.inlined
                                if any(c.reduce_axis for c in consumers[op])]
        self.anchors: list[_Anchor] = []
        epilogues = set()
        for op in self.ops:
            if op.reduce_axis:
                epi, joined = self._epilogue_of(op, consumers, outputs)
                if epi is not None and not joined:
                    epilogues.add(epi)
                self.anchors.append(_Anchor(op, epi, op in outputs, joined=joined))
        for anchor in self.anchors:
            anchor.packs = tuple(self._pack_candidates(anchor.op))
        # (a joined epilogue keeps its elementwise knobs: they schedule it when the anchor's
        # `epilogue` knob is 0, as before that knob existed)
        self.elementwise = [op for op in self.ops if op in outputs and not op.reduce_axis
                            and op not in epilogues]
        # Winograd transform outputs get their own schedule (unrolled transform axes)
        self.transforms = {op: m for op in self.elementwise
                           if (m := self._transform_tile(op)) is not None}
        self.elementwise = [op for op in self.elementwise if op not in self.transforms]
        self.row_groups = self._row_groups(consumers, outputs)
        self.knobs = self._make_knobs()
        self._by_name = {k.name: k for k in self.knobs}

    def _transform_tile(self, op: ComputeOp) -> int | None:
        """0 for a Winograd input transform, the tile size m for an output that inlines a
        Winograd output transform (the conv's epilogue is fused after it), else None."""
        if op.tag == WINOGRAD_INPUT:
            return 0
        seen, stack = set(), [op]
        while stack:
            cur = stack.pop()
            m = winograd_tag_m(cur.tag)
            if m is not None:
                return m
            for tensor in cur.input_tensors:
                if tensor.op in self.inlined and tensor.op not in seen:
                    seen.add(tensor.op)
                    stack.append(tensor.op)
        return None

    def _epilogue_of(self, op, consumers, outputs) -> tuple[ComputeOp | None, bool]:
        """The output elementwise consumer of the same shape a reduction can be fused into,
        possibly through inlined injective stages, and whether those stages branch.

        A chain (bias-add then relu: every stage has one reader) is fused as it always was.
        Stages that branch and rejoin in one exit (GELU reads x twice) are `joined`: fused
        only when they are all of the anchor's shape and read no other reduction (which the
        anchor's tile would then depend on), and only under the `epilogue` knob."""
        if op in outputs:
            return None, False
        region, exits = self._inlined_region(op, consumers)
        if len(exits) != 1:
            return None, False
        (epi,) = exits
        if not (epi in outputs and not epi.reduce_axis and epi.shape == op.shape):
            return None, False
        chain = all(len(consumers[s]) == 1 for s in [op, *region])
        if chain:
            return epi, False
        if any(s.shape != op.shape for s in region) or self._reads_other_reduction(
                [epi, *region], op):
            return None, False
        return epi, True

    def _inlined_region(self, op, consumers) -> tuple[list[ComputeOp], set[ComputeOp]]:
        """Every inlined stage reachable from `op` through inlined readers, and the readers
        met on the way that are not inlined (the region's exits)."""
        region: list[ComputeOp] = []
        exits: set[ComputeOp] = set()
        stack = [op]
        while stack:
            for reader in consumers[stack.pop()]:
                if reader not in self.inlined:
                    exits.add(reader)
                elif reader not in region:
                    region.append(reader)
                    stack.append(reader)
        return region, exits

    def _reads_other_reduction(self, stages: list[ComputeOp], anchor: ComputeOp) -> bool:
        """Whether `stages` read, directly or through inlined producers, a reduction other
        than `anchor`."""
        seen, stack = set(), list(stages)
        while stack:
            for tensor in stack.pop().input_tensors:
                producer = tensor.op
                if producer is anchor or producer in seen or not isinstance(producer,
                                                                           ComputeOp):
                    continue
                if producer.reduce_axis:
                    return True
                seen.add(producer)
                stack.append(producer)
        return False

    def _row_groups(self, consumers, outputs) -> list[_RowGroup]:
        """The outputs that can be computed row by row with their row reductions."""
        groups, taken = [], set()
        for out in self.ops:
            if out in outputs and len(out.shape) >= 2:
                group = self._row_group(out, consumers, outputs)
                if group is not None and not taken & set(group.members):
                    taken |= set(group.members)
                    groups.append(group)
        return groups

    def _row_group(self, out: ComputeOp, consumers, outputs) -> _RowGroup | None:
        """`out`'s row group: the row reductions and inlined stages it reads (walking back
        from it through inlined stages and row reductions), provided nothing outside the
        group reads them and no anchor it is fused into is left out."""
        rows = out.shape[:-1] + (1,)
        members, stages, seen, stack = [], [], set(), [out]
        while stack:
            op = stack.pop()
            if op in seen:
                continue
            seen.add(op)
            if op.reduce_axis:
                if not _is_row_reduction(op, rows) or (op in outputs and op is not out):
                    continue
                members.append(op)
            elif op is not out:
                if op not in self.inlined:
                    continue
                stages.append(op)
            stack.extend(t.op for t in op.input_tensors if isinstance(t.op, ComputeOp))
        if not members:
            return None
        group = {out, *members, *stages}
        if any(c not in group for op in members + stages for c in consumers[op]):
            return None
        if any(a.epilogue is out and a.op not in group for a in self.anchors):
            return None
        if out.reduce_axis and out not in members:
            return None
        order = {op: k for k, op in enumerate(self.ops)}
        return _RowGroup(out, tuple(sorted(members, key=order.get)),
                         tuple(sorted(stages, key=order.get)),
                         f"{self._stage_label(out)}/rows")

    def _pack_candidates(self, op: ComputeOp) -> list[_Pack]:
        """Placeholder operands whose register-tile panel is not contiguous: one access
        pattern, a spatial axis as a plain index of one dimension (the innermost such axis,
        so the vectorised one when it indexes the operand), and not already a narrow last
        dimension indexed by the vectorised axis (a panel of at most two vectors is
        contiguous enough)."""
        lanes = _vector_lanes(self.task.target, op.dtype)
        position = {a.var: pos for pos, a in enumerate(op.axis)}
        patterns: dict[Tensor, set] = {}
        for node in walk(op.body):
            if isinstance(node, TensorLoad) and isinstance(node.tensor.op, PlaceholderOp):
                patterns.setdefault(node.tensor, set()).add(node.indices)
        label, out = self._stage_label(op), []
        for tensor, indexings in patterns.items():
            if len(indexings) != 1 or tensor.ndim < 2:
                continue
            (indices,) = indexings
            best = None
            for dim, index in enumerate(indices):
                pos = position.get(index)
                if pos is None or tensor.shape[dim] <= 1:
                    continue
                others = [i for k, i in enumerate(indices) if k != dim]
                if any(index in set(walk(i)) for i in others):
                    continue
                if dim == tensor.ndim - 1 and tensor.shape[dim] <= 2 * lanes:
                    continue
                if best is None or pos > best[1]:
                    best = (dim, pos)
            vector_last = indices[-1] == op.axis[-1].var if op.axis else False
            if best is not None and (best[0] == tensor.ndim - 1 or not vector_last):
                # (packing another axis would move a contiguous vector dimension inwards)
                out.append(_Pack(tensor, best[0], best[1],
                                 f"{label}/pack/{self._input_label(tensor)}"))
        return out

    # ------------------------------------------------------------------ knobs

    def _stage_label(self, op: ComputeOp) -> str:
        """`s<k>`: the k-th compute stage in the DAG's canonical topological order (the order
        the workload key serialises). Knob names derive from positions only, never from op,
        tensor or axis names, so the same workload built by any model (or exporter) gets
        the same space and a stored record applies to it."""
        return f"s{self._stage_index[op]}"

    def _input_label(self, tensor: Tensor) -> str:
        """`in<j>`: the j-th input (placeholder) in the canonical topological order."""
        return f"in{self._input_index[tensor.op]}"

    def stage_label(self, op: ComputeOp) -> str:
        """The knob-name prefix of stage `op` (see _stage_label)."""
        return self._stage_label(op)

    def _make_knobs(self) -> list[Knob]:
        knobs: list[Knob] = []
        for anchor in self.anchors:
            op, label = anchor.op, self._stage_label(anchor.op)
            lanes = _vector_lanes(self.task.target, op.dtype)
            last = len(op.axis) - 1
            for pos, axis in enumerate(op.axis):
                cap = MAX_VECTOR_TILE if pos == last else MAX_INNER
                knobs.append(Knob(f"{label}/tile/{pos}",
                                  _tile_choices(axis.extent, cap)))
            for pos, axis in enumerate(op.reduce_axis):
                # up to 256, and the whole axis (one register tile accumulates all of it)
                choices = sorted(set(_factor_candidates(axis.extent, 256)) | {axis.extent})
                knobs.append(Knob(f"{label}/reduce/{pos}", tuple(choices)))
            points = math.prod(op.shape) if op.shape else 1
            # output, fused epilogue, or (an intermediate read by a differently shaped
            # consumer) a local tile cache-written at the anchor's own tile loop
            knobs.append(Knob(f"{label}/local", (0, 1) if points >= MIN_CACHE_WORK else (0,)))
            knobs.append(Knob(f"{label}/parallel",
                              tuple(range(0, min(MAX_PARALLEL_DEPTH, len(op.axis)) + 1))))
            knobs.append(Knob(f"{label}/vectorize", (0, 1)))
            knobs.append(Knob(f"{label}/unroll", (0, 1)))
            knobs.append(Knob(f"{label}/lanes", (lanes,)))
            if _window_axes(op):
                knobs.append(Knob(f"{label}/window", (0, 1, 2)))
            if anchor.joined:
                # 0: the branching epilogue is its own loop nest after the anchor (the
                # schedule before this knob); 1: computed from the anchor's local tile
                knobs.append(Knob(f"{label}/epilogue", (0, 1)))
            for pack in anchor.packs:
                knobs.append(Knob(pack.knob, (0, 1)))
        for op in self.optional_inline:
            knobs.append(Knob(f"{self._stage_label(op)}/inline",
                              (INLINE, AT_ANCHOR, ROOT_ROWS, ROOT_FLAT)))
        for group in self.row_groups:
            # 0: every stage scheduled on its own (as before this knob); 1, 2: row by row,
            # the row reductions' partials that many vectors wide
            knobs.append(Knob(group.knob, (0, 1, 2)))
        for op in self.transforms:
            # the loop order of the parallel outer loops, see _schedule_transform
            knobs.append(Knob(f"{self._stage_label(op)}/transform", (0, 1)))
        for op in self.elementwise:
            label = self._stage_label(op)
            inner = op.axis[-1].extent if op.axis else 1
            knobs.append(Knob(f"{label}/vector", tuple(
                f for f in _factor_candidates(inner, MAX_VECTOR_TILE) if f == 1 or f >= 4)))
            knobs.append(Knob(f"{label}/parallel", (0, 1) if op.axis else (0,)))
        return knobs

    @property
    def size(self) -> int:
        return math.prod(len(k.choices) for k in self.knobs)

    # ------------------------------------------------------------------ configs

    def default_config(self) -> dict:
        """A sensible schedule without tuning: a register tile sized to the vector register
        file (see `_anchor_defaults`), local accumulator, one parallel level, vectorised and
        unrolled; the vector operand packed for GEMM-sized anchors; row groups and joined
        epilogues on."""
        config = {}
        anchor_values = {}
        for anchor in self.anchors:
            anchor_values.update(self._anchor_defaults(anchor))
        for op in self.elementwise:
            anchor_values.update(self._elementwise_defaults(op))
        for knob in self.knobs:
            kind = knob.name.split("/")[1]
            if knob.name in anchor_values:
                config[knob.name] = anchor_values[knob.name]
            elif kind == "vector":
                config[knob.name] = _nearest_scalar(knob.choices, 8)
            elif kind in ("local", "parallel", "vectorize", "unroll"):
                config[knob.name] = knob.choices[-1]
            elif kind == "inline":
                config[knob.name] = self._producer_default(knob.name)
            elif kind == "window":
                config[knob.name] = 2
            elif kind == "epilogue":
                config[knob.name] = 1
            elif kind == "rows":
                config[knob.name] = self._rows_default(knob.name)
            elif kind == "pack":
                config[knob.name] = 0
            elif kind == "transform":
                config[knob.name] = 0
            else:
                config[knob.name] = knob.choices[0]
        return config

    def _producer_default(self, knob_name: str) -> int:
        """A window anchor's padding is computed per tile, where the anchor reads it (it
        stays in cache); other padding is materialised at root as parallel rows. A stage of
        a row group (whose default is on) is computed per row when two stages read it
        (softmax's exp: computing it twice doubled the kernel's time), else inlined."""
        op = next(o for o in self.optional_inline
                  if f"{self._stage_label(o)}/inline" == knob_name)
        group = next((g for g in self.row_groups if op in g.stages), None)
        if group is not None:
            # per row: materialised when read twice (softmax's exp), else recomputed
            readers = [c for c in self.ops if op in {t.op for t in c.input_tensors}]
            return AT_ANCHOR if len(readers) > 1 else INLINE
        reader = self._sole_anchor_reader(op)
        return AT_ANCHOR if reader is not None and _window_axes(reader) else ROOT_ROWS

    def _elementwise_defaults(self, op: ComputeOp) -> dict:
        """The widest vector of at most MAX_VECTOR_TILE lanes (and at least one register)
        that divides the last axis, and a parallel loop only above MIN_PARALLEL_POINTS
        points: `parallel` fuses every loop, the vector axis's outer part included, so each
        vector's indices are recovered by div/mod, and a small kernel pays more for that
        and for the fork than it gains (BERT's 32K-point elementwise groups at 1 thread:
        vector 8 and parallel 10-25 us, vector 64 serial 4-9 us)."""
        label = self._stage_label(op)
        knob = self._by_name[f"{label}/vector"]
        inner = op.axis[-1].extent if op.axis else 1
        lanes = _vector_lanes(self.task.target, op.dtype)
        dividing = [c for c in knob.choices if inner % c == 0 and c >= lanes]
        vector = max(dividing) if dividing else _nearest_scalar(knob.choices, 8)
        points = math.prod(op.shape) if op.shape else 1
        parallel = self._by_name[f"{label}/parallel"].choices[-1]
        return {knob.name: vector,
                f"{label}/parallel": parallel if points >= MIN_PARALLEL_POINTS else 0}

    def _rows_default(self, knob_name: str) -> int:
        """Partials two vectors wide when they divide every row (two accumulator chains:
        layer norm's 256-wide rows 20-25% faster than with one), else one vector."""
        group = next(g for g in self.row_groups if g.knob == knob_name)
        lanes = _vector_lanes(self.task.target, group.out.dtype)
        whole = all(op.reduce_axis[0].extent % (2 * lanes) == 0 for op in group.members)
        return 2 if whole else 1

    def _anchor_defaults(self, anchor: _Anchor) -> dict:
        """Tile and reduce knobs of one anchor under a register budget.

        The vectorised (last) axis gets one or two vectors; ONE other spatial axis (the
        nearest before the last with extent > 1) gets as many rows as fill ~3/4 of the vector
        registers with accumulators; every other axis has an inner tile of 1, so a DAG with
        many spatial axes (a channel-blocked conv) does not multiply its register tile. The
        middle tiles make a cache tile, shrunk until the fused parallel loop has at least
        2 x cores iterations. Small reduce axes (kernel windows) are taken whole."""
        op, label = anchor.op, self._stage_label(anchor.op)
        target = Target.from_string(self.task.target)
        lanes = target.vector_lanes(op.dtype)
        budget = (32 if target.vector_bits >= 512 else 16) * 3 // 4
        extents = [a.extent for a in op.axis]
        n = len(extents)

        def knob_choices(pos):
            return self._by_name[f"{label}/tile/{pos}"].choices
        inner, mid = [1] * n, [1] * n
        if n:
            inner[-1] = _vector_tile(extents[-1], lanes)
            mid[-1] = max(1, min(4, extents[-1] // (2 * inner[-1])))
            rows = next((p for p in range(n - 2, -1, -1) if extents[p] > 1), None)
            if rows is not None:
                # with 16 vector registers, rows two vectors wide take the whole budget and
                # a tail (codegen runs the whole tiles without guards), see _balanced_rows
                tails = (target.vector_bits < 512 and not _window_axes(op)
                         and not _taps_along_rows(op, rows))
                inner[rows], inner[-1] = _register_tile(extents[rows], extents[-1],
                                                        inner[-1], lanes, budget, tails)
                mid[-1] = max(1, min(4, extents[-1] // (2 * inner[-1])))
                mid[rows] = max(1, min(8, extents[rows] // (2 * inner[rows])))
            for p in range(n - 1):
                if p != rows:
                    mid[p] = max(1, min(8, extents[p] // 2))
            if _window_axes(op) and rows is not None:
                # memory-bound window (depthwise, pooling): one tile is a whole plane of
                # the axes before it (channels), which the parallel loop walks
                mid[rows] = max(1, extents[rows] // inner[rows])
                mid[-1] = max(1, extents[-1] // inner[-1])
                for p in range(rows):
                    mid[p] = 1
            streaming = rows is None and n and extents[-1] > 2 * lanes and not _window_axes(op)
            depth = min(2, n)
            if streaming:
                inner[-1], mid[-1] = _streaming_tile(knob_choices(n - 1), extents[-1], lanes,
                                                     budget, _kernel_threads(target))
            else:
                depth = _parallel_depth(extents, mid, inner, 2 * max(2, target.num_cores))
            _tail_free_middles(extents, mid, inner)
            if not streaming and not _window_axes(op):
                _whole_short_axes(extents, mid, inner, rows, depth)
        else:
            streaming, depth = False, 0
        values = {f"{label}/parallel": depth}
        for pos, axis in enumerate(op.axis):
            knob = self._by_name[f"{label}/tile/{pos}"]
            values[knob.name] = _nearest(knob.choices, (mid[pos], inner[pos]))
        # one reduce axis (a GEMM's K): the register tile accumulates all of it when it is at
        # most MAX_WHOLE_REDUCE long, else blocks of about 128, so its accumulators are
        # loaded and stored once per block (blocks of 16: BERT's 128x256x256 linear 64 vs
        # 72 GFLOPS, 1024^3 GEMM 55 vs 69)
        gemm_k = (not streaming and len(op.reduce_axis) == 1 and not _window_axes(op))
        nested = (_nested_reduce_tiles(op) if len(op.reduce_axis) > 1 and not streaming
                  else None)
        for pos, axis in enumerate(op.reduce_axis):
            knob = self._by_name[f"{label}/reduce/{pos}"]
            if gemm_k:
                want = _reduce_block(axis.extent)
            elif nested is not None:
                want = nested[pos]
            else:
                want = 1 if streaming else axis.extent if axis.extent <= 7 else 16
            values[knob.name] = _nearest_scalar(knob.choices, want)
        # packing pays when the copy is amortised over much reuse (a GEMM-sized tile loop):
        # 1024^3 GEMM 0.39x -> 1.08x numpy at 1 thread with both operands packed
        heavy = (n and not streaming and math.prod(extents) >= 4096
                 and math.prod(a.extent for a in op.reduce_axis) >= 64)
        for pack in anchor.packs:
            # with long reduce blocks, each row of the broadcast operand (A) is a sequential
            # stream the prefetcher follows: its strided panel copy costs more than it saves
            # (128x256x256 72 -> 81 GFLOPS, 1024^3 61 -> 69, BERT's batched attention
            # matmuls 15-30% faster unpacked); the vector operand's panel stays packed
            rows_operand = pack.axis_pos != n - 1
            values[pack.knob] = int(bool(heavy) and math.prod(pack.tensor.shape) >= 16384
                                    and not (gemm_k and rows_operand))
        return self._panel_defaults(anchor, values)

    def _panel_defaults(self, anchor: _Anchor, values: dict) -> dict:
        """A matmul_prepacked anchor's vector tile is one weight panel, so its column index
        j // block, j % block folds to the panel and one contiguous run per k. A GEMM keeps
        its register tile's rows (within the register budget at the panel's width); a GEMV
        (no row axis) walks panel | k | the panel's columns, accumulating a whole panel over
        all of K in registers, instead of the k | columns order that streams a row-major
        weight. 1 thread, old default (plain matmul, B packed in the kernel) vs new: BERT's
        128x256->1024 and 128x1024->256 1.1-1.4x. A GEMV's panels pay while the weight is
        cache-resident (MLP's 784->256 in-model 1.4x); streamed from DRAM they ran slower
        (1280->1000 in-model 0.78x at 1 thread), so the graph pass keeps large GEMV weights
        row-major (graph/passes/prepack_weights.py)."""
        op = anchor.op
        panel = _panel_width(op)
        if panel is None:
            return values
        label = self._stage_label(op)
        target = Target.from_string(self.task.target)
        lanes = target.vector_lanes(op.dtype)
        budget = (32 if target.vector_bits >= 512 else 16) * 3 // 4
        extents = [a.extent for a in op.axis]
        out = dict(values)
        vec = self._by_name[f"{label}/tile/{len(extents) - 1}"]
        rows = next((p for p in range(len(extents) - 2, -1, -1) if extents[p] > 1), None)
        mid, inner = values[vec.name]
        if rows is None or inner != panel:
            mid = mid if rows is not None and extents[-1] % (mid * panel) == 0 else 1
            out[vec.name] = _nearest(vec.choices, (mid, panel))
        if rows is None:
            knob = self._by_name[f"{label}/reduce/0"]
            out[knob.name] = op.reduce_axis[0].extent
            return out
        knob = self._by_name[f"{label}/tile/{rows}"]
        mid_r, inner_r = values[knob.name]
        cap = max(1, budget // -(-panel // lanes))
        if inner_r > cap:
            out[knob.name] = _nearest(knob.choices, (mid_r, _rows_tile(extents[rows], cap)))
        return out

    def _axis_extent(self, label: str, pos: int) -> int:
        op = next(a.op for a in self.anchors if self._stage_label(a.op) == label)
        return op.axis[pos].extent

    def sample(self, rng: random.Random) -> dict:
        return {k.name: _json(rng.choice(k.choices)) for k in self.knobs}

    def neighbors(self, config: dict, rng: random.Random, n_mutations: int = 0) -> dict:
        """A mutation of `config`: 1-2 knobs moved one or two steps (or re-drawn)."""
        out = dict(config)
        tunable = [k for k in self.knobs if len(k.choices) > 1] or self.knobs
        for knob in rng.sample(tunable, min(len(tunable), n_mutations or rng.choice((1, 1, 2)))):
            index = knob.index(out.get(knob.name, knob.choices[0]))
            if rng.random() < 0.8:
                index = min(len(knob.choices) - 1, max(0, index + rng.choice((-2, -1, 1, 2))))
            else:
                index = rng.randrange(len(knob.choices))
            out[knob.name] = _json(knob.choices[index])
        return out

    def grid(self):
        """Every config in a fixed order (the grid-search baseline walks it)."""
        for values in itertools.product(*(k.choices for k in self.knobs)):
            yield {k.name: _json(v) for k, v in zip(self.knobs, values)}

    def misfit(self, config: dict) -> str | None:
        """Why `config` (a stored record's, say) does not fit this space, or None if it
        does: an unknown knob, or a value that is not one of a knob's choices."""
        try:
            self.validate(config)
        except ScheduleError as exc:
            return str(exc)
        return None

    def validate(self, config: dict) -> dict:
        unknown = sorted(set(config) - set(self._by_name))
        if unknown:
            raise ScheduleError(f"config for task '{self.task.name}' has unknown knob(s) "
                                f"{unknown}; it was made for another version of the space")
        if self._default is None:           # deterministic per space; most of apply's cost
            self._default = self.default_config()
        full = {k: list(v) if isinstance(v, list) else v for k, v in self._default.items()}
        for name in set(full) - set(config):
            kind = name.split("/")[1]
            if kind in LEGACY:      # a stored config older than the knob keeps its schedule
                full[name] = LEGACY[kind]
        for name, value in config.items():
            self._by_name[name].index(value)
            full[name] = value
        return full

    # ------------------------------------------------------------------ apply

    def apply(self, config: dict) -> tuple[Schedule, list[Tensor]]:
        """Build the schedule `config` describes; raises ScheduleError when it is illegal.
        With packing or row groups on, the DAG is rewritten first; the returned args keep
        the task's order, a rebuilt output tensor in its original position."""
        config = self.validate(config)
        remap, packed, parts = self._rewrite(config)
        new = {t: remap.get(t.op, t.op).output() for t in self.task.args}
        sch = create_schedule([new[t] for t in self.task.outputs])
        groups = self._active_rows(config)
        per_row = {g.out: [] for g in groups}   # group output -> stages computed per row
        deferred = self._schedule_producers(sch, config, remap, groups, per_row)
        for tensor, panel in packed:
            _schedule_elementwise(sch[tensor.op], panel if panel > 1 else 1, 1)
        fused = self._schedule_anchors(sch, config, remap, groups, deferred)
        for op in self.elementwise:
            if op in fused or op in per_row:
                continue
            label = self._stage_label(op)
            _schedule_elementwise(sch[remap.get(op, op)], config[f"{label}/vector"],
                                  config[f"{label}/parallel"])
        for op, m in self.transforms.items():
            lanes = _vector_lanes(self.task.target, op.dtype)
            _schedule_transform(sch[remap.get(op, op)], m, lanes,
                                config[f"{self._stage_label(op)}/transform"])
        for group in groups:
            _schedule_row_group(sch, sch[remap.get(group.out, group.out)],
                                [parts[op] for op in group.members], per_row[group.out],
                                _vector_lanes(self.task.target, group.out.dtype),
                                _row_group_points(group) >= MIN_PARALLEL_POINTS)
        return sch, [new[t] for t in self.task.args]

    def _schedule_producers(self, sch: Schedule, config: dict, remap: dict,
                            groups: list[_RowGroup], per_row: dict) -> dict:
        """Inline, materialise or defer each injective non-output stage by its `inline`
        mode; a stage of an active row group that is not inlined joins `per_row`. Returns
        anchor -> the producers to compute at its tile loop."""
        deferred: dict[ComputeOp, list[Stage]] = {}
        row_of = {op: g.out for g in groups for op in g.stages}
        for op in self.inlined:
            mode = config[f"{self._stage_label(op)}/inline"] if op in self.optional_inline \
                else INLINE
            stage = sch[remap.get(op, op)]
            reader = self._sole_anchor_reader(op) if mode == AT_ANCHOR else None
            if op in row_of and mode != INLINE:
                per_row[row_of[op]].append(stage)
            elif mode == AT_ANCHOR and reader is not None:
                deferred.setdefault(reader, []).append(stage)
            elif mode == ROOT_FLAT:
                lanes = _vector_lanes(self.task.target, op.dtype)
                _schedule_elementwise(stage, min(lanes, op.axis[-1].extent) if op.axis
                                      else 1, 1)
            elif mode in (ROOT_ROWS, AT_ANCHOR):
                _schedule_rows(stage, _vector_lanes(self.task.target, op.dtype))
            else:
                stage.compute_inline()
        return deferred

    def _schedule_anchors(self, sch: Schedule, config: dict, remap: dict,
                          groups: list[_RowGroup], deferred: dict) -> set:
        """Schedule every anchor not in an active row group, and the producers deferred to
        it; returns the joined epilogues it fused (their own knobs are then unused)."""
        fused = set()
        members = {op for g in groups for op in g.members}
        for anchor in self.anchors:
            if anchor.op in members:
                continue
            label = self._stage_label(anchor.op)
            epi = anchor.epilogue
            if anchor.joined and not config[f"{label}/epilogue"]:
                epi = None
            elif anchor.joined:
                fused.add(epi)
            parent, loop = self._apply_anchor(
                sch, _Anchor(remap.get(anchor.op, anchor.op), remap.get(epi, epi) if epi
                             else None, anchor.is_output), config, label)
            for stage in deferred.get(anchor.op, ()):
                lanes = _vector_lanes(self.task.target, stage.op.dtype)
                if loop is None:
                    _schedule_rows(stage, lanes)
                else:
                    stage.compute_at(parent, loop)
                    _vectorize_copy_row(stage, lanes)
        return fused

    def _active_rows(self, config: dict) -> list[_RowGroup]:
        return [g for g in self.row_groups if config[g.knob]]

    def _rewrite(self, config: dict) -> tuple[dict, list[tuple[Tensor, int]], dict]:
        """The DAG with every anchor whose pack knobs are on reading its packed copies, and
        the row reductions of active row groups split (their packing is then off): old op
        -> rebuilt op (only ops that changed; a split reduction -> its final stage), the
        packed tensors with their panel widths, and split reduction -> (partial, final)."""
        remap: dict = {}
        packed: list[tuple[Tensor, int]] = []
        parts: dict = {}
        anchors = {a.op: a for a in self.anchors}
        widths = {op: config[g.knob] * _vector_lanes(self.task.target, op.dtype)
                  for g in self._active_rows(config) for op in g.members}
        for op in self.ops:
            loads = {t: remap[t.op].output() for t in op.input_tensors if t.op in remap}
            if op in widths:
                body = _Reload(loads)(op.body) if loads else op.body
                parts[op] = _row_split(op, body, widths[op])
                remap[op] = parts[op][1].op
                continue
            anchor = anchors.get(op)
            label = self._stage_label(op)
            for pack in (anchor.packs if anchor else ()):
                if not config[pack.knob]:
                    continue
                panel = config[f"{label}/tile/{pack.axis_pos}"][1]
                copy = _packed_copy(pack.tensor, pack.dim, panel)
                packed.append((copy, panel))
                loads[pack.tensor] = (copy, pack.dim, panel)
            if loads:
                body = _Reload(loads)(op.body)
                remap[op] = ComputeOp(op.name, op.shape, op.dtype, axis=op.axis, body=body,
                                      tag=op.tag)
        return remap, packed, parts

    def _sole_anchor_reader(self, op: ComputeOp) -> ComputeOp | None:
        """The anchor that is the only reader of `op` (where it can be computed at), if any."""
        readers = [c for c in self.ops if op in {t.op for t in c.input_tensors}]
        if len(readers) == 1 and any(a.op is readers[0] for a in self.anchors):
            return readers[0]
        return None

    def _apply_anchor(self, sch: Schedule, anchor: _Anchor, config: dict, label: str
                      ) -> tuple[Stage, IterVar | None]:
        """Schedule one anchor; returns the stage and loop its tile is computed in (the
        last outer tile loop, None for a scalar result), where a producer may be computed
        at."""
        tiles = [tuple(config[k.name]) for k in self.knobs if k.name.startswith(label + "/tile/")]
        reduce = [config[k.name] for k in self.knobs if k.name.startswith(label + "/reduce/")]
        flags = {f: config[f"{label}/{f}"]
                 for f in ("local", "parallel", "vectorize", "unroll", "lanes")}
        flags["window"] = config.get(f"{label}/window", 0)
        if flags["local"] and (anchor.is_output or anchor.epilogue is None):
            local = sch.cache_write(anchor.op.output(), "local")
            return sch[anchor.op], _tile_fused(sch[anchor.op], sch[local.op], tiles, reduce,
                                               flags)
        if flags["local"] and anchor.epilogue is not None:
            return sch[anchor.epilogue], _tile_fused(sch[anchor.epilogue], sch[anchor.op],
                                                     tiles, reduce, flags)
        loop = _tile_root(sch[anchor.op], tiles, reduce, flags)
        if anchor.epilogue is not None:
            _schedule_elementwise(sch[anchor.epilogue], tiles[-1][1] if tiles else 1,
                                  flags["parallel"] > 0)
        return sch[anchor.op], loop


class _Reload(ExprMutator):
    """Loads of rebuilt tensors read the new tensor; loads of a packed operand read its
    panel-major copy at [i_dim // p, other indices..., i_dim % p]."""

    def __init__(self, loads: dict):
        super().__init__()
        self.loads = loads

    def visit_TensorLoad(self, node: TensorLoad) -> E.Expr:
        target = self.loads.get(node.tensor)
        indices = tuple(self.visit(i) for i in node.indices)
        if target is None:
            return node if indices == node.indices else TensorLoad(node.dtype, node.tensor,
                                                                   indices)
        if isinstance(target, Tensor):
            return TensorLoad(node.dtype, target, indices)
        copy, dim, panel = target
        index = indices[dim]
        rest = [i for k, i in enumerate(indices) if k != dim]
        return copy(index // panel, *rest, index % panel)


def _packed_copy(tensor: Tensor, dim: int, panel: int) -> Tensor:
    """tensor copied panel-major: [dim // panel, other dims..., dim % panel], the tail panel
    zero-padded (the anchor never reads the padding: its loops stay within the extent)."""
    extent = tensor.shape[dim]
    outer = -(-extent // panel)
    shape = (outer,) + tuple(s for k, s in enumerate(tensor.shape) if k != dim) + (panel,)

    def body(*iv):
        full = iv[0] * panel + iv[-1]
        indices = list(iv[1:-1])
        indices.insert(dim, E.minimum(full, extent - 1) if extent % panel else full)
        value = tensor(*indices)
        if extent % panel == 0:
            return value
        return E.select(full < extent, value, E.const(0, tensor.dtype))

    return compute(shape, body, name=f"{tensor.name}_pack")


def _panel_width(op: ComputeOp) -> int | None:
    """The column-panel width of a matmul_prepacked anchor (the last dim of the weight its
    vector axis indexes), else None."""
    if op.tag != MATMUL_PREPACKED or len(op.axis) < 2:
        return None
    for node in walk(op.body):
        if (isinstance(node, TensorLoad) and node.tensor.ndim == 3
                and op.axis[-1].var in set(walk(node.indices[2]))):
            return node.tensor.shape[2]
    return None


def _json(value):
    return list(value) if isinstance(value, tuple) else value


def _nearest(choices: tuple, want: tuple) -> list:
    best = min(choices, key=lambda c: sum(abs(math.log2(a) - math.log2(b))
                                          for a, b in zip(c, want)))
    return list(best)


def _nearest_scalar(choices: tuple, want: int):
    return min(choices, key=lambda c: (abs(math.log2(max(c, 1)) - math.log2(want)), c))


def _reduce_block(extent: int) -> int:
    """The reduce tile of a GEMM-like anchor: the whole axis up to MAX_WHOLE_REDUCE, else
    the largest divisor in [32, 128] (a guarded tail in the register tile's k loop costs
    more than a shorter block), else 128."""
    if extent <= MAX_WHOLE_REDUCE:
        return extent
    return max((d for d in range(32, 129) if extent % d == 0), default=128)


def _nested_reduce_tiles(op: ComputeOp, steps: int = REDUCE_STEPS) -> list[int]:
    """Inner tiles of several reduce axes (a conv's channels and window, a blocked conv's
    channel blocks, window and in-block channels): taken whole from the innermost axis out
    while the register tile's reduction stays within `steps` multiply-adds, so the weights one
    cache tile reads per visit stay cache-sized whatever the layout splits channels into."""
    tiles = [1] * len(op.reduce_axis)
    budget = steps
    for pos in range(len(op.reduce_axis) - 1, -1, -1):
        extent = op.reduce_axis[pos].extent
        if extent <= budget:
            tiles[pos], budget = extent, budget // extent
        else:
            tiles[pos] = max(1, max((f for f in range(1, budget + 1) if extent % f == 0),
                                    default=1))
            budget = 1
    return tiles


def _vector_tile(extent: int, lanes: int) -> int:
    """Two vectors or one, whichever divides `extent` (a guarded tail in the register tile
    costs more than a narrower tile); a short axis is taken whole. With 16-lane (AVX-512)
    vectors a half vector, still a full 256-bit register, is the fallback when it divides:
    56-wide rows (MobileNetV2, ResNet-18) and 1000 columns are whole 8-lane vectors but
    not whole 16-lane ones."""
    if extent <= 2 * lanes:
        return extent
    widths = (2 * lanes, lanes, lanes // 2) if lanes >= 16 else (2 * lanes, lanes)
    for width in widths:
        if extent % width == 0:
            return width
    return lanes


def _streaming_tile(choices: tuple, extent: int, lanes: int, budget: int, cores: int):
    """(inner, mid) of the vector axis of a GEMV-shaped anchor (no row axis: no reuse of
    the big operand): the loop order becomes k | column block | vector, so every k streams
    one contiguous run of the row B[k, :] per thread into accumulators that stay in L1.
    A run is the widest tail-free one of at most `budget` // 2 vectors; a column block the
    most runs that keep the `cores` threads busy (`_core_balance` at least
    MIN_STREAM_BALANCE) and divide the axis (a guarded tail puts a guard on every lane:
    1000 columns as 3 blocks of 12 runs ran at 0.6x, weights from DRAM, 1 thread): 256
    columns as 2 blocks of 4 runs of 32; 1000 columns (25 runs of 40, 25 = 5 x 5) as 25
    one-run blocks dealt out 13 + 12 on 2 threads, one block on 1 thread. A one-run block
    is `run / lanes` one-vector steps (as one 5-vector tile it ran at 0.3-0.7x). On one
    thread the single block stays the fastest: 25 blocks ran at 0.78x with MobileNetV2's
    classifier (1280 x 1000) streaming from DRAM, which is why `cores` is the kernel's
    thread count (`_kernel_threads`). Old vs new default at 2 threads, weights in L3 (a
    busy machine: libgomp's worker sometimes waits a time slice, ~8 ms, for any parallel
    kernel): 1280 x 1000 1.9x, ResNet-18's 512 x 1000 1.2-2.0x."""
    # a step is one vector, or the tail-free half vector `_vector_tile` falls back to
    step = lanes if extent % lanes == 0 else min(lanes, _vector_tile(extent, lanes))
    run = max((w for w in range(step, lanes * max(1, budget // 2) + 1, step)
               if extent % w == 0), default=step)
    blocks = -(-extent // run)
    mids = sorted({m for m, i in choices if i == run and blocks % m == 0}) or [1]
    mid = max(mids, key=lambda m: (min(_core_balance(blocks // m, cores),
                                       MIN_STREAM_BALANCE), m))
    if mid == 1 and blocks > 1 and run > step and run % step == 0 and \
            (run // step, step) in choices:
        return step, run // step
    return run, mid


def _kernel_threads(target: Target) -> int:
    """Threads the kernel will likely run on: the target's cores, or fewer when
    KILN_NUM_THREADS (the count kernels load with, and compile_model's and apply_best's
    default) asks for fewer. Only the GEMV column split reads it: its single block is the
    fastest on one thread and leaves every other core idle. compile_model(threads=N), the
    tuner and remeasure_best set KILN_NUM_THREADS to their count while they build defaults."""
    return max(1, min(target.num_cores or 1, num_threads_from_env()))


def _core_balance(count: int, cores: int) -> float:
    """Share of the cores' time spent working when a parallel loop of `count` equal
    iterations runs on `cores` threads (1.0: every core gets the same number)."""
    return count / (cores * -(-count // cores))


def _register_tile(rows_extent: int, vec_extent: int, width: int, lanes: int,
                   budget: int, tails: bool = False) -> tuple[int, int]:
    """(rows, vector width) of the accumulator tile: the most accumulators within `budget`
    vector registers, rows dividing the axis (with `tails`, rows two vectors wide are
    `_balanced_rows` instead: measured on AVX2 for GEMMs and blocked convs; 12 x 1-vector
    rows with a tail made an NCHW conv 0.75x); ties keep the wider vector. One vector wide
    can win for short rows when rows must divide: 7 rows x 1 vector beats 2 rows x 2
    vectors on a 14-wide axis (and 7 x 2 vectors would spill: 14 accumulators + operands
    > 16 registers)."""
    widths = [width]
    if width == 2 * lanes or (width > lanes and width % lanes == 0):
        widths.append(lanes)
    best = None
    for w in widths:
        vectors = -(-w // lanes)
        cap = max(1, budget // vectors)
        if tails and w == 2 * lanes:
            rows = _balanced_rows(rows_extent, cap)
        else:
            rows = _rows_tile(rows_extent, cap)
        if rows > cap:                      # _rows_tile may take one more row than asked
            rows = max(d for d in range(1, min(cap, rows_extent) + 1) if rows_extent % d == 0)
        score = rows * vectors
        if best is None or score > best[0]:
            best = (score, rows, w)
    if vec_extent % best[2]:
        return _rows_tile(rows_extent, max(1, budget // -(-width // lanes))), width
    return best[1], best[2]


def _balanced_rows(extent: int, cap: int) -> int:
    """Rows of a register tile that may leave a tail: as few tiles as `cap` rows allow, each
    as short as that count permits (7 rows: 4 + 3, not 6 + 1; 14: 6 + 6 + 2, 5 is not a
    tile choice), a knob choice of the axis. A tail costs little since codegen runs every
    whole tile without guards (codegen/promote.py), and fewer, fuller tiles load the
    shared operand less often. Old vs new default at 1 thread: ResNet-18's blocked 3x3
    convs 1.05x (@56) to 1.53x (256->512/2 @14), 512->512 @7 (4+3 rows x 16 over 7 x 8)
    1.32x; GEMMs 0.98-1.12x (512^3 1.09x, 1024^3 1.00x). Not used where the row axis
    shares an operand index with the innermost taps (NCHW-input convs, the 7x7/2 stem over
    3 channels among them): `_taps_along_rows`."""
    if extent <= cap:
        return extent
    tiles = -(-extent // cap)
    choices = [r for r in _factor_candidates(extent, cap) if -(-extent // r) == tiles]
    return min(choices) if choices else cap


def _rows_tile(extent: int, want: int) -> int:
    """`want` rows, or a nearby divisor of `extent` (down to half of want, or one more) to
    avoid a guarded tail."""
    want = min(want, extent)
    for rows in list(range(want, (want + 1) // 2 - 1, -1)) + [want + 1]:
        if rows >= 1 and extent % rows == 0:
            return rows
    return want


def _outer_iterations(extents, mid, inner, depth: int) -> int:
    return math.prod(-(-extents[p] // (mid[p] * inner[p])) for p in range(depth))


def _parallel_depth(extents, mid, inner, want: int) -> int:
    """How many outer loops the default parallel loop fuses: the first two (shrinking their
    middle tiles to make `want` iterations), or three when two cannot make them (a conv with
    few output-channel blocks), shrinking the third's tile too. Returns the depth."""
    n = len(extents)
    _ensure_parallel_work(extents, mid, inner, min(2, n), want)
    if n < 3 or _outer_iterations(extents, mid, inner, 2) >= want:
        return min(2, n)
    depth = min(MAX_PARALLEL_DEPTH, n)
    _ensure_parallel_work(extents, mid, inner, depth, want)
    return depth


def _ensure_parallel_work(extents, mid, inner, depth: int, want: int) -> None:
    """Shrink middle tiles of the first `depth` axes until their outer loops (fused into the
    parallel loop) have at least `want` iterations, or every middle tile is 1."""
    def outer_iterations():
        return _outer_iterations(extents, mid, inner, depth)
    while outer_iterations() < want:
        candidates = [p for p in range(depth) if mid[p] > 1]
        if not candidates:
            return
        p = max(candidates, key=lambda q: mid[q])
        mid[p] //= 2


def _tail_free_middles(extents, mid, inner) -> None:
    """Round each middle tile down to a divisor of extent / inner: a cache tile that does
    not divide the axis puts its bound guard inside the unrolled register tile (e.g. 3 x 4
    pixels over a 28-wide row), which stops the accumulators living in registers."""
    for p, (extent, m, i) in enumerate(zip(extents, mid, inner)):
        if i and extent % i == 0:
            q = extent // i
            mid[p] = max(d for d in range(1, min(m, q) + 1) if q % d == 0)


def _whole_short_axes(extents, mid, inner, rows, depth: int) -> None:
    """Take each cache-tile axis after the parallel ones (`depth`), other than the register
    tile's rows and the vector axis, whole when it is at most MAX_WHOLE_CACHE_AXIS long:
    its middle tile, half the axis rounded down to a divisor, is one row when the length is
    prime, and a blocked conv's cache tile at 7x7 then re-reads its weights for each of the
    7 output rows. Whole 7-row tiles, old vs new default at 1 thread (medians, two runs):
    ResNet-18's blocked 3x3 512->512 @7 1.06-1.10x, 256->512/2 to 7 1.28-1.33x, the 1x1/2
    to 7 1.0x; 14/28/56-wide layers keep their tiles (7, 7, 8 rows)."""
    for p in range(depth, len(extents) - 1):
        if p != rows and inner[p] == 1 and extents[p] <= MAX_WHOLE_CACHE_AXIS:
            mid[p] = extents[p]


def _taps_along_rows(op: ComputeOp, rows: int) -> bool:
    """Whether the anchor's innermost reduce axis longer than 1 and its register tile's row
    axis index the same dimension of an operand (an NCHW-input conv's x taps along its
    output columns, x[.., s * xx + rx]): the unrolled rows then read overlapping windows
    of that operand, and rows beyond a divisor (`_balanced_rows`) measured slower, not
    faster. Old (6 rows with a tail) vs new (divisor rows) default at 1 thread: ResNet-18's
    7x7/2 stem over 3 NCHW channels 1.00-1.15x (6-row tiles ran at 0.78x the 4-row ones
    in one run; with its x taps outside the register tile, 6 and 4 rows ran alike), its
    NCHW-layout 3x3 convs (conv2d_nchw_kpacked_blocked) 1.9-2.8x at 14-56, 1.07-1.18x at 7.
    A blocked conv's innermost reduce axis is the channel block, indexed on its own."""
    taps = [r for r in op.reduce_axis if r.extent > 1]
    if not taps:
        return False
    row, tap = op.axis[rows].var, taps[-1].var      # (a 1x1 conv's unit taps do not count)
    for node in walk(op.body):
        if isinstance(node, TensorLoad):
            for index in node.indices:
                used = set(walk(index))
                if row in used and tap in used:
                    return True
    return False


def _split3(stage: Stage, axis: IterVar, mid: int, inner: int):
    outer, rest = stage.split(axis, factor=mid * inner)
    middle, innermost = stage.split(rest, factor=inner)
    return outer, middle, innermost


def _is_row_reduction(op: ComputeOp, rows: tuple) -> bool:
    """A reduction of shape `rows` (a group's rows, then 1) over one axis that indexes the
    last, contiguous dimension of something it reads: its partial over lanes of that axis
    is a plain vector loop."""
    body = op.body
    if op.shape != rows or len(op.reduce_axis) != 1 or body.condition is not None:
        return False
    (r,) = op.reduce_axis
    return any(isinstance(n, TensorLoad) and n.indices and n.indices[-1] == r.var
               for n in walk(body.source))


def _row_split(op: ComputeOp, body: E.Reduce, width: int) -> tuple[Tensor, Tensor]:
    """Row reduction `op` (with `body`, its possibly rewritten Reduce) as a partial
    part[rows..., v] = reduce_ro f(ro * width + v), then final[rows..., 0] = reduce_v part:
    the reduction reassociated so the partial vectorises along v. A `width` that does not
    divide the axis reads a clamped index and combines the identity instead."""
    (r,) = body.axis
    extent = r.extent
    outer = reduce_axis(-(-extent // width), f"{r.name}.outer")

    def part_body(*iv):
        index = outer.var * width + iv[-1]
        ragged = extent % width != 0
        mapping = {a.var: v for a, v in zip(op.axis[:-1], iv[:-1])}
        mapping[op.axis[-1].var] = E.const(0, "int32")
        mapping[r.var] = E.minimum(index, extent - 1) if ragged else index
        value = substitute(body.source, mapping)
        if ragged:
            value = E.select(index < extent, value, body.combiner.identity)
        return E.Reduce(op.dtype, body.combiner, value, (outer,), None)

    part = compute(op.shape[:-1] + (width,), part_body, name=f"{op.name}_rf", tag=op.tag)
    lane = reduce_axis(width, f"{r.name}.lane")
    final = compute(op.shape, lambda *iv: E.Reduce(op.dtype, body.combiner,
                                                    part(*iv[:-1], lane.var), (lane,), None),
                    name=op.name, tag=op.tag)
    return part, final


def _row_group_points(group: _RowGroup) -> int:
    """Points a row group visits: its rows times the longest row it reads or writes (the
    rows run in parallel only from MIN_PARALLEL_POINTS on, like elementwise outputs)."""
    width = max([group.out.shape[-1]] + [op.reduce_axis[0].extent for op in group.members])
    return math.prod(group.out.shape[:-1]) * width


def _schedule_row_group(sch: Schedule, out: Stage, parts: list, stages: list[Stage],
                        lanes: int, parallel: bool) -> None:
    """`out` row by row: every axis but the last fused (parallel), the last vectorised;
    each row reduction's vectorised partial and final reduction, and the materialised
    injective stages, computed at that row loop."""
    axes = list(out.op.axis)
    row = out.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
    if parallel:
        out.parallel(row)
    if axes[-1].extent > 1:
        _, vector = out.split(axes[-1], factor=min(lanes, axes[-1].extent))
        out.vectorize(vector)
    for part, final in parts:
        stage = sch[part.op]
        stage.compute_at(out, row)
        stage.reorder(*stage.op.axis[:-1], *stage.op.reduce_axis, stage.op.axis[-1])
        stage.vectorize(stage.op.axis[-1])
        if final.op is not out.op:
            sch[final.op].compute_at(out, row)
    for stage in stages:
        stage.compute_at(out, row)
        last = stage.op.axis[-1]
        if last.extent > 1:
            _, vector = stage.split(last, factor=min(lanes, last.extent))
            stage.vectorize(vector)


def _window_axes(op: ComputeOp) -> bool:
    """A reduction over a small window only (depthwise conv, pooling; at most 7 x 7 taps,
    so a 7x7 conv over 3 channels is not one): the `window` knob may unroll the window and
    move it inside the register tile's rows."""
    extents = [r.extent for r in op.reduce_axis]
    return bool(extents) and max(extents) <= MAX_WINDOW and math.prod(extents) <= MAX_WINDOW ** 2


def _inner_order(reduce_inner: list, spatial_inner: list, flags: dict) -> list:
    """R1 | S2 (window mode 0 and 1) or S2 rows | R1 | vector (mode 2: each tap updates the
    register tile's rows in place, the window reads neighbouring rows while they are hot)."""
    if flags.get("window", 0) == 2 and spatial_inner:
        return spatial_inner[:-1] + reduce_inner + spatial_inner[-1:]
    return reduce_inner + spatial_inner


def _unroll_window(stage: Stage, reduce_inner: list, flags: dict) -> None:
    if flags.get("window", 0):
        for axis in reduce_inner:
            if 1 < axis.extent <= MAX_WINDOW:
                stage.unroll(axis)


def _finish_inner(stage: Stage, inner: list[IterVar], flags: dict) -> None:
    """Vectorise the innermost spatial loop; unroll the rest of a small register tile."""
    if not inner:
        return
    if flags["vectorize"] and inner[-1].extent > 1:
        stage.vectorize(inner[-1])
    rest = inner[:-1] if flags["vectorize"] else inner
    points = math.prod(a.extent for a in inner)
    if flags["unroll"] and points <= MAX_UNROLLED_POINTS * flags["lanes"]:
        for axis in rest:
            if axis.extent > 1:
                stage.unroll(axis)


def _parallel_outer(stage: Stage, outer: list[IterVar], depth: int) -> list[IterVar]:
    """Fuse the first `depth` outer loops into one parallel loop; returns the new outer list."""
    if depth <= 0 or not outer:
        return outer
    depth = min(depth, len(outer))
    fused = stage.fuse(*outer[:depth])
    stage.parallel(fused)
    return [fused] + outer[depth:]


def _tile_root(stage: Stage, tiles, reduce, flags) -> IterVar | None:
    """SSRSRS at root: S0 | R0 | S1 | R1 | S2, innermost spatial vectorised; returns the
    last S0 loop."""
    levels = [_split3(stage, a, mid, inner) for a, (mid, inner) in zip(stage.op.axis, tiles)]
    rsplits = [stage.split(a, factor=f) for a, f in zip(stage.op.reduce_axis, reduce)]
    outer = [lv[0] for lv in levels]
    order = (outer + [r[0] for r in rsplits] + [lv[1] for lv in levels]
             + _inner_order([r[1] for r in rsplits], [lv[2] for lv in levels], flags))
    stage.reorder(*order)
    outer = _parallel_outer(stage, outer, flags["parallel"])
    _finish_inner(stage, [lv[2] for lv in levels], flags)
    _unroll_window(stage, [r[1] for r in rsplits], flags)
    return outer[-1] if outer else None     # a reduction to a scalar has no tile loop


def _tile_fused(out: Stage, local: Stage, tiles, reduce, flags) -> IterVar:
    """The output stage is tiled S0 | S1 | S2; the reduction computes its S1*S2 tile into a
    local buffer at the last S0 loop (returned), itself ordered R0 | S1 | R1 | S2."""
    levels = [_split3(out, a, mid, inner) for a, (mid, inner) in zip(out.op.axis, tiles)]
    outer = [lv[0] for lv in levels]
    out.reorder(*(outer + [lv[1] for lv in levels] + [lv[2] for lv in levels]))
    outer = _parallel_outer(out, outer, flags["parallel"])
    local.compute_at(out, outer[-1])
    if flags["vectorize"] and levels[-1][2].extent > 1:
        out.vectorize(levels[-1][2])
    inner = [local.split(a, factor=inner)
             for a, (_, inner) in zip(local.op.axis, tiles)]
    rsplits = [local.split(a, factor=f) for a, f in zip(local.op.reduce_axis, reduce)]
    local.reorder(*([r[0] for r in rsplits] + [s[0] for s in inner]
                    + _inner_order([r[1] for r in rsplits], [s[1] for s in inner], flags)))
    _finish_inner(local, [s[1] for s in inner], flags)
    _unroll_window(local, [r[1] for r in rsplits], flags)
    return outer[-1]


def _schedule_rows(stage: Stage, lanes: int = 1) -> None:
    """A materialised injective stage (padding) as rows: the outer axes fused into one
    parallel loop, each row a plain loop: its clamped, selected loads do not vectorise (they
    would be lane-by-lane gathers), and there is no div/mod of a flat index per element.
    A row that is a plain copy (the channel block of a blocked-layout pad) is vectorised."""
    axes = list(stage.op.axis)
    if len(axes) >= 2:
        stage.parallel(stage.fuse(*axes[:-1]))
    _vectorize_copy_row(stage, lanes)


def _vectorize_copy_row(stage: Stage, lanes: int) -> None:
    """Vectorise the innermost axis of a pad stage when it is a plain copy axis (only pads:
    stored configs of other materialised stages, layer norm's and softmax's, keep the
    scalar rows they were measured with)."""
    axis = stage.op.axis[-1] if stage.op.axis else None
    if (axis is None or lanes <= 1 or axis.extent < lanes // 2 or stage.op.tag != PAD
            or not _is_copy_axis(stage.op)):
        return
    if axis.extent <= 2 * lanes:
        stage.vectorize(axis)
    else:
        stage.vectorize(stage.split(axis, factor=lanes)[1])


class _HideLastIndex(ExprMutator):
    """Replaces `var` where it is the last index of a load (to see where else it occurs)."""

    def __init__(self, var):
        super().__init__()
        self.var = var

    def visit_TensorLoad(self, node: TensorLoad) -> E.Expr:
        indices = [self.visit(i) for i in node.indices]
        if node.indices and node.indices[-1] == self.var:
            indices[-1] = E.const(0, "int32")
        return TensorLoad(node.dtype, node.tensor, tuple(indices))


def _is_copy_axis(op: ComputeOp) -> bool:
    """True when the innermost axis of `op` only ever indexes the last dimension of the
    tensors it loads (no condition, offset or other index uses it): its lanes are then
    contiguous loads and stores, as for the channel block of a blocked-layout pad; the
    padded W axis of an NCHW pad is not one."""
    var = op.axis[-1].var
    hidden = _HideLastIndex(var).visit(op.body)
    return all(node != var for node in walk(hidden))


def _schedule_transform(stage: Stage, m: int, lanes: int, swapped: int) -> None:
    """A Winograd transform: its transform axes unrolled, so each Select chain over them
    folds to the branch of nonzero terms (and the branches, side by side, share their loads
    and inner sums), the channel block vectorised, the outer loops parallel.
    Input transform V[e1, e2, P, C] (m == 0), C split by v (two vectors when they divide
    and fit in the input's channel block; a vector across two blocks is a gather, which
    with 16-lane vectors made ResNet-18's m = 4 input transforms take 28 s each in LLVM):
        parallel(P, C / v), e1, e2 unrolled, C % v vectorised; swapped: parallel(C / v, P).
    Output y[N, F / b, OH, OW, b] (tile size m), OH and OW split by m:
        parallel(N, F / b, OH / m), OW / m, OH % m, OW % m unrolled, b vectorised;
        swapped: parallel(N, OH / m, OW / m), F / b. A crop tail of OH, OW is guarded."""
    axes = list(stage.op.axis)
    if m == 0:
        e1, e2, tiles, chans = axes
        block = _channel_block(stage.op)
        width = max((w for w in (2 * lanes, lanes, 8, 4, 1) if chans.extent % w == 0
                     and w <= chans.extent and (block is None or block % w == 0)), default=1)
        co, vector = stage.split(chans, factor=width)
        outer = [co, tiles] if swapped else [tiles, co]
        stage.reorder(*outer, e1, e2, vector)
        unrolled, parallel = (e1, e2), outer
    else:
        n, fo, oy, ox, vector = axes
        oyo, oyi = stage.split(oy, factor=m)
        oxo, oxi = stage.split(ox, factor=m)
        outer = [n, oyo, oxo, fo] if swapped else [n, fo, oyo, oxo]
        stage.reorder(*outer, oyi, oxi, vector)
        unrolled, parallel = (oyi, oxi), outer[:3]
    for axis in unrolled:
        stage.unroll(axis)
    if vector.extent > 1:
        stage.vectorize(vector)
    stage.parallel(stage.fuse(*parallel))


def _channel_block(op: ComputeOp) -> int | None:
    """The channel block of a Winograd input transform's blocked input x[N, C/b, H, W, b]
    (the innermost dimension of its 5-d operand), None when it reads no such operand."""
    blocked = [t for t in op.input_tensors if t.ndim == 5]
    return blocked[0].shape[-1] if blocked else None


def _schedule_elementwise(stage: Stage, vector: int, parallel: int) -> None:
    axes = list(stage.op.axis)
    if not axes:
        return
    inner = []
    if vector > 1:
        jo, ji = stage.split(axes[-1], factor=vector)
        axes[-1:] = [jo]
        inner = [ji]
        stage.vectorize(ji)
    if parallel:
        stage.parallel(stage.fuse(*axes))

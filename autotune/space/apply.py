"""Applying a config to a schedule: the rewrites (packed operands, split row reductions)
and the schedule primitives each kind of stage gets (tiles, local accumulators, parallel
and vectorised loops, rows, Winograd transforms). SearchSpace inherits ApplyMixin; the
module-level helpers here know nothing of knobs but the values they are handed."""
from __future__ import annotations

import dataclasses
import math

from ...schedule import create_schedule
from ...schedule.schedule import Schedule, Stage
from ...te import expr as E
from ...te.expr import IterVar
from ...te.ops.tags import PAD
from ...te.tensor import ComputeOp, Tensor, TensorLoad, compute, reduce_axis
from ...te.visit import ExprMutator, substitute, walk
from .stages import Anchor, RowGroup
from .thread_plan import balanced_depth, decide_parallel, planned

MAX_UNROLLED_POINTS = 64  # unrolled register tile larger than this is left rolled
MAX_WINDOW = 7            # reduce axes at most this long are a window (kernel taps)
# ... and up to this long when every reduce axis is a tap (window_axes): a 9x9 depthwise
MAX_TAPS_WINDOW = 9
MIN_PARALLEL_POINTS = 1 << 16  # elementwise outputs smaller than this default to one loop
# outer tile loops an anchor's parallel loop may fuse. A channel-blocked conv's first two are
# batch (1) and output-channel blocks, so with depth 2 only a conv of many blocks ran in
# parallel: MobileNetV2's 32->16 1x1 conv at 112x112 (one block) ran serially at 2 threads,
# and 2-6 blocks left a core idle for part of the kernel. Depth 3 adds the output rows.
# Stored configs keep their meaning (0-2 are unchanged).
MAX_PARALLEL_DEPTH = 3
# modes of the `<stage>/inline` knob of an injective producer of a reduction (e.g. padding);
# 0 and 1 are the original choices, so stored configs keep their meaning
ROOT_FLAT = 0     # materialised at root: every axis fused into one parallel loop
INLINE = 1        # substituted into the consumer
ROOT_ROWS = 2     # materialised at root: outer axes parallel, each row a plain inner loop
AT_ANCHOR = 3     # computed inside the consuming anchor's tile loop, only the part it reads


class ApplyMixin:
    """`apply(config)` and its parts; mixed into SearchSpace, whose analysis (anchors,
    row groups, knobs, target) it reads."""

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
            lanes = self.target.vector_lanes(op.dtype)
            _schedule_transform(sch[remap.get(op, op)], m, lanes,
                                config[f"{self._stage_label(op)}/transform"])
        for group in groups:
            _schedule_row_group(sch, sch[remap.get(group.out, group.out)],
                                [parts[op] for op in group.members], per_row[group.out],
                                self.target.vector_lanes(group.out.dtype),
                                planned(self.threads)
                                or _row_group_points(group) >= MIN_PARALLEL_POINTS)
        # at more than 1 thread, every parallel loop too small to pay for a fork runs
        # serially (row groups are offered one above; the decision is the cost's)
        decide_parallel(sch, self.target, self.threads)
        return sch, [new[t] for t in self.task.args]

    def _schedule_producers(self, sch: Schedule, config: dict, remap: dict,
                            groups: list[RowGroup], per_row: dict) -> dict:
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
                lanes = self.target.vector_lanes(op.dtype)
                _schedule_elementwise(stage, min(lanes, op.axis[-1].extent) if op.axis
                                      else 1, 1)
            elif mode in (ROOT_ROWS, AT_ANCHOR):
                _schedule_rows(stage, self.target.vector_lanes(op.dtype))
            else:
                stage.compute_inline()
        return deferred

    def _schedule_anchors(self, sch: Schedule, config: dict, remap: dict,
                          groups: list[RowGroup], deferred: dict) -> set:
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
                sch, dataclasses.replace(anchor, op=remap.get(anchor.op, anchor.op),
                                         epilogue=remap.get(epi, epi) if epi else None,
                                         packs=(), joined=False), config, label)
            for stage in deferred.get(anchor.op, ()):
                lanes = self.target.vector_lanes(stage.op.dtype)
                if loop is None:
                    _schedule_rows(stage, lanes)
                else:
                    stage.compute_at(parent, loop)
                    _vectorize_copy_row(stage, lanes)
        return fused

    def _active_rows(self, config: dict) -> list[RowGroup]:
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
        widths = {op: config[g.knob] * self.target.vector_lanes(op.dtype)
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

    def _apply_anchor(self, sch: Schedule, anchor: Anchor, config: dict, label: str
                      ) -> tuple[Stage, IterVar | None]:
        """Schedule one anchor; returns the stage and loop its tile is computed in (the
        last outer tile loop, None for a scalar result), where a producer may be computed
        at."""
        tiles = [tuple(config[k.name]) for k in self.knobs if k.name.startswith(label + "/tile/")]
        reduce = [config[k.name] for k in self.knobs if k.name.startswith(label + "/reduce/")]
        flags = {f: config[f"{label}/{f}"]
                 for f in ("local", "parallel", "vectorize", "unroll", "lanes")}
        flags["window"] = config.get(f"{label}/window", 0)
        flags["threads"] = self.threads if planned(self.threads) else 1
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


def _split3(stage: Stage, axis: IterVar, mid: int, inner: int):
    outer, rest = stage.split(axis, factor=mid * inner)
    middle, innermost = stage.split(rest, factor=inner)
    return outer, middle, innermost


def is_row_reduction(op: ComputeOp, rows: tuple) -> bool:
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


def _row_group_points(group: RowGroup) -> int:
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


def window_axes(op: ComputeOp) -> bool:
    """A reduction over a small window only (depthwise conv, pooling; at most 7 x 7 taps,
    so a 7x7 conv over 3 channels is not one): the `window` knob may unroll the window and
    move it inside the register tile's rows. A reduction whose every axis is a tap (no
    channel sum: depthwise convs, pools) is one up to 9 x 9. With the window knob's default,
    1 thread, AVX-512: 9x9 depthwise convs (MixNet, EdgeNeXt) 1.0-1.5x faster (120 channels
    at 16 x 16: 0.081 -> 0.056 ms), InceptionNeXt's 1x9 band 1.6x (0.025 -> 0.016 ms)."""
    extents = [r.extent for r in op.reduce_axis]
    if not extents:
        return False
    if max(extents) <= MAX_WINDOW and math.prod(extents) <= MAX_WINDOW ** 2:
        return True
    return (max(extents) <= MAX_TAPS_WINDOW and math.prod(extents) <= MAX_TAPS_WINDOW ** 2
            and _taps_only(op))


def _taps_only(op: ComputeOp) -> bool:
    """Whether every reduce axis longer than 1 indexes an operand's dimension together with
    a spatial axis (x[.., h * s + kh, ..]: a tap of a window), none on its own (a channel)."""
    spatial = {a.var for a in op.axis}
    taps = set()
    for node in walk(op.body):
        if isinstance(node, TensorLoad):
            for index in node.indices:
                used = set(walk(index))
                if used & spatial:
                    taps |= used
    return all(r.var in taps for r in op.reduce_axis if r.extent > 1)


def _inner_order(reduce_inner: list, spatial_inner: list, flags: dict) -> list:
    """R1 | S2 (window mode 0 and 1) or S2 rows | R1 | vector (mode 2: each tap updates the
    register tile's rows in place, the window reads neighbouring rows while they are hot)."""
    if flags.get("window", 0) == 2 and spatial_inner:
        return spatial_inner[:-1] + reduce_inner + spatial_inner[-1:]
    return reduce_inner + spatial_inner


def _unroll_window(stage: Stage, reduce_inner: list, flags: dict) -> None:
    if flags.get("window", 0):
        for axis in reduce_inner:
            if 1 < axis.extent <= MAX_TAPS_WINDOW:
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


def _parallel_outer(stage: Stage, outer: list[IterVar], depth: int,
                    threads: int = 1) -> list[IterVar]:
    """Fuse the first `depth` outer loops into one parallel loop (more of them when that
    many split unevenly over `threads`, see balanced_depth); returns the new outer list."""
    if depth <= 0 or not outer:
        return outer
    depth = min(depth, len(outer))
    if threads > 1:
        depth = balanced_depth([int(a.extent) for a in outer], depth, threads)
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
    outer = _parallel_outer(stage, outer, flags["parallel"], flags.get("threads", 1))
    _finish_inner(stage, [lv[2] for lv in levels], flags)
    _unroll_window(stage, [r[1] for r in rsplits], flags)
    return outer[-1] if outer else None     # a reduction to a scalar has no tile loop


def _tile_fused(out: Stage, local: Stage, tiles, reduce, flags) -> IterVar:
    """The output stage is tiled S0 | S1 | S2; the reduction computes its S1*S2 tile into a
    local buffer at the last S0 loop (returned), itself ordered R0 | S1 | R1 | S2."""
    levels = [_split3(out, a, mid, inner) for a, (mid, inner) in zip(out.op.axis, tiles)]
    outer = [lv[0] for lv in levels]
    out.reorder(*(outer + [lv[1] for lv in levels] + [lv[2] for lv in levels]))
    outer = _parallel_outer(out, outer, flags["parallel"], flags.get("threads", 1))
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
            or not is_copy_axis(stage.op)):
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


def is_copy_axis(op: ComputeOp) -> bool:
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

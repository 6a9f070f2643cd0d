"""Lowering: a Schedule becomes one PrimFunc of loop IR.

Each stage becomes a loop nest over its leaf axes. Root axes are recovered from leaf axes
through the split/fuse relations; non-divisible splits get guards placed just inside the
deepest loop they depend on (and dropped when the bounds prove them). A stage computed at a
consumer's loop gets a local buffer covering only the region that loop iteration reads
(bound inference in schedule/bound.py). Reductions get an init nest before their first
reduction loop.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..te.errors import KilnError, LoweringError, ScheduleError
from ..te.expr import (Expr, IntImm, IterKind, IterVar, Reduce, Var, all_of, const, maximum,
                       minimum)
from ..te.ops.tags import clamps_reads
from ..te.tensor import PlaceholderOp, Tensor, TensorLoad
from ..te.visit import ExprMutator, apply_combiner, substitute, walk
from .bound import interval, prove_less
from .ir import (Allocate, Buffer, BufferLoad, For, ForKind, IfThenElse, PrimFunc, Scope, Store,
                 seq)
from .schedule import AttachKind, Fuse, InlineLoads, Schedule, Split, Stage
from .simplify import Simplifier
from .passes import LOWER, run_passes

log = logging.getLogger(__name__)

MAX_VECTOR_EXTENT = 64  # wider "vectorized" loops are left to LLVM's loop vectorizer


@dataclass
class _BufferInfo:
    """Where a stage's output lives and the offset of the region it holds (None = origin)."""

    buffer: Buffer
    lo: tuple[Expr, ...] | None = None


@dataclass
class _Nest:
    """Leaf structure of one stage instance: extents and root values in terms of leaf vars."""

    leaves: list[IterVar]
    extents: dict[IterVar, int]
    values: dict[IterVar, Expr]
    guards: list[tuple[Expr, bool]]  # (condition, applies to the init nest too)


def _flatten(indices, shape) -> Expr:
    index = const(0)
    for i, extent in zip(indices, shape):
        index = index * extent + i
    return index


class _Lowerer:
    def __init__(self, sch: Schedule, args: list[Tensor], name: str):
        self.sch = sch
        self.name = name
        self.inline = InlineLoads(sch)
        self.buffers: dict = {}
        self.attached: dict[tuple[Stage, IterVar], list[Stage]] = {}
        self.params = self._make_params(args)

    # ------------------------------------------------------------------ setup
    def _make_params(self, args) -> tuple[Buffer, ...]:
        params = []
        for t in args:
            if not isinstance(t, Tensor):
                raise LoweringError(f"kernel '{self.name}': arguments must be Tensors, got {t!r}")
            stage = self.sch[t]
            if stage.attach is not AttachKind.ROOT:
                raise LoweringError(f"kernel '{self.name}': argument '{t.name}' is "
                                    f"{stage.attach.value} in the schedule; an argument "
                                    "must be computed at root")
            if stage.origin_op in self.buffers:
                raise LoweringError(f"kernel '{self.name}': argument '{t.name}' appears twice")
            buf = Buffer(t.name, t.dtype, t.shape, Scope.PARAM)
            self.buffers[stage.origin_op] = _BufferInfo(buf)
            params.append(buf)
        for out in self.sch.outputs:
            if self.sch[out].origin_op not in self.buffers:
                raise LoweringError(f"kernel '{self.name}': output '{out.name}' is not among "
                                    f"the arguments {[t.name for t in args]}; add it")
        return tuple(params)

    def _check_inputs(self):
        for stage in self.sch.stages:
            if stage.is_placeholder and stage.origin_op not in self.buffers and self._is_read(
                    stage):
                raise LoweringError(f"kernel '{self.name}': input '{stage.name}' is read but "
                                    "is not among the arguments; add it")

    def _is_read(self, stage: Stage) -> bool:
        return any(stage.origin_op in {t.op for t in s.op.input_tensors}
                   for s in self.sch.stages)

    # ------------------------------------------------------------------ driver
    def run(self) -> PrimFunc:
        self._check_inputs()
        for stage in self.sch.stages:
            if stage.attach is AttachKind.AT:
                ivar = _resolve_leaf(stage.attach_stage, stage.attach_ivar)
                if ivar is None:
                    raise ScheduleError(
                        f"stage '{stage.name}' is computed at axis '{stage.attach_ivar.name}' "
                        f"of stage '{stage.attach_stage.name}', which is no longer a loop of "
                        "that stage (it was split or fused later); compute_at a current axis")
                self.attached.setdefault((stage.attach_stage, ivar), []).append(stage)
        roots = [s for s in self.sch.stages
                 if not s.is_placeholder and s.attach is AttachKind.ROOT]
        globals_ = []
        for stage in roots:
            if stage.origin_op not in self.buffers:
                buf = Buffer(stage.name, stage.op.dtype, stage.op.shape, Scope.GLOBAL)
                self.buffers[stage.origin_op] = _BufferInfo(buf)
                globals_.append(buf)
        body = seq(*[self._stage(s, None, {}, False) for s in roots])
        for buf in reversed(globals_):
            body = Allocate(buf, body)
        return PrimFunc(self.name, self.params, body)

    # ------------------------------------------------------------------ one stage
    def _nest(self, stage: Stage, region: list[tuple[Expr, int]] | None) -> _Nest:
        op = stage.op
        extents: dict[IterVar, int] = {}
        for d, axis in enumerate(op.axis):
            extents[axis] = axis.extent if region is None else region[d][1]
        for axis in op.reduce_axis:
            extents[axis] = axis.extent
        for rel in stage.relations:
            if isinstance(rel, Split):
                parent = extents[rel.parent]
                if rel.mode == "factor":
                    inner = max(1, min(rel.value, parent))
                    outer = -(-parent // inner)
                else:
                    outer = max(1, min(rel.value, parent))
                    inner = -(-parent // outer)
                extents[rel.outer], extents[rel.inner] = outer, inner
            else:
                extents[rel.fused] = extents[rel.outer] * extents[rel.inner]
        values: dict[IterVar, Expr] = {v: v.var for v in stage.leaf_iter_vars}
        guards: list[tuple[Expr, bool]] = []
        for rel in reversed(stage.relations):
            if isinstance(rel, Fuse):
                fused = values[rel.fused]
                values[rel.outer] = fused // extents[rel.inner]
                values[rel.inner] = fused % extents[rel.inner]
            else:
                value = values[rel.outer] * extents[rel.inner] + values[rel.inner]
                values[rel.parent] = value
                if extents[rel.outer] * extents[rel.inner] > extents[rel.parent]:
                    guards.append((value < extents[rel.parent],
                                   rel.parent.kind is IterKind.SPATIAL))
        if region is not None:
            for d, axis in enumerate(op.axis):
                lo, ext = region[d]
                if not (isinstance(lo, IntImm) and lo.value + ext <= op.shape[d]):
                    guards.append((lo + values[axis] < op.shape[d], True))
        return _Nest(list(stage.leaf_iter_vars), extents, values, guards)

    def _stage(self, stage: Stage, region, env: dict[Var, tuple[int, int]],
               in_parallel: bool):
        op = stage.op
        nest = self._nest(stage, region)
        leaf_ranges = {v.var: (0, nest.extents[v] - 1) for v in nest.leaves}
        kinds = [stage.iter_kinds.get(v, ForKind.SERIAL) for v in nest.leaves]
        if in_parallel and ForKind.PARALLEL in kinds:
            raise ScheduleError(f"stage '{stage.name}' has a parallel loop but is computed "
                                "inside another parallel loop (parallel inside parallel); "
                                "remove one of the parallel() calls")
        # children first: their regions decide how this stage's reads are indexed
        root_values = self._root_values(stage, nest, region)
        children = self._plan_children(stage, nest, root_values, env)
        info = self.buffers[stage.origin_op]
        out_index = self._out_index(stage, nest, region, info)
        body_expr = self.inline(op.body)
        to_buffers = _ToBuffers(self.buffers, root_values, clamps_reads(op.tag))
        if isinstance(body_expr, Reduce):
            old = BufferLoad(op.dtype, info.buffer, out_index)
            update_value = apply_combiner(body_expr.combiner, old,
                                          to_buffers(body_expr.source))
            update = Store(info.buffer, out_index, update_value)
            if body_expr.condition is not None:
                update = IfThenElse(to_buffers(body_expr.condition), update)
            init = Store(info.buffer, out_index, body_expr.combiner.identity)
        else:
            update, init = Store(info.buffer, out_index, to_buffers(body_expr)), None

        all_ranges = dict(env)
        all_ranges.update(leaf_ranges)
        depth = {v.var: i for i, v in enumerate(nest.leaves)}
        guards = [(c, spatial, self._depth(c, depth)) for c, spatial in nest.guards
                  if not self._proven(c, all_ranges)]
        first_reduce = next((i for i, v in enumerate(nest.leaves)
                             if v.kind is IterKind.REDUCE), None)
        body = update
        for idx in range(len(nest.leaves) - 1, -1, -1):
            body = self._wrap_guards(body, [g for g in guards if g[2] == idx])
            for child, child_region in reversed(children.get(idx, [])):  # first runs first
                child_env = dict(env)
                child_env.update({v.var: leaf_ranges[v.var] for v in nest.leaves[:idx + 1]})
                inner_parallel = in_parallel or ForKind.PARALLEL in kinds[:idx + 1]
                child_stmt = self._stage(child, child_region, child_env, inner_parallel)
                body = Allocate(self.buffers[child.origin_op].buffer, seq(child_stmt, body))
            leaf = nest.leaves[idx]
            body = For(leaf.var, const(0), const(nest.extents[leaf]),
                       self._legal_kind(kinds[idx], nest.extents[leaf]), body)
            if idx == first_reduce:
                body = seq(self._init_nest(nest, kinds, init, guards, idx), body)
        if first_reduce is None and init is not None:
            body = seq(init, body)
        return self._wrap_guards(body, [g for g in guards if g[2] == -1])

    @staticmethod
    def _legal_kind(kind: ForKind, extent: int) -> ForKind:
        if kind is ForKind.VECTORIZED and extent > MAX_VECTOR_EXTENT:
            return ForKind.SERIAL
        return kind

    @staticmethod
    def _depth(cond: Expr, depth: dict[Var, int]) -> int:
        return max((depth[n] for n in walk(cond) if isinstance(n, Var) and n in depth),
                   default=-1)

    @staticmethod
    def _proven(cond: Expr, ranges) -> bool:
        # conditions are all of the form `value < bound`
        return prove_less(cond.a, cond.b.value, ranges) if isinstance(cond.b, IntImm) else False

    @staticmethod
    def _wrap_guards(body, guards):
        if not guards:
            return body
        return IfThenElse(all_of(*[g[0] for g in guards]), body)

    def _init_nest(self, nest: _Nest, kinds, init, guards, first_reduce: int):
        body = init
        for idx in range(len(nest.leaves) - 1, first_reduce, -1):
            leaf = nest.leaves[idx]
            if leaf.kind is IterKind.REDUCE:
                continue
            body = self._wrap_guards(body, [g for g in guards if g[2] == idx and g[1]])
            kind = ForKind.SERIAL if kinds[idx] is ForKind.PARALLEL else kinds[idx]
            body = For(leaf.var, const(0), const(nest.extents[leaf]),
                       self._legal_kind(kind, nest.extents[leaf]), body)
        return body

    def _root_values(self, stage: Stage, nest: _Nest, region) -> dict[Var, Expr]:
        values = {}
        for d, axis in enumerate(stage.op.axis):
            lo = const(0) if region is None else region[d][0]
            values[axis.var] = lo + nest.values[axis]
        for axis in stage.op.reduce_axis:
            values[axis.var] = nest.values[axis]
        return values

    def _out_index(self, stage: Stage, nest: _Nest, region, info: _BufferInfo) -> Expr:
        if info.lo is not None:
            indices = [nest.values[a] for a in stage.op.axis]
        else:
            lo = [const(0)] * len(stage.op.axis) if region is None else [r[0] for r in region]
            indices = [lo_d + nest.values[a] for lo_d, a in zip(lo, stage.op.axis)]
        return _flatten(indices, info.buffer.shape)

    # ------------------------------------------------------------------ bound inference
    def _plan_children(self, stage: Stage, nest: _Nest, root_values, env):
        """Region and buffer of every stage computed at one of this stage's loops.

        A child's region covers the reads of this stage and of the other children computed
        inside the same loop (e.g. a padded input read only by an accumulator tile); those
        readers are resolved first (deeper loops first, consumers before producers)."""
        attached = [(idx, child) for idx, leaf in enumerate(nest.leaves)
                    for child in self.attached.get((stage, leaf), [])]
        reads = [n for n in walk(self.inline(stage.op.body)) if isinstance(n, TensorLoad)]
        regions: dict[Stage, list] = {}
        plan: dict[int, list] = {}
        for idx, child in reversed(attached):
            varying = {v.var: (0, nest.extents[v] - 1) for v in nest.leaves[idx + 1:]}
            accesses = [([substitute(i, root_values) for i in r.indices], varying)
                        for r in reads if r.tensor.op == child.origin_op]
            for q_idx, reader in attached:
                if reader in regions:
                    accesses += self._reader_accesses(child, reader, regions[reader], varying,
                                                      q_idx < idx)
            if not accesses:
                raise LoweringError(f"stage '{child.name}' is computed at stage "
                                    f"'{stage.name}', but neither '{stage.name}' nor a stage "
                                    "computed inside it reads it; compute_at the stage that "
                                    "consumes it")
            region = self._region(child, accesses)
            regions[child] = region
            buf = Buffer(child.name, child.op.dtype, tuple(e for _, e in region), Scope.LOCAL)
            self.buffers[child.origin_op] = _BufferInfo(buf, tuple(lo for lo, _ in region))
            plan.setdefault(idx, []).insert(0, (child, region))
        return plan

    def _reader_accesses(self, child: Stage, reader: Stage, region, varying, outside: bool):
        """Index ranges of `child` read by `reader`, a stage computed over `region`."""
        loads = [n for n in walk(self.inline(reader.op.body))
                 if isinstance(n, TensorLoad) and n.tensor.op == child.origin_op]
        if not loads:
            return []
        if outside:
            raise LoweringError(f"stage '{child.name}' is computed inside a loop that stage "
                                f"'{reader.name}', which reads it, is computed outside of; "
                                f"compute '{child.name}' at the same loop or an outer one")
        ranges = dict(varying)
        mapping: dict[Var, Expr] = {}
        for d, axis in enumerate(reader.op.axis):
            offset = Var("int32", axis.name + ".region")
            ranges[offset] = (0, region[d][1] - 1)
            mapping[axis.var] = region[d][0] + offset
        for axis in reader.op.reduce_axis:
            ranges[axis.var] = (0, axis.extent - 1)
        return [([substitute(i, mapping) for i in load.indices], ranges) for load in loads]

    @staticmethod
    def _region(child: Stage, accesses) -> list[tuple[Expr, int]]:
        """Per dimension (lo, extent) covering every access; the whole dim when unknown."""
        region = []
        for d, extent in enumerate(child.op.shape):
            lo = hi = None
            for indices, ranges in accesses:
                bounds = interval(indices[d], ranges)
                if bounds is None:
                    lo = None
                    break
                lo = bounds[0] if lo is None else _union_lo(lo, bounds[0])
                hi = bounds[1] if hi is None else _union_hi(hi, bounds[1])
                if lo is None or hi is None:
                    break
            size = None if lo is None or hi is None else Simplifier()(hi - lo + 1)
            if not isinstance(size, IntImm) or size.value >= extent or size.value <= 0:
                region.append((const(0), extent))
            else:
                region.append((lo, size.value))
        return region


def _resolve_leaf(stage: Stage, ivar: IterVar) -> IterVar | None:
    """The leaf loop that now carries `ivar`: a fused axis lives on in the fused loop, a split
    one in its inner part (so 'inside loop ivar' keeps its meaning)."""
    for _ in range(len(stage.relations) + 1):
        if ivar in stage.leaf_iter_vars:
            return ivar
        nxt = None
        for rel in stage.relations:
            if isinstance(rel, Fuse) and ivar in (rel.outer, rel.inner):
                nxt = rel.fused
            elif isinstance(rel, Split) and rel.parent == ivar:
                nxt = rel.inner
        if nxt is None:
            return None
        ivar = nxt
    return None


def _union_lo(a: Expr, b: Expr) -> Expr | None:
    diff = Simplifier()(a - b)
    return (b if diff.value > 0 else a) if isinstance(diff, IntImm) else None


def _union_hi(a: Expr, b: Expr) -> Expr | None:
    diff = Simplifier()(a - b)
    return (a if diff.value > 0 else b) if isinstance(diff, IntImm) else None


class _ToBuffers(ExprMutator):
    """Stage body -> loop IR: axis vars become root values, tensor reads become buffer loads."""

    def __init__(self, buffers: dict, root_values: dict[Var, Expr], clamp: bool = False):
        super().__init__()
        self.buffers = buffers
        self.root_values = root_values
        self.clamp = clamp      # clamp read indices into the tensor (tags.CLAMP_READS)

    def visit_Var(self, node: Var) -> Expr:
        return self.root_values.get(node, node)

    def visit_TensorLoad(self, node: TensorLoad) -> Expr:
        indices = [self.visit(i) for i in node.indices]
        if self.clamp:      # (the simplifier drops the bounds the loop ranges already keep)
            indices = [minimum(maximum(i, 0), n - 1)
                       for i, n in zip(indices, node.tensor.shape)]
        info = self.buffers.get(node.tensor.op)
        if info is None:
            raise LoweringError(f"tensor '{node.tensor.name}' is read but has no buffer; "
                                "is it an input missing from the kernel arguments?")
        if info.lo is not None:
            indices = [i - lo for i, lo in zip(indices, info.lo)]
        return BufferLoad(node.dtype, info.buffer, _flatten(indices, info.buffer.shape))


def lower(sch: Schedule, args, name: str = "main", dump: str | None = None) -> PrimFunc:
    """Turn a schedule into a PrimFunc whose parameters are `args`, in order."""
    if not isinstance(sch, Schedule):
        raise LoweringError(f"lower() needs a Schedule (from create_schedule), got {sch!r}")
    try:
        func = _Lowerer(sch, list(args), name).run()
    except KilnError:
        raise
    except RecursionError as e:
        raise LoweringError(f"lowering '{name}' recursed too deep: {e}") from e
    return run_passes(func, LOWER, dump=dump, first="build loop nests")

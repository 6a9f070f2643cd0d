"""Schedules: how to compute a TE DAG (loop order, tiling, vectorization, placement).

A Schedule is a mutable builder over the immutable DAG: primitives validate their arguments,
update the stage's leaf axes and relations, and append a Step. The TE is never modified.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..te.errors import ScheduleError
from ..te.expr import IterKind, IterVar, Var
from ..te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, TensorLoad
from ..te.visit import ExprMutator, substitute
from ..te.workload import topo_ops
from .ir import ForKind


class AttachKind(enum.Enum):
    ROOT = "root"
    INLINE = "inline"
    AT = "compute_at"


@dataclass(frozen=True)
class Split:
    """parent = outer * inner_extent + inner. mode 'factor': inner extent is `value`;
    mode 'nparts': outer extent is `value` (inner extent follows from the parent's extent)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    mode: str
    value: int


@dataclass(frozen=True)
class Fuse:
    """fused = outer * extent(inner) + inner."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True)
class Step:
    """One applied primitive, for printing and for replaying a schedule."""

    stage: str
    primitive: str
    args: tuple

    def __str__(self):
        return f"s[{self.stage}].{self.primitive}({', '.join(map(str, self.args))})"


class Stage:
    """The schedule of one operation: its loop nest and where it is computed."""

    def __init__(self, op: Operation, schedule: "Schedule"):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.relations: list[Split | Fuse] = []
        self.iter_kinds: dict[IterVar, ForKind] = {}
        self.attach = AttachKind.ROOT
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.is_output = False
        self.scope = "global"
        self._reset_leaves()

    def _reset_leaves(self):
        if isinstance(self.op, ComputeOp):
            self.leaf_iter_vars = list(self.op.axis) + list(self.op.reduce_axis)
        else:
            self.leaf_iter_vars = []

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def axis(self) -> tuple[IterVar, ...]:
        return self.op.axis if isinstance(self.op, ComputeOp) else ()

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.op.reduce_axis if isinstance(self.op, ComputeOp) else ()

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    def __repr__(self):
        return f"Stage({self.name}, {self.attach.value})"

    # -- validation helpers
    def _require_compute(self, what: str):
        if self.is_placeholder:
            raise ScheduleError(f"cannot {what} stage '{self.name}': it is a placeholder "
                                "(an input); schedule the computes that read it")

    def _leaf(self, ivar, what: str) -> IterVar:
        self._require_compute(what)
        if not isinstance(ivar, IterVar):
            raise ScheduleError(f"{what} on stage '{self.name}' needs an axis (IterVar), "
                                f"got {ivar!r}")
        if ivar not in self.leaf_iter_vars:
            leaves = ", ".join(v.name for v in self.leaf_iter_vars)
            for rel in self.relations:
                if (isinstance(rel, Split) and rel.parent == ivar) or (
                        isinstance(rel, Fuse) and ivar in (rel.outer, rel.inner)):
                    raise ScheduleError(
                        f"cannot {what} axis '{ivar.name}' of stage '{self.name}': it was "
                        f"already split or fused; use one of its current axes: {leaves}")
            raise ScheduleError(f"cannot {what} axis '{ivar.name}': it is not an axis of "
                                f"stage '{self.name}' (current axes: {leaves})")
        return ivar

    def _record(self, primitive: str, *args):
        self.schedule.steps.append(Step(self.name, primitive, tuple(
            a.name if isinstance(a, IterVar) else a.name if isinstance(a, Stage) else a
            for a in args)))

    # -- loop transformations
    def split(self, parent: IterVar, factor: int | None = None,
              nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """Split `parent` into (outer, inner); non-divisible factors get a guarded tail."""
        self._leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"split() of axis '{parent.name}' in stage '{self.name}' takes "
                                f"factor or nparts, not both or neither "
                                f"(got factor={factor}, nparts={nparts})")
        mode, value = ("factor", factor) if factor is not None else ("nparts", nparts)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"split() of axis '{parent.name}' in stage '{self.name}': "
                                f"{mode} must be a positive int, got {value!r}")
        value = min(value, parent.extent) if parent.extent > 0 else value
        if mode == "factor":
            inner_ext, outer_ext = value, -(-parent.extent // value)
        else:
            outer_ext = value
            inner_ext = -(-parent.extent // value)
        outer = IterVar(Var("int32", parent.name + ".outer"), outer_ext, parent.kind)
        inner = IterVar(Var("int32", parent.name + ".inner"), inner_ext, parent.kind)
        pos = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        self.relations.append(Split(parent, outer, inner, mode, value))
        self._record("split", parent, f"{mode}={value}")
        return outer, inner

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int):
        """Split x and y and order the result (x.outer, y.outer, x.inner, y.inner)."""
        xo, xi = self.split(x, factor=x_factor)
        yo, yi = self.split(y, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def reorder(self, *axes: IterVar) -> None:
        """Put `axes` in this order, in the positions they occupied."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        for a in axes:
            self._leaf(a, "reorder")
        if len(set(axes)) != len(axes):
            raise ScheduleError(f"reorder() on stage '{self.name}' names an axis twice: "
                                f"{[a.name for a in axes]}")
        positions = sorted(self.leaf_iter_vars.index(a) for a in axes)
        for pos, a in zip(positions, axes):
            self.leaf_iter_vars[pos] = a
        self._record("reorder", *axes)

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse adjacent axes (outer first) into one loop."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            raise ScheduleError(f"fuse() on stage '{self.name}' needs at least one axis")
        for a in axes:
            self._leaf(a, "fuse")
        positions = [self.leaf_iter_vars.index(a) for a in axes]
        if positions != list(range(positions[0], positions[0] + len(axes))):
            raise ScheduleError(f"cannot fuse axes {[a.name for a in axes]} of stage "
                                f"'{self.name}': they must be adjacent and in loop order "
                                f"(current order: {[v.name for v in self.leaf_iter_vars]})")
        kinds = {a.kind for a in axes}
        if len(kinds) > 1:
            raise ScheduleError(f"cannot fuse axes {[a.name for a in axes]} of stage "
                                f"'{self.name}': spatial and reduce axes cannot be fused")
        fused = axes[0]
        for inner in axes[1:]:
            new = IterVar(Var("int32", f"{fused.name}.{inner.name}.fused"),
                          fused.extent * inner.extent, fused.kind)
            self.relations.append(Fuse(fused, inner, new))
            fused = new
        self.leaf_iter_vars[positions[0]:positions[-1] + 1] = [fused]
        self._record("fuse", *axes)
        return fused

    def _annotate(self, ivar: IterVar, kind: ForKind, what: str) -> None:
        self._leaf(ivar, what)
        if ivar.kind is IterKind.REDUCE and kind in (ForKind.VECTORIZED, ForKind.PARALLEL):
            spatial = ", ".join(v.name for v in self.leaf_iter_vars
                                if v.kind is IterKind.SPATIAL)
            raise ScheduleError(f"cannot {what} axis '{ivar.name}' of stage '{self.name}': it "
                                f"is a reduction axis. {what.capitalize()} a spatial axis "
                                f"(one of: {spatial}) instead")
        if kind is ForKind.PARALLEL and any(k is ForKind.PARALLEL for v, k in
                                            self.iter_kinds.items() if v is not ivar
                                            and v in self.leaf_iter_vars):
            raise ScheduleError(f"cannot parallel axis '{ivar.name}' of stage '{self.name}': "
                                "another axis of this stage is already parallel (parallel "
                                "inside parallel); fuse the axes and parallel the fused one")
        self.iter_kinds[ivar] = kind
        self._record(what, ivar)

    def vectorize(self, ivar: IterVar) -> None:
        self._annotate(ivar, ForKind.VECTORIZED, "vectorize")

    def parallel(self, ivar: IterVar) -> None:
        self._annotate(ivar, ForKind.PARALLEL, "parallel")

    def unroll(self, ivar: IterVar) -> None:
        self._annotate(ivar, ForKind.UNROLLED, "unroll")

    def pragma(self, ivar: IterVar, name: str) -> None:
        """Hook for loop annotations; 'unroll'/'vectorize'/'parallel' map to the primitives."""
        actions = {"unroll": self.unroll, "vectorize": self.vectorize, "parallel": self.parallel}
        if name not in actions:
            raise ScheduleError(f"unknown pragma {name!r} on stage '{self.name}'; "
                                f"known: {', '.join(actions)}")
        actions[name](ivar)

    # -- placement
    def compute_at(self, parent: "Stage", ivar: IterVar) -> None:
        """Compute this stage inside loop `ivar` of stage `parent`, only the part it needs."""
        self._require_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at of stage '{self.name}' needs a stage (s[T]), "
                                f"got {parent!r}")
        parent._leaf(ivar, "compute_at at")
        if parent is self:
            raise ScheduleError(f"cannot compute stage '{self.name}' at its own axis")
        if self.is_output:
            raise ScheduleError(f"cannot compute_at stage '{self.name}': it is an output of "
                                "the schedule; schedule its loops instead")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.AT, parent, ivar
        self._record("compute_at", parent, ivar)

    def compute_inline(self) -> None:
        """Substitute this elementwise/injective stage into every consumer."""
        self._require_compute("compute_inline")
        if self.reduce_axis:
            raise ScheduleError(f"cannot inline stage '{self.name}': it has a reduction; "
                                "use compute_at instead")
        if self.is_output:
            raise ScheduleError(f"cannot inline stage '{self.name}': it is an output")
        self.attach = AttachKind.INLINE
        self._record("compute_inline")

    def compute_root(self) -> None:
        self._require_compute("compute_root")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.ROOT, None, None
        self._record("compute_root")


def _reads_of(op: Operation) -> set[Operation]:
    return {t.op for t in op.input_tensors}


class Schedule:
    """Stages for every operation needed by `outputs`, in topological order."""

    def __init__(self, outputs):
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        for t in outputs:
            if not isinstance(t, Tensor):
                raise ScheduleError(f"create_schedule needs output Tensors, got {t!r}")
        self.outputs = outputs
        self.steps: list[Step] = []
        self.stages: list[Stage] = []
        self._by_op: dict[Operation, Stage] = {}
        for op in topo_ops(outputs):
            self._add_stage(Stage(op, self))
        for t in outputs:
            self._by_op[t.op].is_output = True

    def _add_stage(self, stage: Stage, index: int | None = None) -> None:
        if index is None:
            self.stages.append(stage)
        else:
            self.stages.insert(index, stage)
        self._by_op[stage.origin_op] = stage
        self._by_op[stage.op] = stage

    def __getitem__(self, key) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._by_op.get(op)
        if stage is None:
            raise ScheduleError(f"'{getattr(op, 'name', op)}' is not part of this schedule "
                                f"(stages: {', '.join(s.name for s in self.stages)})")
        return stage

    def stage_for(self, op: Operation) -> Stage:
        return self[op]

    def consumers_of(self, op: Operation) -> set[Operation]:
        """Origin ops of the stages whose (current) body reads `op`."""
        return {s.origin_op for s in self.stages if op in _reads_of(s.op)}

    def cache_write(self, tensor: Tensor, scope: str = "local") -> Tensor:
        """Compute `tensor` into a new stage (e.g. register accumulators) then copy it out.

        Returns the cache tensor; s[tensor] becomes the copy stage, which keeps the original
        spatial axes, while the cache stage takes over the reduction axes.
        """
        stage = self[tensor]
        stage._require_compute("cache_write")
        if scope not in ("local", "global"):
            raise ScheduleError(f"cache_write scope must be 'local' or 'global', got {scope!r}")
        if stage.relations or stage.iter_kinds or stage.attach is not AttachKind.ROOT:
            raise ScheduleError(f"cache_write of stage '{stage.name}' must come before any "
                                "other primitive on that stage")
        op = stage.op
        new_axis = tuple(IterVar(Var("int32", a.name + ".c"), a.extent, a.kind) for a in op.axis)
        body = substitute(op.body, {a.var: n.var for a, n in zip(op.axis, new_axis)})
        cache_op = ComputeOp(f"{op.name}.{scope}", op.shape, op.dtype, axis=new_axis, body=body,
                             tag=op.tag)
        cache = Tensor(cache_op)
        copy_op = ComputeOp(op.name, op.shape, op.dtype, axis=op.axis,
                            body=cache[tuple(a.var for a in op.axis)], tag="cache_copy")
        cache_stage = Stage(cache_op, self)
        cache_stage.scope = scope
        self._add_stage(cache_stage, self.stages.index(stage))
        stage.op = copy_op
        stage._reset_leaves()
        self._by_op[copy_op] = stage
        self.steps.append(Step(stage.name, "cache_write", (scope,)))
        return cache

    def __str__(self):
        return "\n".join(str(s) for s in self.steps)


def create_schedule(outputs) -> Schedule:
    """A default schedule (every stage at root, loops in axis order) for `outputs`."""
    return Schedule(outputs)


class InlineLoads(ExprMutator):
    """Replace reads of inlined stages by their bodies (recursively)."""

    def __init__(self, schedule: Schedule):
        super().__init__()
        self.schedule = schedule

    def visit_TensorLoad(self, node: TensorLoad):
        indices = self.visit_child(node.indices)
        stage = self.schedule._by_op.get(node.tensor.op)
        if stage is not None and stage.attach is AttachKind.INLINE:
            op = stage.op
            body = substitute(op.body, {a.var: i for a, i in zip(op.axis, indices)})
            return self.visit(body)
        return node if indices is node.indices else TensorLoad(node.dtype, node.tensor, indices)

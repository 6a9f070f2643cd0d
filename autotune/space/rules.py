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
import json
import math
import random
import zlib
from dataclasses import dataclass

from ...codegen.runtime_config import resolve_threads
from ...codegen.target import Target
from ...te.errors import ScheduleError
from ...te.ops.winograd import INPUT_TAG as WINOGRAD_INPUT
from ...te.ops.winograd import winograd_tag_m
from ...te.tensor import ComputeOp, PlaceholderOp, Tensor, TensorLoad
from ...te.visit import walk
from ...te.workload import topo_ops
from ..task import Task
from .stages import Anchor, Pack, RowGroup
# the default heuristics and the application of a config live in their own modules; their
# constants and helpers stay importable from here
from .apply import (AT_ANCHOR, INLINE, MAX_PARALLEL_DEPTH,  # noqa: F401
                    MAX_UNROLLED_POINTS, MAX_WINDOW, MIN_PARALLEL_POINTS, ROOT_FLAT,
                    ROOT_ROWS, ApplyMixin, is_copy_axis, is_row_reduction, window_axes)
from .defaults import (MAX_WHOLE_CACHE_AXIS, MAX_WHOLE_REDUCE,  # noqa: F401
                       MIN_STREAM_BALANCE, REDUCE_STEPS, DefaultsMixin, balanced_rows,
                       factor_candidates, nested_reduce_tiles, taps_along_rows)

MAX_INNER = 16            # inner (register) tile of a non-vector axis
MAX_VECTOR_TILE = 64      # inner tile of the vectorised axis
MAX_MID = 64              # middle (cache) tile
MIN_CACHE_WORK = 64       # output points below which no local accumulator is offered
# value of a knob kind that a stored config made before the knob existed implicitly had
LEGACY = {"pack": 0, "window": 0, "epilogue": 0, "rows": 0}


@dataclass(frozen=True)
class Knob:
    """One decision of the space: `choices` are JSON values, ordered so that neighbours in
    the tuple are similar schedules (mutations step along it)."""

    name: str
    choices: tuple

    def index(self, value) -> int:
        value = freeze(value)
        for i, choice in enumerate(self.choices):
            if freeze(choice) == value:
                return i
        raise ScheduleError(f"config value {value!r} is not a choice of knob '{self.name}' "
                            f"(choices: {list(self.choices)[:8]}...)")


def freeze(value):
    return tuple(value) if isinstance(value, list) else value


def _tile_choices(extent: int, inner_cap: int) -> tuple:
    pairs = []
    for inner in factor_candidates(extent, inner_cap):
        for mid in factor_candidates(max(1, extent // inner), MAX_MID):
            pairs.append((mid, inner))
    return tuple(sorted(pairs, key=lambda p: (p[1], p[0])))


class SearchSpace(DefaultsMixin, ApplyMixin):
    """The rule-generated space of schedules of `task` for its target.

    The target is parsed once (`self.target`); `threads` is the count the kernel will run
    at, which the default config is made for (a GEMV's column split), by default
    KILN_NUM_THREADS, else every core, read once here. Knobs and configs do not depend on
    it; only `default_config()` does."""

    def __init__(self, task: Task, threads: int | None = None, target: Target | None = None):
        self.task = task
        self.target = target if target is not None else Target.from_string(task.target)
        self.threads = resolve_threads(threads or None)
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
        self.anchors: list[Anchor] = []
        epilogues = set()
        for op in self.ops:
            if op.reduce_axis:
                epi, joined = self._epilogue_of(op, consumers, outputs)
                if epi is not None and not joined:
                    epilogues.add(epi)
                self.anchors.append(Anchor(op, epi, op in outputs, joined=joined))
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

    def _row_groups(self, consumers, outputs) -> list[RowGroup]:
        """The outputs that can be computed row by row with their row reductions."""
        groups, taken = [], set()
        for out in self.ops:
            if out in outputs and len(out.shape) >= 2:
                group = self._row_group(out, consumers, outputs)
                if group is not None and not taken & set(group.members):
                    taken |= set(group.members)
                    groups.append(group)
        return groups

    def _row_group(self, out: ComputeOp, consumers, outputs) -> RowGroup | None:
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
                if not is_row_reduction(op, rows) or (op in outputs and op is not out):
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
        return RowGroup(out, tuple(sorted(members, key=order.get)),
                         tuple(sorted(stages, key=order.get)),
                         f"{self._stage_label(out)}/rows")

    def _pack_candidates(self, op: ComputeOp) -> list[Pack]:
        """Placeholder operands whose register-tile panel is not contiguous: one access
        pattern, a spatial axis as a plain index of one dimension (the innermost such axis,
        so the vectorised one when it indexes the operand), and not already a narrow last
        dimension indexed by the vectorised axis (a panel of at most two vectors is
        contiguous enough)."""
        lanes = self.target.vector_lanes(op.dtype)
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
                out.append(Pack(tensor, best[0], best[1],
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
            lanes = self.target.vector_lanes(op.dtype)
            last = len(op.axis) - 1
            for pos, axis in enumerate(op.axis):
                cap = MAX_VECTOR_TILE if pos == last else MAX_INNER
                knobs.append(Knob(f"{label}/tile/{pos}",
                                  _tile_choices(axis.extent, cap)))
            for pos, axis in enumerate(op.reduce_axis):
                # up to 256, and the whole axis (one register tile accumulates all of it)
                choices = sorted(set(factor_candidates(axis.extent, 256)) | {axis.extent})
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
            if window_axes(op):
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
                f for f in factor_candidates(inner, MAX_VECTOR_TILE) if f == 1 or f >= 4)))
            knobs.append(Knob(f"{label}/parallel", (0, 1) if op.axis else (0,)))
        return knobs

    @property
    def size(self) -> int:
        return math.prod(len(k.choices) for k in self.knobs)

    def _axis_extent(self, label: str, pos: int) -> int:
        op = next(a.op for a in self.anchors if self._stage_label(a.op) == label)
        return op.axis[pos].extent

    def sample(self, rng: random.Random) -> dict:
        return {k.name: json_value(rng.choice(k.choices)) for k in self.knobs}

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
            out[knob.name] = json_value(knob.choices[index])
        return out

    def mutations(self, config: dict, n: int, seed: str) -> list[dict]:
        """Up to `n` distinct mutations of `config` (none equal to it), the same list for the
        same `seed` in any process (the zero-shot ranking and the confirmation's labels draw
        the same candidates for a task)."""
        rng = random.Random(zlib.crc32(seed.encode()))
        seen = {json.dumps(config, sort_keys=True)}
        out = []
        for _ in range(4 * n):
            if len(out) >= n:
                break
            mutant = self.neighbors(config, rng)
            key = json.dumps(mutant, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(mutant)
        return out

    def grid(self):
        """Every config in a fixed order (the grid-search baseline walks it)."""
        for values in itertools.product(*(k.choices for k in self.knobs)):
            yield {k.name: json_value(v) for k, v in zip(self.knobs, values)}

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


def json_value(value):
    return list(value) if isinstance(value, tuple) else value

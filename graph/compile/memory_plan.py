"""Static memory planning: place every intermediate (a fused group's output that is not a
graph output) at an offset in one arena, reusing space between buffers whose lifetimes do not
overlap.

Lifetimes are in group steps: a buffer is live from the group that writes it through the last
group that reads it, both inclusive (so a group's inputs and outputs never share bytes).
Placement is greedy by size: the largest buffers are placed first, each at the lowest aligned
offset that does not collide with an already placed buffer whose lifetime overlaps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ...te.errors import InternalError
from ..ir import Graph
from ..passes.fusion import FusedGroup

ALIGNMENT = 64  # one cache line; also enough for AVX-512 aligned loads


@dataclass(frozen=True)
class BufferSlot:
    """`size` bytes at `offset` in the arena, live during group steps [start, end]."""

    name: str
    size: int
    start: int
    end: int
    offset: int

    def lives_with(self, other: "BufferSlot") -> bool:
        return self.start <= other.end and other.start <= self.end

    def overlaps(self, other: "BufferSlot") -> bool:
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


@dataclass(frozen=True)
class MemoryPlan:
    slots: tuple[BufferSlot, ...]
    peak_bytes: int
    alignment: int = ALIGNMENT

    @property
    def naive_bytes(self) -> int:
        """What one separate allocation per buffer would take (for reporting the saving)."""
        return sum(_align(s.size, self.alignment) for s in self.slots)

    def offset_of(self, name: str) -> int:
        for s in self.slots:
            if s.name == name:
                return s.offset
        raise InternalError(f"buffer '{name}' is not in the memory plan; this is a bug in Kiln")


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def plan_buffers(lifetimes: Sequence[tuple[str, int, int, int]],
                 alignment: int = ALIGNMENT) -> MemoryPlan:
    """Place (name, size_bytes, start, end) buffers; see the module docstring."""
    placed: list[BufferSlot] = []
    order = sorted(lifetimes, key=lambda t: (-t[1], t[2], t[0]))
    for name, size, start, end in order:
        if end < start or size < 0:
            raise InternalError(f"buffer '{name}' has lifetime [{start}, {end}] and size {size}")
        probe = BufferSlot(name, size, start, end, 0)
        busy = sorted((s for s in placed if s.lives_with(probe) and s.size > 0),
                      key=lambda s: s.offset)
        offset = 0
        for s in busy:
            if offset + size <= s.offset:
                break
            offset = max(offset, _align(s.offset + s.size, alignment))
        placed.append(BufferSlot(name, size, start, end, offset))
    peak = max((s.offset + s.size for s in placed), default=0)
    slots = tuple(sorted(placed, key=lambda s: (s.start, s.name)))
    return MemoryPlan(slots, _align(peak, alignment) if peak else 0, alignment)


def check_plan(plan: MemoryPlan) -> None:
    """InternalError if two simultaneously live buffers share bytes or an offset is unaligned."""
    slots = plan.slots
    for i, a in enumerate(slots):
        if a.offset % plan.alignment or a.offset + a.size > plan.peak_bytes:
            raise InternalError(f"buffer '{a.name}' at offset {a.offset} (size {a.size}) is "
                                f"unaligned or beyond the arena ({plan.peak_bytes} bytes)")
        for b in slots[i + 1:]:
            if a.size and b.size and a.lives_with(b) and a.overlaps(b):
                raise InternalError(f"buffers '{a.name}' and '{b.name}' are live together but "
                                    f"overlap at offsets {a.offset} and {b.offset}")


def group_lifetimes(graph: Graph, groups: Sequence[FusedGroup]) -> list[tuple[str, int, int, int]]:
    """(name, bytes, producing step, last reading step) of every group-output intermediate."""
    graph_outputs = {v.name for v in graph.outputs}
    start: dict[str, tuple[int, int]] = {}
    end: dict[str, int] = {}
    for step, g in enumerate(groups):
        for v in g.outputs:
            if v.name not in graph_outputs:
                start[v.name] = (step, v.nbytes)
        for v in g.inputs:
            if v.name in start:
                end[v.name] = step
    return [(name, size, s, end.get(name, s)) for name, (s, size) in start.items()]


def plan_memory(graph: Graph, groups: Sequence[FusedGroup],
                alignment: int = ALIGNMENT) -> MemoryPlan:
    """The arena plan for running `groups` (in order) over `graph`; checked before returning."""
    plan = plan_buffers(group_lifetimes(graph, groups), alignment)
    check_plan(plan)
    return plan

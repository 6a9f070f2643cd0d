"""Memory plan: live buffers never overlap, dead ones are reused."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.graph import models
from kiln.graph.onnx.load import load_onnx
from kiln.graph.compile.memory_plan import BufferSlot, MemoryPlan, check_plan, plan_buffers, plan_memory
from kiln.graph.passes import fuse_operators, optimize
from kiln.te.errors import InternalError


def test_chain_reuses_two_slots():
    # a -> b -> c -> d: each buffer dies when the next group has read it
    plan = plan_buffers([("a", 100, 0, 1), ("b", 100, 1, 2), ("c", 100, 2, 3), ("d", 100, 3, 4)])
    offsets = {s.name: s.offset for s in plan.slots}
    assert offsets == {"a": 0, "b": 128, "c": 0, "d": 128}
    assert plan.peak_bytes == 256 and plan.naive_bytes == 512


def test_check_plan_rejects_overlap():
    bad = MemoryPlan((BufferSlot("a", 100, 0, 2, 0), BufferSlot("b", 100, 1, 3, 64)), 192)
    with pytest.raises(InternalError, match="'a' and 'b' are live together"):
        check_plan(bad)


def test_model_plan_is_valid_and_saves_memory():
    graph = optimize(load_onnx(models.resnet18_like(image_size=64, base_width=16)))
    groups = fuse_operators(graph)
    plan = plan_memory(graph, groups)
    assert len(plan.slots) == len(groups) - 1  # every group output but the graph output
    assert plan.peak_bytes < plan.naive_bytes / 2
    biggest = max(v.nbytes for g in groups for v in g.outputs)
    assert plan.peak_bytes >= biggest


lifetimes = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 20), st.integers(0, 6)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(lifetimes)
def test_random_lifetimes_never_overlap(items):
    bufs = [(f"b{k}", size, start, start + length) for k, (size, start, length) in
            enumerate(items)]
    plan = plan_buffers(bufs)
    check_plan(plan)
    assert {(s.name, s.size, s.start, s.end) for s in plan.slots} == set(bufs)
    for s in plan.slots:
        for t in plan.slots:  # independent oracle for the invariant
            if s is not t and s.size and t.size and s.start <= t.end and t.start <= s.end:
                assert s.offset + s.size <= t.offset or t.offset + t.size <= s.offset
    # the peak is at least the largest set of simultaneously live buffers
    for step in range(27):
        live = sum(size for _, size, a, b in bufs if a <= step <= b)
        assert plan.peak_bytes >= live

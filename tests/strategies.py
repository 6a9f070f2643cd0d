"""Hypothesis strategies: random small computes and random legal schedules for them."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kiln import te
from kiln.schedule import create_schedule

dims = st.integers(min_value=1, max_value=19)


@st.composite
def computes(draw):
    """(inputs, output, numpy reference) for one of a few DAG shapes with random extents."""
    kind = draw(st.sampled_from(["elementwise", "matmul_epilogue", "stencil", "rowsum"]))
    m, n, k = draw(dims), draw(dims), draw(dims)
    if kind == "elementwise":
        A = te.placeholder((m, n), name="A")
        B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        C = te.compute((m, n), lambda i, j: te.maximum(B[i, j], 0.5) - A[i, j], name="C")
        return [A], C, lambda a: np.maximum(a * 2 + 1, 0.5) - a
    if kind == "matmul_epilogue":
        A = te.placeholder((m, k), name="A")
        W = te.placeholder((k, n), name="W")
        r = te.reduce_axis((0, k), "r")
        P = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[r, j], axis=r), name="P")
        C = te.compute((m, n), lambda i, j: te.maximum(P[i, j], 0.0), name="C")
        return [A, W], C, lambda a, w: np.maximum(a @ w, 0)
    if kind == "stencil":
        A = te.placeholder((m + 2, n), name="A")
        B = te.compute((m + 2, n), lambda i, j: A[i, j] * 0.5, name="B")
        C = te.compute((m, n), lambda i, j: B[i, j] + B[i + 1, j] + B[i + 2, j], name="C")
        return [A], C, lambda a: (a[:-2] + a[1:-1] + a[2:]) * 0.5
    A = te.placeholder((m, n), name="A")
    r = te.reduce_axis((0, n), "r")
    S = te.compute((m,), lambda i: te.sum(A[i, r] * A[i, r], axis=r), name="S")
    C = te.compute((m, n), lambda i, j: A[i, j] / (S[i] + 1.0), name="C")
    return [A], C, lambda a: a / ((a * a).sum(axis=1, keepdims=True) + 1)


def _schedule_loops(draw, stage, allow_parallel: bool):
    for _ in range(draw(st.integers(0, 3))):
        leaves = stage.leaf_iter_vars
        axis = draw(st.sampled_from(leaves))
        if draw(st.booleans()):
            stage.split(axis, factor=draw(st.integers(1, 9)))
        else:
            stage.split(axis, nparts=draw(st.integers(1, 5)))
    leaves = list(stage.leaf_iter_vars)
    order = draw(st.permutations(leaves))
    stage.reorder(*order)
    leaves = list(stage.leaf_iter_vars)
    if len(leaves) >= 2 and draw(st.booleans()):
        pos = draw(st.integers(0, len(leaves) - 2))
        a, b = leaves[pos], leaves[pos + 1]
        if a.kind == b.kind:
            stage.fuse(a, b)
    leaves = list(stage.leaf_iter_vars)
    spatial = [v for v in leaves if v.kind is te.IterKind.SPATIAL]
    if spatial and draw(st.booleans()):
        stage.vectorize(spatial[-1])
    if allow_parallel and spatial and spatial[0] is not spatial[-1] and draw(st.booleans()):
        stage.parallel(spatial[0])
    small = [v for v in leaves if v.extent <= 8 and v not in stage.iter_kinds]
    if small and draw(st.booleans()):
        stage.unroll(draw(st.sampled_from(small)))


@st.composite
def scheduled(draw):
    """A random compute with a random legal schedule: (schedule, inputs, output, reference)."""
    inputs, out, reference = draw(computes())
    s = create_schedule(out)
    out_stage = s[out]
    producers = [st_ for st_ in s.stages if not st_.is_placeholder and st_ is not out_stage]
    _schedule_loops(draw, out_stage, allow_parallel=True)
    for producer in producers:
        placement = draw(st.sampled_from(["root", "inline", "at"]))
        if placement == "inline" and not producer.reduce_axis:
            producer.compute_inline()
        elif placement == "at":
            producer.compute_at(out_stage, draw(st.sampled_from(out_stage.leaf_iter_vars)))
            _schedule_loops(draw, producer, allow_parallel=False)
        else:
            _schedule_loops(draw, producer, allow_parallel=True)
    return s, inputs, out, reference

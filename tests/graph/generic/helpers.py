"""Shared helpers of the generic-tier tests: run an ONNX model on generic kernels and check
it against onnxruntime."""
from __future__ import annotations

import numpy as np

from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic
from tests.graph.graph_helpers import ort_run


def run_generic(model, feeds: dict, threads: int = 2) -> list[np.ndarray]:
    """`model` planned onto generic kernels (Unsupported if it cannot be) and run once."""
    gm = compile_generic(model, Target.native(), threads)
    return gm.run(feeds)


def assert_generic_matches_ort(model, feeds: dict, rtol=1e-5, atol=1e-5, threads: int = 2):
    """The generic tier's outputs equal onnxruntime's (shape, dtype, values)."""
    ours = run_generic(model, feeds, threads)
    theirs = ort_run(model, feeds)
    assert len(ours) == len(theirs)
    for k, (got, want) in enumerate(zip(ours, theirs)):
        assert got.shape == want.shape, (k, got.shape, want.shape)
        assert got.dtype == want.dtype, (k, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {k}")


def fast_groups(target: Target | None = None, threads: int = 2, calls: list | None = None):
    """A GenericModel's compile_groups as kiln.compile's (fast-tier kernels for the fused
    groups the generic kernels do not cover); `calls` collects the groups' names."""
    from kiln.graph.compile.model import fast_group_kernels
    build = fast_group_kernels(target or Target.native(), threads)

    def counted(graph, groups):
        if calls is not None:
            calls.append([g.name for g in groups])
        return build(graph, groups)
    return counted

"""The fast feature extractor's vectors start bit for bit with the frozen v1 extractor's
(features_v1_reference.py) on hand-written IR and on real lowered float candidates, and their
dot-product block is zero there, so stored v1 vectors of float tasks upgrade to v2 exactly
(features.upgrade_vector) and mix with new ones in the transfer prior."""
import random

import numpy as np
import pytest

from kiln import te
from kiln.autotune.features import V1_LENGTH, V1_VERSION, extract_features, upgrade_vector
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.schedule.ir import (Allocate, Buffer, BufferLoad, For, ForKind, IfThenElse, PrimFunc,
                              Scope, Store, seq)
from kiln.schedule.lower import lower
from kiln.te import expr as E
from kiln.te.errors import KilnError

from .features_v1_reference import extract_features as extract_features_v1


def assert_matches_v1(func, message=""):
    """v2 of a float kernel = v1 followed by zeros, which is what upgrade_vector makes."""
    v1, v2 = extract_features_v1(func), extract_features(func)
    np.testing.assert_array_equal(v2[:V1_LENGTH], v1, err_msg=message)
    np.testing.assert_array_equal(v2[V1_LENGTH:], 0.0, err_msg=message)
    np.testing.assert_array_equal(upgrade_vector(V1_VERSION, v1, ("float32",)), v2)


def _bias_tanh_task(m, k, n):
    """matmul + bias + tanh epilogue: calls, casts-free float math and a fused stage."""
    X = te.placeholder((m, k), name="X")
    W = te.placeholder((k, n), name="W")
    b = te.placeholder((n,), name="b")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(X[i, r] * W[r, j], axis=[r]), name="matmul")
    Y = te.compute(C.shape, lambda i, j: te.tanh(C[i, j] + b[j]) * 0.5, name="act")
    return Task(f"bias_tanh_{m}x{k}x{n}", (Y,), (X, W, b, Y))


TASKS = {
    "matmul_odd": lambda: Task.from_op("matmul", (7, 13, 5)),
    "matmul_64": lambda: Task.from_op("matmul", (64, 64, 64)),
    "conv2d": lambda: Task.from_op("conv2d", (1, 8, 9, 9, 8, 3, 3, 1, 1)),
    "depthwise": lambda: Task.from_op("depthwise_conv2d", (1, 8, 10, 10, 3, 3, 2, 1)),
    "softmax": lambda: Task.from_op("softmax", (5, 33)),
    "pooling": lambda: Task.from_op("pooling", (1, 4, 11, 11, 3, 2)),
    "bias_tanh": lambda: _bias_tanh_task(9, 17, 12),
}


def _candidates(task, n=6, seed=0):
    space = SearchSpace(task)
    rng = random.Random(seed)
    funcs = []
    for config in [space.default_config()] + [space.sample(rng) for _ in range(n)]:
        try:
            sch, args = space.apply(config)
            funcs.append(lower(sch, args, name=task.name))
        except KilnError:
            continue
    return funcs


@pytest.mark.parametrize("name", sorted(TASKS))
def test_lowered_candidates_match_v1(name):
    funcs = _candidates(TASKS[name]())
    assert len(funcs) >= 3, "too few candidates lowered to compare"
    for func in funcs:
        assert_matches_v1(func, f"{name}:\n{func}")


def _buffers():
    A = Buffer("A", "float32", (16, 16), Scope.PARAM)
    C = Buffer("C", "float32", (16, 16), Scope.PARAM)
    L = Buffer("L", "float32", (16,), Scope.LOCAL)
    return A, C, L


def test_guards_locals_shared_subexpressions_and_sibling_nests_match_v1():
    A, C, L = _buffers()
    i, j, n = E.Var("int32", "i"), E.Var("int32", "j"), E.Var("int32", "n")
    load = BufferLoad("float32", A, i * 16 + j)
    # the same load twice (counted once), a select, a cast and a float call
    value = E.select(load > E.const(0.0), load * load + load, te.exp(load))
    inner = For(j, E.const(0), E.const(16), ForKind.VECTORIZED, IfThenElse(
        (i * 16 + j) < n, Store(C, i * 16 + j, value)))
    # two sibling nests over the same loop variable `j` (equal loops, distinct nodes)
    init = For(j, E.const(0), E.const(16), ForKind.UNROLLED, Store(L, j, E.const(0.0)))
    acc = For(j, E.const(0), E.const(16), ForKind.UNROLLED,
              Store(L, j, BufferLoad("float32", L, j) + E.cast(i, "float32")))
    body = For(i, E.const(0), E.const(16), ForKind.PARALLEL,
               Allocate(L, seq(init, acc, inner)))
    func = PrimFunc("mixed", (A, C), body)
    assert_matches_v1(func)


def test_symbolic_extent_and_empty_body_match_v1():
    A, C, _ = _buffers()
    i, n = E.Var("int32", "i"), E.Var("int32", "n")
    loop = For(i, E.const(0), n + 3, ForKind.SERIAL,
               Store(C, i // 2, BufferLoad("float32", A, i % 16) / E.const(2.0)))
    for func in (PrimFunc("symbolic", (A, C), loop), PrimFunc("empty", (A, C), seq())):
        assert_matches_v1(func)

"""Fused elementwise (a*b+c over 16M floats) and row softmax (4096x1024) vs numpy.

Kiln computes a*b+c in one parallel, vectorized pass (numpy makes two passes and a temporary).
Softmax is three fused passes per row: a vectorized running max (the reduction is split into
lane-wise partial maxima, then combined), exp with the running sum, and the scaling; numpy
makes five whole-array passes.

    python benchmarks/elementwise_softmax.py [--repeat 7]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, median_seconds, numpy_threads, print_table  # noqa

import kiln  # noqa: E402
from kiln import te  # noqa: E402


def fma_schedule(n: int, lanes: int):
    A, B, C = (te.placeholder((n,), name=x) for x in "ABC")
    D = te.compute((n,), lambda i: A[i] * B[i] + C[i], name="D")
    s = kiln.create_schedule(D)
    outer, inner = s[D].split(D.op.axis[0], factor=lanes * 4)
    s[D].vectorize(inner)
    s[D].parallel(outer)
    return s, [A, B, C, D]


def softmax_schedule(rows: int, cols: int, lanes: int):
    """Row softmax with lane-wise partial reductions (a hand-written rfactor)."""
    assert cols % lanes == 0, "the benchmark keeps cols a multiple of the vector width"
    X = te.placeholder((rows, cols), name="X")
    ko = te.reduce_axis((0, cols // lanes), "ko")
    partial_max = te.compute((rows, lanes), lambda i, l: te.max(X[i, ko * lanes + l], axis=ko),
                             name="partial_max")
    kl = te.reduce_axis((0, lanes), "kl")
    row_max = te.compute((rows,), lambda i: te.max(partial_max[i, kl], axis=kl), name="row_max")
    E = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - row_max[i]), name="E")
    ko2 = te.reduce_axis((0, cols // lanes), "ko2")
    partial_sum = te.compute((rows, lanes), lambda i, l: te.sum(E[i, ko2 * lanes + l], axis=ko2),
                             name="partial_sum")
    kl2 = te.reduce_axis((0, lanes), "kl2")
    row_sum = te.compute((rows,), lambda i: te.sum(partial_sum[i, kl2], axis=kl2),
                         name="row_sum")
    Y = te.compute((rows, cols), lambda i, j: E[i, j] / row_sum[i], name="Y")
    s = kiln.create_schedule(Y)
    i, j = Y.op.axis
    s[Y].parallel(i)
    jo, ji = s[Y].split(j, factor=lanes)
    s[Y].vectorize(ji)
    for stage in (partial_max, row_max, E, partial_sum, row_sum):
        s[stage].compute_at(s[Y], i)
    for partial in (partial_max, partial_sum):
        pi, pl = s[partial].op.axis
        (pk,) = s[partial].op.reduce_axis
        s[partial].reorder(pi, pk, pl)
        s[partial].vectorize(pl)
    ei, ej = E.op.axis
    s[E].vectorize(s[E].split(ej, factor=lanes)[1])
    return s, [X, Y]


def numpy_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def run(repeat: int) -> dict:
    target = kiln.Target.from_string("native")
    lanes = target.vector_lanes("float32")
    rng = np.random.default_rng(0)
    n, rows, cols = 16 * 1024 * 1024, 4096, 1024
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    d, y = np.empty(n, np.float32), np.empty((rows, cols), np.float32)
    figures, table = {"bench": "elementwise_softmax", "cpu": target.cpu}, []
    for threads in (1, 2):
        with kiln_threads(threads):
            fma = kiln.build(*fma_schedule(n, lanes), target=target, name="fma")
            softmax = kiln.build(*softmax_schedule(rows, cols, lanes), target=target,
                                 name="softmax")
        fma(a, b, c, d)
        np.testing.assert_allclose(d, a * b + c, rtol=1e-5, atol=1e-5)
        softmax(x, y)
        np.testing.assert_allclose(y, numpy_softmax(x), rtol=1e-4, atol=1e-6)
        with numpy_threads(threads):
            for name, kiln_fn, numpy_fn in (
                    ("a*b+c 16M", lambda: fma(a, b, c, d), lambda: a * b + c),
                    ("softmax 4096x1024", lambda: softmax(x, y), lambda: numpy_softmax(x))):
                t_kiln = median_seconds(kiln_fn, repeat=repeat)
                t_numpy = median_seconds(numpy_fn, repeat=repeat)
                table.append([name, threads, t_kiln * 1e3, t_numpy * 1e3, t_numpy / t_kiln])
                key = name.split()[0].replace("*", "").replace("+", "")
                figures[f"{key}_speedup_{threads}t"] = round(t_numpy / t_kiln, 3)
                figures[f"{key}_kiln_ms_{threads}t"] = round(t_kiln * 1e3, 3)
    print(f"Fused elementwise and softmax on {target.cpu} (median of {repeat})")
    print_table(["kernel", "threads", "kiln ms", "numpy ms", "speedup vs numpy"], table)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    emit_json(run(parser.parse_args().repeat))


if __name__ == "__main__":
    main()

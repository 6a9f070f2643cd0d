"""fp32 GEMM with a hand-written schedule vs numpy matmul, at 1 and 2 threads.

Schedule: A and B packed into zero-padded panels (MR rows of A, NR columns of B, NR = two
vector registers), a register tile MR x NR accumulated by cache_write-style compute_at of the
product into the output tile, the k loop unrolled by 4, the tile rows unrolled and columns
vectorized, and the column panels run in parallel.

    python benchmarks/gemm.py [--size 1024] [--repeat 7]
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


def register_tile(target: kiln.Target) -> tuple[int, int]:
    """(MR, NR): rows x columns of the accumulator tile, sized to the vector register file."""
    lanes = target.vector_lanes("float32")
    return (8, 2 * lanes) if lanes >= 16 else (6, 2 * lanes)


def gemm_schedule(m: int, k: int, n: int, target: kiln.Target):
    mr, nr = register_tile(target)
    mt, nt = -(-m // mr), -(-n // nr)
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    Ap = te.compute((mt, k, mr), lambda io, kk, ii: te.select(
        io * mr + ii < m, A[te.minimum(io * mr + ii, m - 1), kk], 0.0), name="Ap")
    Bp = te.compute((nt, k, nr), lambda jo, kk, ji: te.select(
        jo * nr + ji < n, B[kk, te.minimum(jo * nr + ji, n - 1)], 0.0), name="Bp")
    r = te.reduce_axis((0, k), name="k")
    P = te.compute((mt * mr, nt * nr), lambda i, j: te.sum(
        Ap[i // mr, r, i % mr] * Bp[j // nr, r, j % nr], axis=r), name="P")
    C = te.compute((m, n), lambda i, j: P[i, j], name="C")

    s = kiln.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=mr)
    jo, ji = s[C].split(j, factor=nr)
    s[C].reorder(jo, io, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(jo)
    s[P].compute_at(s[C], io)
    pi, pj = s[P].op.axis
    (pk,) = s[P].op.reduce_axis
    ko, ki = s[P].split(pk, factor=4)
    s[P].reorder(ko, ki, pi, pj)
    s[P].unroll(ki)
    s[P].unroll(pi)
    s[P].vectorize(pj)
    for packed in (Ap, Bp):
        outer, kk, inner = packed.op.axis
        s[packed].parallel(outer)
    s[Bp].vectorize(Bp.op.axis[2])
    return s, [A, B, C]


def run(size: int, repeat: int) -> dict:
    target = kiln.Target.from_string("native")
    m = k = n = size
    flops = 2.0 * m * n * k
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    rows, figures = [], {"bench": "gemm", "size": size, "cpu": target.cpu}
    for threads in (1, 2):
        with kiln_threads(threads):
            s, args = gemm_schedule(m, k, n, target)
            kernel = kiln.build(s, args, target=target, name="gemm")
        kernel(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
        t_kiln = median_seconds(lambda: kernel(a, b, c), repeat=repeat)
        with numpy_threads(threads):
            t_numpy = median_seconds(lambda: np.matmul(a, b), repeat=repeat)
        g_kiln, g_numpy = flops / t_kiln / 1e9, flops / t_numpy / 1e9
        rows.append([threads, g_kiln, g_numpy, g_kiln / g_numpy])
        figures[f"kiln_gflops_{threads}t"] = round(g_kiln, 2)
        figures[f"numpy_gflops_{threads}t"] = round(g_numpy, 2)
        figures[f"ratio_{threads}t"] = round(g_kiln / g_numpy, 3)
    compile_s = median_seconds(lambda: kiln.build(*gemm_schedule(m, k, n, target),
                                                  target=target, name="gemm"), repeat=5)
    figures["compile_ms"] = round(compile_s * 1e3, 1)
    print(f"fp32 GEMM {m}x{k}x{n} on {target.cpu} (median of {repeat})")
    print_table(["threads", "kiln GFLOPS", "numpy GFLOPS", "kiln/numpy"], rows)
    print(f"compile time (schedule + lower + LLVM), median of 5: {compile_s * 1e3:.1f} ms")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    emit_json(run(args.size, args.repeat))


if __name__ == "__main__":
    main()

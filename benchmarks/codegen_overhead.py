"""Codegen overheads: compile time of a register-blocked 1024^3 matmul, per-call overhead of
a tiny kernel, fork/join overhead of an empty parallel region. Prints a table, then one JSON
line (the last line) with the figures."""
from __future__ import annotations

import json
import statistics
import time

import numpy as np

from kiln.codegen import Target, build
from kiln.schedule.ir import (Allocate, Buffer, BufferLoad, For, ForKind, PrimFunc, Scope,
                              Store, seq)
from kiln.te import expr as E


def _loop(var, extent, body, kind=ForKind.SERIAL):
    return For(var, E.const(0), E.const(extent), kind, body)


def _load(b, i):
    return BufferLoad(b.dtype, b, i)


def blocked_matmul(M=1024, N=1024, K=1024, ti=4, tj=16, name="matmul"):
    """Parallel over row tiles, a ti x tj register tile (UNROLLED x VECTORIZED) per k step."""
    A = Buffer("A", "float32", (M, K), Scope.PARAM)
    B = Buffer("B", "float32", (K, N), Scope.PARAM)
    C = Buffer("C", "float32", (M, N), Scope.PARAM)
    CL = Buffer("C.local", "float32", (ti, tj), Scope.LOCAL)
    io, jo, k = E.var("i.outer"), E.var("j.outer"), E.var("k")

    def tile(make):
        ii, ji = E.var("i.inner"), E.var("j.inner")
        return _loop(ii, ti, _loop(ji, tj, make(ii, ji), ForKind.VECTORIZED), ForKind.UNROLLED)

    init = tile(lambda ii, ji: Store(CL, ii * tj + ji, E.const(0.0)))
    upd = _loop(k, K, tile(lambda ii, ji: Store(CL, ii * tj + ji, _load(CL, ii * tj + ji)
                                                + _load(A, (io * ti + ii) * K + k)
                                                * _load(B, k * N + jo * tj + ji))))
    out = tile(lambda ii, ji: Store(C, (io * ti + ii) * N + jo * tj + ji,
                                    _load(CL, ii * tj + ji)))
    body = _loop(io, M // ti, _loop(jo, N // tj, Allocate(CL, seq(init, upd, out))),
                 ForKind.PARALLEL)
    return PrimFunc(name, (A, B, C), body)


def tiny_kernel():
    A = Buffer("A", "float32", (4,), Scope.PARAM)
    C = Buffer("C", "float32", (4,), Scope.PARAM)
    i = E.var("i")
    return PrimFunc("tiny", (A, C), _loop(i, 4, Store(C, i, _load(A, i) + 1.0)))


def empty_parallel(threads_extent=64):
    A = Buffer("A", "float32", (1,), Scope.PARAM)
    i = E.var("i")
    # the store never runs (i < 0 is false) but the region is forked and joined
    from kiln.schedule.ir import IfThenElse
    body = IfThenElse(i < 0, Store(A, E.const(0), E.const(1.0)))
    return PrimFunc("empty_par", (A,), _loop(i, threads_extent, body, ForKind.PARALLEL))


def _median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    target = Target.native()
    func = blocked_matmul()
    compile_s = _median_seconds(lambda: build(func, target, fastmath=True), 5)
    gemm = build(func, target, fastmath=True)
    n = 1024
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = np.random.default_rng(1).random((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    gemm(a, b, c)
    err = float(np.abs(c - a @ b).max())
    gemm_s = min(gemm.benchmark((a, b, c), number=1, repeat=3))
    np_s = min(_median_seconds(lambda: a @ b, 1) for _ in range(3))

    tiny = build(tiny_kernel(), target)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    call_s = min(tiny.benchmark((x, y), number=20000, repeat=5))
    raw_s = min(_median_seconds(lambda: [tiny._raw(x.ctypes.data, y.ctypes.data)
                                         for _ in range(20000)], 3) / 20000 for _ in range(1))

    par = build(empty_parallel(), target)
    z = np.zeros(1, np.float32)
    fork_s = min(par.benchmark((z,), number=5000, repeat=5)) - call_s

    rows = [("target", str(target).split(" -mattr")[0]),
            ("compile 1024^3 blocked matmul (median of 5)", f"{compile_s * 1e3:.1f} ms"),
            ("matmul run (threads=%d)" % gemm.num_threads,
             f"{gemm_s * 1e3:.1f} ms = {2 * n ** 3 / gemm_s / 1e9:.1f} GFLOP/s "
             f"(max err {err:.1e})"),
            ("numpy a @ b", f"{np_s * 1e3:.1f} ms"),
            ("per-call overhead, tiny kernel (checked call)", f"{call_s * 1e6:.2f} us"),
            ("per-call, raw ctypes with .ctypes.data", f"{raw_s * 1e6:.2f} us"),
            ("fork/join of an empty parallel region", f"{fork_s * 1e6:.2f} us")]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps({"target": str(target).split(" -mattr")[0], "compile_ms": compile_s * 1e3,
                      "matmul_ms": gemm_s * 1e3, "matmul_gflops": 2 * n ** 3 / gemm_s / 1e9,
                      "numpy_matmul_ms": np_s * 1e3, "call_overhead_us": call_s * 1e6,
                      "raw_ctypes_call_us": raw_s * 1e6, "fork_join_us": fork_s * 1e6,
                      "threads": gemm.num_threads}))


if __name__ == "__main__":
    main()

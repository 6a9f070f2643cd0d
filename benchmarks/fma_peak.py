"""The host's measured fp32 FMA peak, the ceiling every GFLOPS figure here is judged against.

    python benchmarks/fma_peak.py [--repeat 9]

A kernel JIT-compiled through Kiln's own LLVM path runs `chains` independent chains of
vector FMAs (the target's widest float vector) with no loads or stores, so it is limited
only by the FMA units. Run on one thread, then on two OS threads at once (ctypes releases the
GIL). RESULTS.md sets the GEMM's and the models' GFLOPS against this ceiling.
Prints a table and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import threading
import time
from pathlib import Path

import llvmlite.ir as ir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln.codegen import Target  # noqa: E402
from kiln.codegen.intrinsics import llvm_intrinsic  # noqa: E402
from kiln.codegen.jit import compile_module  # noqa: E402

# Zen 3/4 have 2 FMA pipes with a 4-cycle latency: 8 chains keep both busy; 12 leaves slack
CHAINS = 12
ITERATIONS = 1 << 22


def build_fma_loop(target: Target, chains: int = CHAINS):
    """`void fma_loop(i64 n, float* out)`: n rounds of `chains` vector FMAs; writes the sum so
    LLVM cannot drop the work. Returns (module, flops per round)."""
    lanes = target.vector_lanes("float32")
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vec = ir.VectorType(f32, lanes)
    module = ir.Module(name="fma_peak")
    module.triple = target.triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, f32.as_pointer()]),
                     "fma_loop")
    fma = llvm_intrinsic(module, "fma", vec, 3)
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    start = [ir.Constant(vec, [float(1 + i % 5) * 1e-3] * lanes) for i in range(chains)]
    mul = ir.Constant(vec, [0.999999] * lanes)
    add = ir.Constant(vec, [1e-7] * lanes)
    b.branch(loop)
    b.position_at_end(loop)
    counter = b.phi(i64)
    accs = [b.phi(vec) for _ in range(chains)]
    nxt = [b.call(fma, [acc, mul, add]) for acc in accs]
    step = b.add(counter, ir.Constant(i64, 1))
    counter.add_incoming(ir.Constant(i64, 0), entry)
    counter.add_incoming(step, loop)
    for acc, init, new in zip(accs, start, nxt):
        acc.add_incoming(init, entry)
        acc.add_incoming(new, loop)
    b.cbranch(b.icmp_unsigned("<", step, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = nxt[0]
    for value in nxt[1:]:
        total = b.fadd(total, value)
    b.store(b.extract_element(total, ir.Constant(ir.IntType(32), 0)), fn.args[1])
    b.ret_void()
    return module, 2 * lanes * chains


def run_threads(fn, threads: int, iterations: int) -> float:
    """Seconds for `threads` OS threads each running `iterations` rounds at once."""
    outs = [ctypes.c_float() for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def work(k):
        barrier.wait()
        fn(iterations, ctypes.byref(outs[k]))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    target = Target.native()
    module, flops_per_round = build_fma_loop(target)
    compiled = compile_module(module, target)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(ctypes.c_float))(
        compiled.address("fma_loop"))
    rows, figures = [], {"cpu": target.cpu, "lanes": target.vector_lanes("float32"),
                         "chains": CHAINS}
    for threads in (1, 2):
        run_threads(fn, threads, ITERATIONS // 8)                       # warm up, clock up
        times = [run_threads(fn, threads, ITERATIONS) for _ in range(args.repeat)]
        best, median = min(times), statistics.median(times)
        gflops = threads * ITERATIONS * flops_per_round / 1e9
        rows.append([threads, gflops / median, gflops / best])
        figures[f"peak_gflops_{threads}t_median"] = round(gflops / median, 1)
        figures[f"peak_gflops_{threads}t_best"] = round(gflops / best, 1)
    print(f"fp32 FMA peak on {target.cpu} ({figures['lanes']}-lane vectors, {CHAINS} chains, "
          f"median / best of {args.repeat})")
    print_table(["threads", "GFLOPS (median)", "GFLOPS (best)"], rows)
    emit_json(figures)


if __name__ == "__main__":
    main()

"""int8 GEMM kernels alone: matmul_int8x4's default schedule over GEMM shapes (1x1-conv and
BERT shapes), the target's current rules against the rules before the VNNI work of
2026-11-26 (14:45 UTC), in one process.

    python benchmarks/int8_gemm_shapes.py [--shapes 1024x1024x1024,3136x64x256,...]
                                          [--rounds 7]

Each shape M x K -> N is built from TE (no graph, no run() copies): "after" with its weight
in the column panels graph/passes/int8/panels.py would give it (none when no panel divides
N) under today's rules; "before" with the [K4, N] words (packed into panels inside the
kernel, as the default schedule does), the cache tiles of up to 8 register tiles of rows
(autotune/space/int8.py one_row_tile_per_cache_tile off) and vpdpbusd from zero plus a
vpaddd (codegen/emit_expr.py _accumulated_dot off). Both are checked against numpy's
integer product, then timed in turns at 1 thread by the thread's CPU time: a shape's
figure is the median over rounds of each round's best of 3. Prints a table and, last, one
JSON object.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln import codegen  # noqa: E402
from kiln.autotune.space import defaults as space_defaults  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.codegen import emit_expr  # noqa: E402
from kiln.graph.passes.int8.panels import panel_width  # noqa: E402
from kiln.schedule.lower import lower  # noqa: E402
from kiln.te.ops.int8.core import (matmul_int8x4, pack_weight_int8x4,  # noqa: E402
                                   panel_weight_words)
from kiln.te.tensor import placeholder  # noqa: E402

SHAPES = ("1024x1024x1024,3136x64x256,784x128x512,196x256x1024,49x512x2048,12544x16x96,"
          "3136x24x144,784x32x192,196x96x576,49x160x960,128x256x256,128x256x1024,"
          "128x1024x256")


@contextlib.contextmanager
def _before():
    saved = emit_expr._has_vnni, space_defaults.one_row_tile_per_cache_tile
    emit_expr._has_vnni = lambda target: False
    space_defaults.one_row_tile_per_cache_tile = lambda target, op: False
    try:
        yield
    finally:
        emit_expr._has_vnni, space_defaults.one_row_tile_per_cache_tile = saved


def _kernel(m: int, k4: int, n: int, block: int | None):
    a = placeholder((m, k4), "int32", "a")
    b = placeholder((-(-n // block), k4, 1, block) if block else (k4, n), "int32", "b")
    c = matmul_int8x4(a, b, n=n) if block else matmul_int8x4(a, b)
    space = SearchSpace(Task("mm", (c,), (a, b, c), "native"), threads=1)
    sch, args = space.apply(space.default_config())
    return codegen.build(lower(sch, args, name="mm"), target="native", cache_kernel=False)


def _time(fns: dict, rounds: int, number: int) -> dict:
    times = {k: [] for k in fns}
    for r in range(rounds):
        order = list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))
        for name, fn in order:
            best = float("inf")
            for _ in range(3):
                start = time.thread_time()
                for _ in range(number):
                    fn()
                best = min(best, (time.thread_time() - start) / number)
            times[name].append(best)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ["KILN_NUM_THREADS"] = "1"
    rows, out = [], {}
    for spec in args.shapes.split(","):
        m, k, n = (int(v) for v in spec.split("x"))
        k4 = -(-k // 4)
        rng = np.random.default_rng(0)
        a8 = rng.integers(0, 256, (m, 4 * k4)).astype(np.uint8)
        w8 = rng.integers(-128, 128, (4 * k4, n)).astype(np.int8)
        words, want = pack_weight_int8x4(w8, 0), a8.astype(np.int32) @ w8.astype(np.int32)
        block = panel_width(n) if n > 16 else None
        with _before():
            before = _kernel(m, k4, n, None)
        after = _kernel(m, k4, n, block)
        weights = {"before": words, "after": panel_weight_words(words, block) if block
                   else words}
        fns = {}
        for name, f in (("before", before), ("after", after)):
            got = np.empty((m, n), np.int32)
            f(a8.view(np.int32), weights[name], got)
            if not np.array_equal(got, want):
                raise SystemExit(f"{spec}: the {name} kernel is not exact")
            fns[name] = (lambda f=f, w=weights[name], o=got: f(a8.view(np.int32), w, o))
        ops = 2.0 * m * 4 * k4 * n
        med = _time(fns, args.rounds, max(1, int(1e8 / ops)))
        gops = {k: ops / v / 1e9 for k, v in med.items()}
        rows.append([f"{m} x {k} -> {n}", block or "-", gops["before"], gops["after"],
                     med["before"] / med["after"]])
        out[spec] = {"panel": block, "before_gops": round(gops["before"], 1),
                     "after_gops": round(gops["after"], 1),
                     "speedup": round(med["before"] / med["after"], 3)}
    print("matmul_int8x4 default kernels alone, 1 thread, thread CPU time (exact: checked)")
    print_table(["M x K -> N", "panel", "before GOPS", "after GOPS", "after / before"], rows)
    emit_json({"int8_gemm_shapes": out})


if __name__ == "__main__":
    main()

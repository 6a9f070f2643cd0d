"""Same-process A/B of branch int8cnn: 'before' compiles with the branch's changes switched
off (passes "requantized int8 concats", "int8 tables" and "quantized muls as onnxruntime
rounds them" skipped, fusion's pending-epilogue
rule off, reshape's unit-dim direct indexing off: main's flat-index body), 'after' with the
branch as it is; onnxruntime int8 interleaved. 1 thread, thread CPU time.
usage: ab2.py model.onnx [rounds] [repeat]"""
import argparse
import json
import math
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import onnx
import kiln
from kiln.graph import passes
from kiln.graph.passes import fusion
from kiln.te import ops as te_ops
from kiln.te.ops import transform
new_reshape_fn = transform.reshape
from common import emit_json, kiln_threads, median_seconds, ort_session, print_table  # noqa: E402
from architectures import example_feeds  # noqa: E402


def main_reshape(x, newshape, name=None):
    """main's te.ops.reshape (flat index, then floordiv/floormod per input dim)."""
    return new_reshape_fn(x, newshape, name, direct_units=False)


def one(path: str, rounds: int, repeat: int) -> dict:
    m = onnx.load(path)
    feeds = example_feeds(m, 1)
    shapes = {n: a.shape for n, a in feeds.items()}
    full, pending, new_reshape = passes.PIPELINE, fusion._pending_epilogue, te_ops.reshape
    with kiln_threads(1):
        after = kiln.compile(m, db=None, threads=1, input_shapes=shapes)
        passes.PIPELINE = tuple(p for p in full if p[0] not in (
            "int8 tables", "requantized int8 concats", "quantized muls as onnxruntime rounds them"))
        fusion._pending_epilogue = lambda part, node, depth=8: False
        te_ops.reshape = main_reshape
        before = kiln.compile(m, db=None, threads=1, input_shapes=shapes)
        passes.PIPELINE, fusion._pending_epilogue, te_ops.reshape = full, pending, new_reshape
    after.set_num_threads(1)
    before.set_num_threads(1)
    s = ort_session(m, 1)
    rng = np.random.default_rng(5)
    worst = {"after": 0.0, "before": 0.0}
    same = {"after": 0, "before": 0}
    n = 6
    for k in range(n):
        x = feeds if k == 0 else {nm: rng.standard_normal(a.shape).astype(a.dtype)
                                  for nm, a in feeds.items()}
        o = s.run(None, x)[0]
        for key, c in (("after", after), ("before", before)):
            d = float(np.abs(c.run(x)[0] - o).max())
            worst[key] = max(worst[key], d)
            same[key] += int(d == 0)
    t = {"after": [], "before": [], "ort": []}
    cpu = time.thread_time
    for _ in range(rounds):
        t["ort"].append(median_seconds(lambda: s.run(None, feeds), repeat, clock=cpu))
        t["before"].append(median_seconds(lambda: before.run(feeds), repeat, clock=cpu))
        t["after"].append(median_seconds(lambda: after.run(feeds), repeat, clock=cpu))
    med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
    name = os.path.basename(path).split(".")[0]
    return {"model": name, "ort_ms": med["ort"], "before_ms": med["before"],
            "after_ms": med["after"], "before_x": med["before"] / med["ort"],
            "after_x": med["after"] / med["ort"], "same_before": same["before"],
            "same_after": same["after"], "inputs": n, "max_diff_before": worst["before"],
            "max_diff_after": worst["after"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for path in args.models:
        r = one(path, args.rounds, args.repeat)
        rows.append(r)
        print(f"{r['model']}: before {r['before_x']:.2f}x after {r['after_x']:.2f}x", flush=True)
    print_table(["model", "ort int8 ms", "before ms", "after ms", "before / ort", "after / ort",
                 "bit-identical before", "after"],
                [[r["model"], f"{r['ort_ms']:.2f}", f"{r['before_ms']:.2f}",
                  f"{r['after_ms']:.2f}", f"{r['before_x']:.2f}", f"{r['after_x']:.2f}",
                  f"{r['same_before']}/{r['inputs']}", f"{r['same_after']}/{r['inputs']}"]
                 for r in rows])
    geo = {k: math.exp(statistics.fmean(math.log(r[k]) for r in rows))
           for k in ("before_x", "after_x")}
    print(f"geomean: before {geo['before_x']:.3f}x, after {geo['after_x']:.3f}x onnxruntime int8")
    emit_json({"rows": rows, "geomean": geo})


if __name__ == "__main__":
    main()

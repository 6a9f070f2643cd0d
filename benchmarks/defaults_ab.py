"""Same-process A/B of two default-schedule rules on exported models, against onnxruntime.

    python benchmarks/defaults_ab.py MODEL.onnx [MODEL.onnx ...] [--rounds 5] [--repeat 5]
                                     [--old blocks,reduce] [--dynamic-size 32]

Each model is compiled twice with no database (`db=None`, `KILN_CACHE_DIR=off` so both really
compile): "old" with the rules named by --old switched back to what they were before they
were added, "new" as the code stands. The rules (autotune/space/defaults.py):

- `blocks`: a register tile over output-channel blocks x pixels for blocked convs whose
  channel block is one vector (`_block_axis`, `_blocks_rows_tile`); old: pixels only.
- `reduce`: ~1 KB weight runs per reduce visit for convs with few pixels over a big weight
  (`_reduce_steps`); old: 256 multiply-adds per visit.

and four rules added on 2026-11-26 (14:45 UTC) for 16-lane (AVX-512) targets, none of which
an AVX2 target consults:

- `blocks512`: one-vector blocked tiles ranked by loads per multiply-add, at most 4 blocks
  (`_blocks_rows_tile_wide`); old: `_blocks_rows_tile`, the most accumulators first.
- `rows512`: at most 12 rows over overlapping broadcast windows (NCHW-input stems;
  `_max_rows`); old: no cap but the register budget.
- `partial512`: a partial-vector column tile that divides the axis (`_partial_vector_tile`,
  50 -> 10 lanes, 49 -> 7); old: one vector with a guarded tail.
- `stream512`: a GEMV's column run no wider than the widest inner tile (`_stream_run_cap`);
  old: `budget` // 2 vectors, which fell back to one-vector steps over 128-column blocks.

Then, in `--rounds` rounds, onnxruntime, old and new run `--repeat` times each (the order of
old and new alternating by round), 1 thread, timed by the calling thread's CPU time; a
round's figure is the median of its runs. Prints per round, then per model the medians and
the median of per-round ratios (old/ort, new/ort, old/new: > 1 means new is faster), and
last one JSON object.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ["KILN_CACHE_DIR"] = "off"
os.environ.setdefault("KILN_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from architectures import example_feeds  # noqa: E402
from common import emit_json, median_seconds, ort_session  # noqa: E402

import kiln  # noqa: E402
from kiln.autotune.space import defaults as sd  # noqa: E402

OLD_RULES = {
    "blocks": ("_block_axis", lambda op, rows: None),
    "reduce": ("_reduce_steps", lambda op: sd.REDUCE_STEPS),
    "blocks512": ("_blocks_rows_tile_wide", lambda blocks, rows, budget:
                  sd._blocks_rows_tile(blocks, rows, budget)),
    "rows512": ("_max_rows", lambda target, op, rows: None),
    "partial512": ("_partial_vector_tile", lambda extent, lanes: None),
    "stream512": ("_stream_run_cap", lambda choices, lanes, budget: lanes * max(1, budget // 2)),
}


def compile_with(model, rules: list[str]):
    saved = {name: getattr(sd, name) for name, _ in (OLD_RULES[r] for r in rules)}
    try:
        for r in rules:
            name, old = OLD_RULES[r]
            setattr(sd, name, old)
        return kiln.compile(model, db=None)
    finally:
        for name, fn in saved.items():
            setattr(sd, name, fn)


def cpu_median(fn, repeat: int) -> float:
    """Median ms of `repeat` calls by this thread's CPU time, after one warm-up call."""
    return median_seconds(fn, repeat, settle=0.0, clock=time.thread_time) * 1e3


def run_model(path: str, rules: list[str], rounds: int, repeat: int, dynamic: int) -> dict:
    import onnx
    model = onnx.load(path)
    old, new = compile_with(model, rules), compile_with(model, [])
    feeds = example_feeds(model, dynamic)
    inputs = [feeds[i.name] for i in model.graph.input if i.name in feeds]
    session = ort_session(model, 1)
    ref = session.run(None, feeds)[0]
    errs = [float(np.abs(k.run(inputs)[0] - ref).max() / max(np.abs(ref).max(), 1e-30))
            for k in (old, new)]
    rows = []
    for r in range(rounds):
        runs = [("old", lambda: old.run(inputs)), ("new", lambda: new.run(inputs))]
        if r % 2:
            runs.reverse()
        ms = {"ort": cpu_median(lambda: session.run(None, feeds), repeat)}
        ms.update({name: cpu_median(fn, repeat) for name, fn in runs})
        rows.append(ms)
        print(f"  round {r}: ort {ms['ort']:.3f} old {ms['old']:.3f} new {ms['new']:.3f} ms",
              flush=True)

    def med(f):
        return round(statistics.median(f(m) for m in rows), 4)
    out = {"ort_ms": med(lambda m: m["ort"]), "old_ms": med(lambda m: m["old"]),
           "new_ms": med(lambda m: m["new"]), "old_ort": med(lambda m: m["old"] / m["ort"]),
           "new_ort": med(lambda m: m["new"] / m["ort"]),
           "old_new": med(lambda m: m["old"] / m["new"]), "rel_err": max(errs)}
    print(f"{os.path.basename(path)}: ort {out['ort_ms']} old {out['old_ms']} new "
          f"{out['new_ms']} ms | old/ort {out['old_ort']} new/ort {out['new_ort']} old/new "
          f"{out['old_new']} (rel err {max(errs):.1e})", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--old", default="blocks,reduce")
    parser.add_argument("--dynamic-size", type=int, default=32)
    args = parser.parse_args(argv)
    rules = [r for r in args.old.split(",") if r]
    unknown = [r for r in rules if r not in OLD_RULES]
    if unknown:
        parser.error(f"unknown rule(s) {unknown}; known: {sorted(OLD_RULES)}")
    figures = {os.path.basename(p): run_model(p, rules, args.rounds, args.repeat,
                                              args.dynamic_size) for p in args.models}
    emit_json({"bench": "defaults_ab", "clock": "thread_time", "threads": 1, "old": rules,
               "rounds": args.rounds, "repeat": args.repeat, "models": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does a short tune pay? `kiln tune MODEL --time 5m` at 1 thread on unseen models, then the
tuned model against its defaults in an alternating A/B in one process.

    python benchmarks/tune_pays.py [--time 5m] [--models regnety_004 gpt2 convnext_atto]
                                   [--rounds 15] [--exports] [--noise N]

Each model is tuned into a fresh private database (never the committed log: this CPU's
records start empty, so every model is unseen) with a time budget, as `kiln tune MODEL
--time 5m` does at KILN_NUM_THREADS=1 (kiln.tune with time_budget=, the same path). Then the
model is compiled twice in this process, with the tuned database and with none (the
defaults), and the two are timed in alternating rounds (which goes first alternates; each
side the median of a few samples; the calling thread's CPU time, since at one thread the
model runs on it), so both sides of each ratio see the same machine load. The speedup is the
median over rounds of default time / tuned time; the figure is its geomean over the models.
The "verdict" column is the tuner's own whole-model verdict (graph/compile/model_check.py) as
a speedup, for comparison with this independent A/B.
`--exports` adds the ONNX files in /work/exports (public architectures with static shapes).
Prints a table per model and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import emit_json, kiln_threads, print_table, sized_bundled_model  # noqa: E402

import kiln  # noqa: E402
from kiln.autotune.database import Database  # noqa: E402
from kiln.cli import parse_duration  # noqa: E402
from kiln.graph.compile.model import compile_model  # noqa: E402
from kiln.graph.compile.model_check import paired_ratio  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EXPORTS = Path("/work/exports")
SEQ = 64
MODELS = ("regnety_004", "gpt2", "convnext_atto")     # from /work/exports


def load_model(name: str):
    """(ModelProto or path, input_shapes or None) of a bundled model, a fixture or an export."""
    import onnx
    from tests import models_zoo
    sized = sized_bundled_model(name)
    if sized is not None:
        return sized, None
    if name in models_zoo.ARCHITECTURES:
        return models_zoo.ARCHITECTURES[name](), None
    fixture = FIXTURES / f"{name}.onnx.gz"
    if fixture.exists():
        proto = onnx.load_from_string(gzip.open(fixture).read())
        return proto, {v.name: [1, SEQ] for v in proto.graph.input}
    export = EXPORTS / f"{name}.onnx"
    if export.exists():
        listing = EXPORTS / "exports.json"       # the exporter's input shapes, if listed
        shapes = json.loads(listing.read_text()).get(name, {}) if listing.exists() else {}
        given = shapes.get("input")           # {name: shape} for the HF exports
        return str(export), given if isinstance(given, dict) else None
    raise SystemExit(f"unknown model {name!r}: not bundled, not a tests/fixtures file, "
                     f"not in {EXPORTS}")


class _Verdicts(logging.Handler):
    """Collects the whole-model verdicts model_check logs: (choices standing, model time
    with them / on the defaults, kept)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.found: list[tuple[int, float, bool]] = []

    def emit(self, record):
        if record.getMessage().startswith("the model with its") and len(record.args) == 3:
            standing, ratio, verdict = record.args
            self.found.append((standing, ratio, verdict == "kept"))


def one_model(name: str, budget: float, rounds: int, tmp: Path) -> dict:
    model, shapes = load_model(name)
    db = Database(tmp / f"{name}.db")        # private and empty: the model is unseen
    verdicts = _Verdicts()
    checker = logging.getLogger("kiln.graph.compile.model_check")
    checker.addHandler(verdicts)
    checker.setLevel(logging.INFO)
    start = time.perf_counter()
    try:
        reports = kiln.tune(model, db=db, time_budget=budget, input_shapes=shapes)
    finally:
        checker.removeHandler(verdicts)
    tune_s = time.perf_counter() - start
    tuned = kiln.compile(model, db=db, threads=1, input_shapes=shapes)
    default = kiln.compile(model, db=None, threads=1, input_shapes=shapes)
    inputs = default._example_inputs()
    err = max(float(np.max(np.abs(a.astype(np.float64) - b)))
              for a, b in zip(tuned.run(inputs), default.run(inputs)))
    # tuned / default per round; speedup = its inverse
    ratio = paired_ratio(lambda: tuned.run(inputs), lambda: default.run(inputs), rounds,
                         time.thread_time)
    t_default = default.benchmark(inputs, repeat=10)
    timing = [r.timing for r in reports if r.timing]
    trials = sum(t.get("trials", 0) for t in timing)
    wall = sum(t.get("wall_seconds", 0.0) for t in timing)
    parts: dict[str, float] = {}        # seconds of the tuning loop by part, all tasks
    for t in timing:
        for part, seconds in t.get("seconds", {}).items():
            parts[part] = parts.get(part, 0.0) + seconds
    kept = sum(1 for r in reports if r.in_model is not None and r.in_model.kept)
    checked = sum(1 for r in reports if r.in_model is not None)
    steps = tuned.plan.steps
    db.close()
    # the tuner's own whole-model verdict, as a speedup (it should agree with this A/B)
    verdict = 1.0 / verdicts.found[-1][1] if verdicts.found else math.nan
    return {"model": name, "tasks": len(reports), "trials": trials,
            "trials_per_min": 60.0 * trials / wall if wall else 0.0,
            "tune_s": tune_s, "default_ms": t_default * 1e3, "speedup": 1.0 / ratio,
            "verdict_speedup": verdict,
            "tuned_kernels": sum(s.source != "default" for s in steps),
            "kernels": len(steps), "in_model_kept": kept, "in_model_checked": checked,
            "max_abs_diff": err, "tasks_tuned": sum(1 for r in reports if r.trials),
            # each task check's model-time ratio (with the choice / with the default) and
            # whether it stayed; then the whole-model verdict's (against the noise floor)
            "in_model": [[r.in_model.task, round(r.in_model.ratio, 4), r.in_model.kept]
                         for r in reports if r.in_model is not None],
            "verdicts": [[n, round(v, 4), k] for n, v, k in verdicts.found],
            "seconds_per_trial": {k: round(v / max(1, trials), 3) for k, v in parts.items()}}


def noise_floor(name: str, rounds: int, repeats: int) -> dict:
    """The A/B's own noise: the default-compiled model against a second compile of itself
    (the same kernels), timed as one_model times tuned against default, `repeats` times,
    each time a new pair of compiles: a compiled model's speed carries an offset of a few
    percent from where its memory landed (graph/compile/model_check.py), which timing one
    pair again and again does not see, and one_model's A/B is one such pair."""
    model, shapes = load_model(name)
    # a first compile builds the kernels cold; the two compared load them from the kernel
    # cache, as the tuned and the default model in one_model do (a cold-built model read
    # 1.28-1.30x the time of a cache-loaded one of the same kernels here: RESULTS.md)
    kiln.compile(model, db=None, threads=1, input_shapes=shapes)
    ratios = []
    for _ in range(repeats):
        # (compiled anew each time, not from the model cache, as one_model's two are)
        a = compile_model(model, db=None, threads=1, input_shapes=shapes, cache_model=False)
        b = compile_model(model, db=None, threads=1, input_shapes=shapes, cache_model=False)
        inputs = a._example_inputs()
        ratios.append(1.0 / paired_ratio(lambda: a.run(inputs), lambda: b.run(inputs), rounds,
                                         time.thread_time))
    return {"model": name, "aa_speedups": ratios}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=parse_duration, default=300.0,
                        help="tuning time per model, e.g. 90s, 5m (default 5m)")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--exports", action="store_true",
                        help=f"add every {EXPORTS}/*.onnx to --models")
    parser.add_argument("--rounds", type=int, default=15,
                        help="alternating rounds of the tuned and the default model")
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument("--noise", type=int, metavar="N", default=0,
                        help="no tuning: time each model's default compile against a second "
                             "compile of itself N times (the A/B's noise floor)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    names = list(args.models)
    if args.exports:
        names += sorted(p.stem for p in EXPORTS.glob("*.onnx"))
    results = []
    if args.noise:
        with tempfile.TemporaryDirectory(prefix="kiln-tune-pays-") as tmp, kiln_threads(1):
            os.environ.setdefault("KILN_CACHE_DIR", str(Path(tmp) / "cache"))
            results = [noise_floor(name, args.rounds, args.noise) for name in names]
        print_table(["model", "A/A speedups (same kernels)"],
                    [[r["model"], " ".join(f"{v:.3f}" for v in r["aa_speedups"])]
                     for r in results])
        emit_json({"bench": "tune_pays", "mode": "noise", "rounds": args.rounds,
                   "models": [{"model": r["model"], "aa_speedups": [round(v, 4) for v in
                                                                   r["aa_speedups"]]}
                              for r in results]})
        return 0
    with tempfile.TemporaryDirectory(prefix="kiln-tune-pays-") as tmp, kiln_threads(1):
        os.environ.setdefault("KILN_CACHE_DIR", str(Path(tmp) / "cache"))
        for name in names:
            r = one_model(name, args.time, args.rounds, Path(tmp))
            results.append(r)
            print(f"{name}: {r['trials']} trials in {r['tune_s']:.0f} s, "
                  f"speedup {r['speedup']:.3f}x", flush=True)
    rows = [[r["model"], r["tasks"], r["trials"], f"{r['trials_per_min']:.1f}",
             f"{r['tune_s']:.0f}", f"{r['default_ms']:.2f}",
             f"{r['tuned_kernels']}/{r['kernels']}",
             f"{r['in_model_kept']}/{r['in_model_checked']}", f"{r['speedup']:.3f}",
             f"{r['verdict_speedup']:.3f}", f"{r['max_abs_diff']:.1e}"] for r in results]
    print_table(["model", "tasks", "trials", "trials/min", "tune s", "default ms",
                 "tuned kernels", "in-model kept", "speedup", "verdict", "max diff"], rows)
    geomean = math.exp(sum(math.log(r["speedup"]) for r in results) / len(results))
    print(f"geomean speedup over the defaults: {geomean:.3f}x (target >= 1.05)")
    emit_json({"bench": "tune_pays", "label": args.label, "time_budget_s": args.time,
               "threads": 1, "rounds": args.rounds, "geomean_speedup": round(geomean, 4),
               "models": [{k: (round(v, 4) if isinstance(v, float) else v)
                           for k, v in r.items()} for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())

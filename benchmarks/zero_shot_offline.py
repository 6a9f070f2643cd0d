"""Does the zero-shot cost model transfer? Leave one model out, on stored measurements only.

    python benchmarks/zero_shot_offline.py [--db tuning_logs/kiln.db] [--threads 1]
                                           [--absolute]

benchmarks/zero_shot.py compiles and times whole models, which takes minutes and moves with
the machine's load. This asks the question underneath it in seconds, with no timing at all:
for each bundled benchmark model M, the zero-shot model is trained exactly as a compile trains
it (autotune/zero_shot.py) on this CPU's vector ISA with every task of M left out, and then
ranks the candidates already measured for each of M's tasks (at --threads, on this CPU's
target) whose current default schedule is among them. The pick's measured time is compared
with the default's: speedup > 1 means the model's pick ran faster than the default did.
"oracle" is the fastest measured candidate, the most any ranking of that pool could gain.
`--absolute` trains and ranks on the features alone (the layout before the difference from
the default was added), for comparison. Prints a table and, last, one JSON line.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln.autotune import zero_shot as Z  # noqa: E402
from kiln.autotune.database import Database, config_key  # noqa: E402
from kiln.autotune.dispatch import canonical_target  # noqa: E402
from kiln.autotune.features import FEATURE_VERSION  # noqa: E402
from kiln.autotune.space import SearchSpace  # noqa: E402
from kiln.graph.task_catalog import BENCHMARK_MODELS, catalog_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def measured_pool(db: Database, task, target: str, threads: int):
    """(features, seconds, index of the default) of the task's measured candidates that
    have stored features, or None when the current default was not measured."""
    vectors = db.feature_vectors(task.workload_key, target, FEATURE_VERSION)
    rows = [(vectors[config_key(r.config)], r.mean_cost, config_key(r.config))
            for r in db.records(task.workload_key, target, threads)
            if config_key(r.config) in vectors]
    keys = [k for *_, k in rows]
    default = config_key(SearchSpace(task, threads).default_config())
    if default not in keys or not math.isfinite(rows[keys.index(default)][1]):
        return None
    return (np.stack([x for x, *_ in rows]), np.array([c for _, c, _ in rows]),
            keys.index(default))


def geomean(values) -> float:
    values = [v for v in values if math.isfinite(v) and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else math.nan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(ROOT / "tuning_logs" / "kiln.db"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--absolute", action="store_true",
                        help="features alone, without their difference from the default")
    args = parser.parse_args(argv)
    if args.absolute:
        Z.relative_rows = lambda X, reference: np.asarray(X, dtype=np.float32)
    db = Database(args.db)
    target = canonical_target("native")
    by_model = {}
    for name in BENCHMARK_MODELS:
        tasks = {t.workload_key: t for t in catalog_tasks(target, [name])}
        by_model[name] = tasks
    rows, figures = [], {}
    all_speedups, all_oracle = [], []
    with tempfile.TemporaryDirectory() as folder:
        for name, tasks in by_model.items():
            pools = {k: p for k, t in tasks.items()
                     if (p := measured_pool(db, t, target, args.threads)) is not None}
            if not pools:
                continue
            path = Z.train_model(db, target, exclude_tasks=set(tasks),
                                 path=Path(folder) / f"{name}.json")
            forest = Z.load_forest(path)
            speedups, oracle = [], []
            for X, seconds, default in pools.values():
                scores = forest.predict(Z.relative_rows(X, X[default]))
                scores[~np.isfinite(seconds)] = -np.inf
                pick = int(np.argmax(scores))
                if scores[pick] <= scores[default]:
                    pick = default              # as rank_candidates: the default wins ties
                speedups.append(seconds[default] / seconds[pick])
                oracle.append(seconds[default] / seconds[np.isfinite(seconds)].min())
            slower = int(sum(s < 0.97 for s in speedups))
            faster = int(sum(s > 1.03 for s in speedups))
            rows.append([name, len(tasks), len(pools), geomean(speedups), geomean(oracle),
                         faster, slower, min(speedups)])
            figures[name] = {"tasks": len(pools), "speedup": geomean(speedups),
                             "oracle": geomean(oracle), "faster": faster, "slower": slower}
            all_speedups += speedups
            all_oracle += oracle
    rows.append(["all", "", len(all_speedups), geomean(all_speedups), geomean(all_oracle),
                 sum(s > 1.03 for s in all_speedups), sum(s < 0.97 for s in all_speedups),
                 min(all_speedups) if all_speedups else math.nan])
    print(f"zero-shot picks vs the default, leave one model out ({'absolute features' if args.absolute else 'features + difference from the default'}), "
          f"{target.split()[1]}, {args.threads} thread(s)")
    print_table(["model", "tasks", "with default measured", "pick speedup (geomean)",
                 "oracle", "faster >3%", "slower >3%", "worst"], rows)
    figures["all"] = {"tasks": len(all_speedups), "speedup": geomean(all_speedups),
                      "oracle": geomean(all_oracle)}
    figures["rows"] = "absolute" if args.absolute else "features+delta"
    emit_json(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

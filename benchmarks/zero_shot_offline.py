"""Does the zero-shot cost model transfer? Leave one model out, on stored confirmations only.

    python benchmarks/zero_shot_offline.py [--db tuning_logs/kiln.db] [--threads 1]
                                           [--models resnet18_like,regnetx_like,...]

benchmarks/zero_shot.py compiles and times whole models, which takes minutes and moves with
the machine's load. This asks the question underneath it in seconds, with no timing at all:
for each model M (a bundled benchmark model, tests/task_catalog.py, or one of
tests/models_zoo.py), the zero-shot model is trained exactly as a compile trains it
(autotune/zero_shot.py) on this CPU's vector ISA with every task of M left out, and then ranks
the configs compared in the confirmation of each of M's tasks at --threads (`kiln confirm`:
the default, leading records and mutations of the default, timed side by side). The pick
follows the compile's rule (the default unless a config is predicted PICK_MARGIN faster), and
its measured paired speedup over the default is reported: > 1 means the pick ran faster.
"oracle" is the best compared config, the most any ranking of those pools could gain.
Prints a table and, last, one JSON line.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import emit_json, print_table  # noqa: E402

from kiln.autotune import zero_shot as Z  # noqa: E402
from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.dispatch import canonical_target  # noqa: E402
from kiln.autotune.features import FEATURE_VERSION  # noqa: E402
from tests import models_zoo  # noqa: E402
from kiln.graph.compile.model import model_tasks  # noqa: E402
from tests.task_catalog import BENCHMARK_MODELS, catalog_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def model_keys(name: str, target: str) -> set[str]:
    """The workload keys of model `name`'s tasks (a bundled benchmark model: every compile
    variant; a models_zoo one: today's compile)."""
    if name in BENCHMARK_MODELS:
        return {t.workload_key for t in catalog_tasks(target, [name])}
    return {t.task.workload_key for t in model_tasks(getattr(models_zoo, name)(), target)}


def labelled_pools(db: Database, keys: set[str], target: str, threads: int) -> list:
    """(relative features, speedups over the default) of each confirmation of `keys` at
    `threads` with at least one compared config besides the default."""
    out = []
    for choice in db.latest_choices([target]):
        if choice.task_key not in keys or choice.threads != threads:
            continue
        rows = [r for r in choice.candidates if r.get("features") and r.get("ratio")
                and r.get("feature_version") == FEATURE_VERSION]
        if len(rows) < 2 or rows[0].get("source") != "default":
            continue
        X = np.asarray([r["features"] for r in rows], dtype=np.float32)
        out.append((Z.relative_rows(X, X[0]), 1.0 / np.array([r["ratio"] for r in rows])))
    return out


def geomean(values) -> float:
    values = [v for v in values if math.isfinite(v) and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else math.nan


ZOO = ("regnetx_like", "rexnet_like", "mobilenetv3_like", "vit_tiny_like", "densenet_like")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(ROOT / "tuning_logs" / "kiln.db"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", default=",".join([*BENCHMARK_MODELS, *ZOO]))
    args = parser.parse_args(argv)
    db = Database(args.db)
    target = canonical_target("native")
    margin = -math.log(1.0 - Z.PICK_MARGIN)
    rows, figures = [], {}
    all_speedups, all_oracle = [], []
    with tempfile.TemporaryDirectory() as folder:
        for name in [m for m in args.models.split(",") if m]:
            keys = model_keys(name, target)
            pools = labelled_pools(db, keys, target, args.threads)
            if not pools:
                continue
            path = Z.train_model(db, target, exclude_tasks=keys,
                                 path=Path(folder) / f"{name}.json")
            if path is None:
                print(f"# {name}: too few labels without it", file=sys.stderr)
                continue
            forest = Z.load_forest(path)
            speedups, oracle, picks = [], [], 0
            for X, speedup in pools:
                scores = forest.predict(X)
                pick = int(np.argmax(scores))
                if scores[pick] - scores[0] < margin:
                    pick = 0                    # as rank_candidates: the default stays
                picks += pick != 0
                speedups.append(float(speedup[pick]))
                oracle.append(float(speedup.max()))
            slower = int(sum(s < 0.97 for s in speedups))
            faster = int(sum(s > 1.03 for s in speedups))
            rows.append([name, len(pools), picks, geomean(speedups), geomean(oracle),
                         faster, slower, min(speedups)])
            figures[name] = {"tasks": len(pools), "picks": picks, "speedup": geomean(speedups),
                             "oracle": geomean(oracle), "faster": faster, "slower": slower}
            all_speedups += speedups
            all_oracle += oracle
    rows.append(["all", len(all_speedups), sum(r[2] for r in rows), geomean(all_speedups),
                 geomean(all_oracle), sum(s > 1.03 for s in all_speedups),
                 sum(s < 0.97 for s in all_speedups),
                 min(all_speedups) if all_speedups else math.nan])
    print(f"zero-shot picks vs the default, leave one model out, on confirmations, "
          f"{target.split()[1]}, {args.threads} thread(s)")
    print_table(["model", "confirmed tasks", "non-default picks", "pick speedup (geomean)",
                 "oracle", "faster >3%", "slower >3%", "worst"], rows)
    figures["all"] = {"tasks": len(all_speedups), "speedup": geomean(all_speedups),
                      "oracle": geomean(all_oracle)}
    emit_json(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

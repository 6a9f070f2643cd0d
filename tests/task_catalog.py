"""The tuning tasks of Kiln's bundled models and benchmark operators, per target.

The committed tuning database holds records of exactly these tasks (the benchmarks and the
main job tuned them). Checking every committed record against today's search space, and
migrating records when the space's naming changes, needs the tasks' compute DAGs, which the
database does not store: this module rebuilds them. A task of another model is checked the
same way when that model is compiled (autotune/dispatch.py skips a record that does not fit).
"""
from __future__ import annotations

from typing import Iterator

import contextlib

from kiln.autotune.database import Database
from kiln.autotune.dispatch import upgrade_legacy_records
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen.target import Target
from kiln.autotune.tuner import canonical_target
from kiln.graph import models
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import fuse_operators, optimize
from kiln.graph.passes.layout import winograd as winograd_pass
from kiln.graph.compile.tasks import extract_tasks

# the models the benchmarks and the main job compile and tune (benchmarks/models.py)
BENCHMARK_MODELS = {
    "default_cnn": lambda: models.default_cnn(),
    "resnet18_like": lambda: models.resnet18_like(image_size=224),
    "mobilenetv2_like": lambda: models.mobilenetv2_like(image_size=224),
    "bert_like_encoder": lambda: models.bert_like_encoder(seq=128, hidden=256, layers=2),
    "mlp": lambda: models.mlp(),
}
# single operators tuned by the benchmarks (tune_gemm.py, tune_search_efficiency.py) and the
# README's `kiln tune --op` example
BENCHMARK_OPERATORS = (
    ("matmul", (1024, 1024, 1024)), ("matmul", (256, 256, 256)), ("matmul", (512, 512, 512)),
    ("conv2d", (1, 32, 28, 28, 32, 3, 3, 1, 1)), ("conv2d", (1, 64, 14, 14, 64, 3, 3, 1, 1)),
)
# passes skipped by the compile variants whose tasks the committed log holds: the blocked
# layout or not, Winograd or not, and the weight packing passes off (records measured before
# those passes existed keep serving a model compiled that way)
MODEL_VARIANTS = ((), ("winograd",), ("blocked layout",),
                  ("pack conv weights", "prepack matmul weights"))
# Winograd's channel floor before 2026-11-25 07:40 UTC (16): the default CNN's records of that time
HISTORIC_WINOGRAD_MIN_CHANNELS = (16,)


@contextlib.contextmanager
def _winograd_min_channels(value: int):
    saved = winograd_pass.MIN_CHANNELS
    winograd_pass.MIN_CHANNELS = value
    try:
        yield
    finally:
        winograd_pass.MIN_CHANNELS = saved


def _variant_tasks(proto, target: str, skip: tuple) -> list[Task]:
    graph = optimize(load_onnx(proto), skip=skip, target=target)
    return [mt.task for mt in extract_tasks(graph, fuse_operators(graph), target)[0]]


def catalog_tasks(target: str, model_names=None) -> Iterator[Task]:
    """Every task of the bundled benchmark models (each compile variant of MODEL_VARIANTS)
    and benchmark operators on `target`; a workload may come more than once."""
    target = canonical_target(target)
    for name, build in BENCHMARK_MODELS.items():
        if model_names is not None and name not in model_names:
            continue
        proto = build()
        for skip in MODEL_VARIANTS:
            yield from _variant_tasks(proto, target, skip)
        for floor in HISTORIC_WINOGRAD_MIN_CHANNELS:
            with _winograd_min_channels(floor):
                yield from _variant_tasks(proto, target, ())
    if model_names is None:
        for op, shape in BENCHMARK_OPERATORS:
            yield Task.from_op(op, shape, target=target)


def tasks_by_key(target: str, model_names=None) -> dict[str, Task]:
    """workload key -> one task with that key (see catalog_tasks)."""
    out: dict[str, Task] = {}
    for task in catalog_tasks(target, model_names):
        out.setdefault(task.workload_key, task)
    return out


def check_database(db: Database, migrate: bool = False) -> dict:
    """Every record of `db` against its task's space today (rebuilt by catalog_tasks): how
    many fit, those that do not (task, target, record id, why), how many are of an older
    schema (`stale`) and how many belong to tasks no bundled model produces today
    (`unknown_task`: no space to check them against). With `migrate`, older records are
    renamed first (autotune/migrate.py). Targets of one vector ISA share their tasks."""
    report = {"fit": 0, "misfit": [], "unknown_task": 0, "migrated": 0}
    by_isa: dict = {}
    rows = db._db.conn.execute("SELECT target, task_key, COUNT(*) FROM main.records "
                               "GROUP BY target, task_key").fetchall()
    for target, key, count in rows:
        isa = Target.from_string(target).vector_isa()
        if isa not in by_isa:
            by_isa[isa] = tasks_by_key(target)
        task = by_isa[isa].get(key)
        if task is None:
            report["unknown_task"] += count
            continue
        space = SearchSpace(task.retargeted(target))
        if migrate:
            report["migrated"] += upgrade_legacy_records(db, space)
        for record in db.records(key, target):
            reason = space.misfit(record.config)
            if reason is None:
                report["fit"] += 1
            else:
                report["misfit"].append((task.name, target, record.record_id, reason))
    report["stale"] = db.stale_count()
    return report


def main(argv=None) -> int:
    import argparse
    import json
    parser = argparse.ArgumentParser(description="check (or migrate) a tuning log against "
                                     "the search spaces of the bundled tasks")
    parser.add_argument("db")
    parser.add_argument("--migrate", action="store_true")
    args = parser.parse_args(argv)
    db = Database(args.db)
    report = check_database(db, migrate=args.migrate)
    db.close()
    print(json.dumps({**report, "misfit": len(report["misfit"])}))
    for item in report["misfit"][:20]:
        print(*item)
    return 1 if report["misfit"] else 0


__all__ = ["catalog_tasks", "tasks_by_key", "check_database", "BENCHMARK_MODELS",
           "BENCHMARK_OPERATORS"]

if __name__ == "__main__":
    raise SystemExit(main())

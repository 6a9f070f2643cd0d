"""Tuning on a Dask cluster against the local runner: trials per minute, the best latency
after N trials, the tuner process's CPU share, and where a trial's time goes (build vs run).

    python benchmarks/tune_cluster.py [--trials 24] [--runs 2] [--op matmul --shape 64,64,64]

Each configuration tunes the same task into a fresh log with the same search and seed, for
N trials, at 1 thread: the local Runner (the measuring subprocess of this process), then a
real `dask scheduler` with 1 and with 2 `kiln worker --threads 1` processes on 127.0.0.1
(started and stopped here; their start-up is not counted). Wall time runs from the call to
tune_task to its return, so the tuner's own work (search, model, commits) is counted. The
tuner's CPU share is its process CPU seconds over that wall time (children excluded): the
share of one core the single tuner needs, which bounds how many workers it can keep busy.
The best configs of all runs are timed again side by side at the end in one measuring
process (interleaved rounds), so "best latency" compares schedules, not moments of load.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.autotune.database import Database
from kiln.autotune.measure import MeasureOptions, Runner, TaskData
from kiln.autotune.task import Task
from kiln.autotune.tuner import canonical_target, tune_task


def _start(args, log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class Cluster:
    """A scheduler and `workers` kiln workers on 127.0.0.1, ready when entered."""

    def __init__(self, workers: int, folder: Path):
        self.n, self.folder, self.processes = workers, folder, []

    def __enter__(self) -> str:
        import distributed
        info = self.folder / "scheduler.json"
        self.processes.append(_start(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--scheduler-file", str(info), "--dashboard-address",
             "127.0.0.1:0"], self.folder / "scheduler.log"))
        while not (info.exists() and info.stat().st_size):
            time.sleep(0.1)
        self.address = json.loads(info.read_text())["address"]
        for i in range(self.n):
            self.processes.append(_start(
                [sys.executable, "-m", "kiln", "worker", self.address, "--name", f"w{i + 1}",
                 "--threads", "1"], self.folder / f"w{i + 1}.log"))
        with distributed.Client(self.address, set_as_default=False) as client:
            client.wait_for_workers(self.n, timeout=120)
        return self.address

    def __exit__(self, *exc) -> None:
        for process in reversed(self.processes):
            _stop(process)


def one_run(task: Task, trials: int, options: MeasureOptions, folder: Path, cluster,
            search: str) -> dict:
    db = Database(folder / f"run-{time.monotonic_ns()}.db")
    cpu, start = time.process_time(), time.perf_counter()
    result = tune_task(task, "native", trials, db, search=search, options=options,
                       cluster=cluster, confirm=None)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    db.close()
    per_trial = result.timing["per_trial"]
    build = per_trial["worker_lower"] + per_trial["worker_compile"]
    inside = build + per_trial["worker_setup"] + per_trial["worker_check"] + \
        per_trial["worker_run"]
    return {"trials": result.measured, "wall": wall, "per_minute": 60 * result.measured / wall,
            "tuner_cpu_share": cpu / wall, "best_config": result.best_config,
            "best_ms_in_run": result.best_seconds * 1e3,
            "build_share": build / inside if inside else 0.0,
            "build_ms_per_trial": build * 1e3,
            "propose_ms_per_trial": per_trial["propose"] * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--op", default="matmul")
    parser.add_argument("--shape", default="64,64,64")
    parser.add_argument("--search", default="xgb")
    args = parser.parse_args()
    task = Task.from_op(args.op, [int(s) for s in args.shape.split(",")])
    options = MeasureOptions(threads=1)
    setups = [("local runner", 0), ("1 worker", 1), ("2 workers", 2)]
    figures: dict[str, list[dict]] = {name: [] for name, _ in setups}
    with tempfile.TemporaryDirectory(prefix="kiln-tune-cluster-") as tmp:
        folder = Path(tmp)
        for run in range(args.runs):            # configurations alternate within each run
            for name, workers in setups:
                if workers == 0:
                    figures[name].append(one_run(task, args.trials, options, folder, None,
                                                 args.search))
                    continue
                sub = folder / f"cluster-{run}-{workers}"
                sub.mkdir()
                with Cluster(workers, sub) as address:
                    figures[name].append(one_run(task, args.trials, options, folder, address,
                                                 args.search))
                print(f"run {run + 1}, {name}: {figures[name][-1]['per_minute']:.1f} "
                      "trials/min", file=sys.stderr, flush=True)
        # the winners of every run, timed side by side in one process
        winners = [(name, i, r["best_config"]) for name, runs in figures.items()
                   for i, r in enumerate(runs)]
        target = canonical_target("native")
        retargeted = task.retargeted(target)
        with Runner(MeasureOptions(threads=1)) as runner:
            results = runner.compare(retargeted, TaskData.make(retargeted),
                                     [c for _, _, c in winners], target, rounds=7)
        for (name, i, _), result in zip(winners, results):
            figures[name][i]["best_ms_side_by_side"] = (
                statistics.median(result.costs) * 1e3 if result.costs else float("inf"))
    summary = {}
    print(f"{task.description}, {args.trials} trials, search {args.search}, 1 thread, "
          f"median of {args.runs} runs")
    print(f"{'setup':<14}{'trials/min':>11}{'vs local':>9}{'tuner CPU':>10}"
          f"{'best ms (side by side)':>24}{'build share':>12}{'propose ms/trial':>17}")
    base = statistics.median(r["per_minute"] for r in figures["local runner"])
    for name, runs in figures.items():
        row = {key: statistics.median(r[key] for r in runs) for key in
               ("per_minute", "tuner_cpu_share", "best_ms_side_by_side", "build_share",
                "propose_ms_per_trial", "build_ms_per_trial", "wall")}
        row["vs_local"] = row["per_minute"] / base
        summary[name] = row
        print(f"{name:<14}{row['per_minute']:>11.1f}{row['vs_local']:>8.2f}x"
              f"{100 * row['tuner_cpu_share']:>9.0f}%{row['best_ms_side_by_side']:>24.4f}"
              f"{100 * row['build_share']:>11.0f}%{row['propose_ms_per_trial']:>17.0f}")
    print(json.dumps({"bench": "tune_cluster", "task": task.name, "trials": args.trials,
                      "runs": args.runs, "search": args.search, "load": os.getloadavg()[0],
                      "setups": summary}, sort_keys=True))


if __name__ == "__main__":
    main()

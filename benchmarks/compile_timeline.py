"""Where the wall time of a cold compile goes, from `kiln.compile(path)` to the first result:
a timeline of the parent's steps and of each compile worker's, in one fresh interpreter.

    python benchmarks/compile_timeline.py [--models default_cnn,hf_llama] [--tiered 0,1]
                                          [--runs 3] [--jobs 2] [--events]

Each run is a fresh interpreter (`import kiln` timed apart) with an empty private
KILN_CACHE_DIR, compiling the ONNX file as a user would pass it (benchmarks/compile_time_ort's
models and inputs, the default database) and running it once. The steps are timed by
wrapping Kiln's own functions in that interpreter before the compile (perf_counter marks,
which are CLOCK_MONOTONIC and so comparable across the forked workers); nothing in Kiln is
changed. Per step: the seconds from the compile's start to its first start and last end,
how often it ran and its summed wall seconds, in the parent and in the workers. --events
prints every event. Prints a table per model and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))    # tests.task_catalog

# (module, attribute, label): a function (or class, or "Class.method") whose calls are timed.
# Imported names are wrapped where they are looked up (the calling module's global).
PARENT = (
    ("kiln.graph.runtime.dynamic", "read_model", "read ONNX file"),
    ("kiln.graph.runtime.dynamic", "open_db", "open tuning DB"),
    ("kiln.graph.runtime.dynamic", "input_specs", "input specs"),
    ("kiln.graph.compile.model", "compile_model", "compile_model"),
    ("kiln.graph.compile.model_cache", "model_key", "model-cache key"),
    ("kiln.graph.compile.model_cache", "load", "model-cache lookup"),
    ("kiln.graph.compile.model_cache", "store", "model-cache write"),
    ("kiln.graph.compile.model_cache", "still_valid", "model-cache key again"),
    ("kiln.graph.compile.model", "prepare_graph", "prepare_graph"),
    ("kiln.graph.compile.model", "load_onnx", "  ONNX to Graph"),
    ("kiln.graph.compile.model", "add_index_checks", "  index checks"),
    ("kiln.graph.compile.model", "optimize", "  graph passes"),
    ("kiln.graph.compile.model", "fuse_operators", "  fusion"),
    ("kiln.graph.compile.model", "extract_tasks", "extract_tasks"),
    ("kiln.graph.compile.tasks", "lower_group", "  lower groups to TE"),
    ("kiln.graph.compile.tasks", "_dedup_key", "  workload keys"),
    ("kiln.graph.compile.parallel_build", "StreamingBuild.add", "  hand task to pool"),
    ("kiln.graph.compile.parallel_build", "_ready_runtime", "thread-pool runtime"),
    ("kiln.graph.compile.parallel_build", "resolve_pending", "deferred constants"),
    ("kiln.graph.compile.parallel_build", "StreamingBuild.finish", "wait for workers + load"),
    ("kiln.graph.compile.parallel_build", "link_and_load", "  load objects (JIT)"),
    ("kiln.graph.compile.fast_batch", "build_serial", "build in-process (tier 1)"),
    ("kiln.graph.compile.model", "_build_kernels", "build kernels"),
    ("kiln.graph.compile.model", "_assemble", "assemble model"),
    ("kiln.graph.compile.model", "_store", "model-cache store"),
    ("kiln.graph.runtime.executor", "CompiledModel.__init__", "  executor setup"),
    ("kiln.graph.runtime.executor", "CompiledModel.run", "run"),
)
WORKER = (
    ("kiln.graph.compile.parallel_build", "_work", "task (worker)"),
    ("kiln.graph.compile.parallel_build", "_work_batch", "batch of tasks (worker)"),
    ("kiln.graph.compile.parallel_build", "_runtime_job", "thread-pool runtime (worker)"),
    ("kiln.graph.compile.tiers", "SearchSpace", "  search space"),
    ("kiln.graph.compile.model", "SearchSpace", "  search space"),
    ("kiln.autotune.space.rules", "SearchSpace.apply", "  schedule"),
    ("kiln.graph.compile.tiers", "lower", "  lower"),
    ("kiln.graph.compile.model", "lower", "  lower"),
    ("kiln.graph.compile.tiers", "emit_module", "  emit LLVM IR"),
    ("kiln.graph.compile.parallel_build", "emit_module", "  emit LLVM IR"),
    ("kiln.graph.compile.tiers", "compile_object", "  LLVM (passes + object)"),
    ("kiln.graph.compile.parallel_build", "jit_compile_object", "  LLVM (passes + object)"),
    ("kiln.graph.compile.fast_batch", "_module_text", "  emit LLVM IR"),
    ("kiln.graph.compile.fast_batch", "compile_linked", "  LLVM (passes + object)"),
)
_events: list = []


def _wrap(fn, label):
    def timed(*args, **kwargs):
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _events.append((label, os.getpid(), start, time.perf_counter(),
                            time.thread_time() - cpu))
    timed.__wrapped__ = fn
    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        try:
            setattr(timed, attr, getattr(fn, attr))
        except (AttributeError, TypeError):
            pass
    return timed


def _patch(specs) -> None:
    for module, attr, label in specs:
        try:        # (steps a version of Kiln does not have are skipped: before/after runs)
            mod = importlib.import_module(module)
        except ImportError:
            continue
        owner, name = mod, attr
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(mod, cls)
        fn = getattr(owner, name, None)
        if fn is None:
            continue
        if isinstance(fn, type):
            # a class: time its construction through a subclass (keeps isinstance working)
            wrapped_init = _wrap(fn.__init__, label)
            setattr(owner, name, type(fn.__name__, (fn,), {"__init__": wrapped_init}))
        else:
            setattr(owner, name, _wrap(fn, label))


def _flush_worker_events(folder: str):
    """Workers append their events to a file of their own after each job."""
    from kiln.graph.compile import parallel_build

    def flushing(work):
        def work_and_flush(*job):
            try:
                return work(*job)
            finally:
                with open(f"{folder}/events-{os.getpid()}.jsonl", "a") as f:
                    for event in _events:
                        f.write(json.dumps(event) + "\n")
                _events.clear()
        # (pickled by name, as the pool sends it: the module's attribute, which is this)
        work_and_flush.__module__, work_and_flush.__qualname__ = (work.__module__,
                                                                   work.__qualname__)
        return work_and_flush
    for name in ("_work", "_work_batch", "_runtime_job"):
        if hasattr(parallel_build, name):
            setattr(parallel_build, name, flushing(getattr(parallel_build, name)))
    os.register_at_fork(after_in_child=_events.clear)


def child(path: str, inputs: str, folder: str, jobs: int) -> dict:
    """One cold compile + first run in this fresh interpreter; events as JSON."""
    import numpy as np
    begin = time.perf_counter()
    import kiln
    imported = time.perf_counter()
    _patch(PARENT)
    _patch(WORKER)
    _flush_worker_events(folder)
    with np.load(inputs) as f:
        feeds = {k: f[k] for k in f.files}
    modules_before = set(sys.modules)
    start, cpu = time.perf_counter(), time.process_time()
    model = kiln.compile(path, jobs=jobs)
    compiled_at = time.perf_counter()
    model.run(feeds)
    first, parent_cpu = time.perf_counter(), time.process_time() - cpu
    workers = []
    for name in os.listdir(folder):
        if name.startswith("events-"):
            with open(f"{folder}/{name}") as f:
                workers += [tuple(json.loads(line)) for line in f]
    return {"import_s": imported - begin, "compile_s": compiled_at - start,
            "first_s": first - start, "parent_pid": os.getpid(), "start": start,
            "parent_cpu_s": parent_cpu,
            "events": [list(e) for e in _events + workers],
            "imported_during_compile": sorted(m for m in set(sys.modules) - modules_before
                                              if "." not in m)}


def _spawn(path: str, inputs: str, jobs: int, tiered: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kiln-timeline-") as tmp:
        env = {**os.environ, "KILN_CACHE_DIR": f"{tmp}/cache", "KILN_TIERED": tiered}
        os.makedirs(f"{tmp}/events")
        cmd = [sys.executable, __file__, "--child", path, inputs, f"{tmp}/events", str(jobs)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"compiling {path} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(run: dict) -> dict:
    """label -> {where, first start, last end, calls, summed seconds} (seconds from the
    compile's start)."""
    t0, parent = run["start"], run["parent_pid"]
    rows: dict[tuple, dict] = {}
    for label, pid, start, end, cpu in run["events"]:
        where = "parent" if pid == parent else "workers"
        row = rows.setdefault((where, label), {"where": where, "step": label,
                                               "from": start - t0, "to": end - t0,
                                               "calls": 0, "sum": 0.0, "cpu": 0.0,
                                               "pids": set()})
        row["from"], row["to"] = min(row["from"], start - t0), max(row["to"], end - t0)
        row["calls"] += 1
        row["sum"] += end - start
        row["cpu"] += cpu
        row["pids"].add(pid)
    for row in rows.values():
        row["pids"] = len(row["pids"])
    return rows


JOBS = ("task (worker)", "batch of tasks (worker)", "thread-pool runtime (worker)")


def cpu_figures(run: dict) -> dict:
    """CPU seconds to the first result: the parent's (all its threads), the workers' jobs
    (in all, and the busiest worker's). On a loaded machine these hold where wall times
    do not: on 2 idle cores the first result would come after about the parent's serial
    CPU plus the busiest worker's."""
    per: dict[int, float] = {}
    for label, pid, _, _, cpu in run["events"]:
        if label in JOBS:
            per[pid] = per.get(pid, 0.0) + cpu
    return {"parent_cpu_s": run["parent_cpu_s"], "workers_cpu_s": sum(per.values()),
            "busiest_worker_cpu_s": max(per.values(), default=0.0)}


def merge(runs: list[dict]) -> list[dict]:
    """The medians of several runs' summaries, in the order of the first start."""
    per = [summarise(r) for r in runs]
    keys = {k for p in per for k in p}
    out = []
    for key in keys:
        present = [p[key] for p in per if key in p]
        out.append({"where": key[0], "step": key[1],
                    **{f: round(statistics.median(r[f] for r in present), 4)
                       for f in ("from", "to", "calls", "sum", "cpu", "pids")}})
    return sorted(out, key=lambda r: (r["where"] != "parent", r["from"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="default_cnn,hf_llama")
    parser.add_argument("--tiered", default="1", help="comma-separated KILN_TIERED values")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--events", action="store_true", help="print every event")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        path, inputs, folder, jobs = args.child
        print(json.dumps(child(path, inputs, folder, int(jobs))))
        return 0
    from common import emit_json, print_table   # (imports kiln: not in a child, timed there)
    from compile_time_ort import write_inputs, write_model
    figures = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="kiln-timeline-models-") as tmp:
        for name in [m for m in args.models.split(",") if m]:
            path = write_model(name, tmp)
            inputs = f"{tmp}/{name}_in.npz"
            write_inputs(path, inputs)
            runs = {t: [] for t in args.tiered.split(",")}
            for _ in range(args.runs):          # alternating the settings
                for tiered in runs:
                    runs[tiered].append(_spawn(path, inputs, args.jobs, tiered))
            loads.append(os.getloadavg()[0])
            for tiered, rs in runs.items():
                med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
                rows = merge(rs)
                cpus = [cpu_figures(r) for r in rs]
                cpu = {k: round(statistics.median(c[k] for c in cpus), 4) for k in cpus[0]}
                print(f"\n{name}, KILN_TIERED={tiered}: import {med('import_s'):.3f} s, "
                      f"compile {med('compile_s'):.3f} s, first result {med('first_s'):.3f} s "
                      f"(medians of {len(rs)}; imported during the compile: "
                      f"{rs[-1]['imported_during_compile']}); CPU s to the first result: "
                      f"parent {cpu['parent_cpu_s']:.3f}, workers {cpu['workers_cpu_s']:.3f} "
                      f"(busiest {cpu['busiest_worker_cpu_s']:.3f})")
                print_table(["where", "step", "from s", "to s", "calls", "sum s", "cpu s",
                             "processes"],
                            [[r["where"], r["step"], r["from"], r["to"], r["calls"], r["sum"],
                              r["cpu"], r["pids"]] for r in rows])
                if args.events:
                    t0 = rs[-1]["start"]
                    for label, pid, s, e, c in sorted(rs[-1]["events"], key=lambda ev: ev[2]):
                        print(f"    {pid:>7} {s - t0:8.4f} {e - t0:8.4f} {c:8.4f} {label}")
                figures.append({"model": name, "tiered": tiered,
                                "import_s": round(med("import_s"), 4),
                                "compile_s": round(med("compile_s"), 4),
                                "first_s": round(med("first_s"), 4), **cpu, "steps": rows})
    print(f"\n(load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores; "
          "'from'/'to': seconds from the start of kiln.compile to the step's first start and "
          "last end; 'sum': its summed wall seconds over calls, "
          "'cpu': their CPU seconds (the calling thread's))")
    emit_json({"bench": "compile_timeline", "jobs": args.jobs, "load_average": loads,
               "results": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `kiln` command line: tune, compile, bench, quantize, logs. The CLI owns the terminal (rich)."""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .codegen.runtime_config import threads_env
from .te.errors import KilnError

console = Console(width=None if sys.stdout.isatty() else 120)  # pipes get a wide table

DEFAULT_MODEL_TRIALS = 64
# `kiln tune` with no model on a CPU that has no tuning records of the default model: tune
# this long (--time/--trials change it), then compile and compare
DEFAULT_MODEL_TIME = 300.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """'90s', '10m', '1.5h' or a plain number of seconds -> seconds (> 0)."""
    raw = text.strip().lower()
    unit = raw[-1:] if raw[-1:] in _UNITS else "s"
    number = raw[:-1] if raw[-1:] in _UNITS else raw
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds, minutes or hours, e.g. 90s, 10m, 1h")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: the time budget must be > 0")
    return seconds


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 360 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 6 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _open_db(path):
    """--db PATH: that log; no --db: the user's log layered over the shipped records
    (kiln.autotune.default_db), as kiln.compile and kiln.tune use."""
    from .autotune.default_db import DEFAULT, open_database
    return open_database(path or DEFAULT)


def _db_name(db) -> str:
    from .autotune.default_db import describe
    return describe(db)


class _ProgressBar:
    """A rich progress bar fed by the tuner's per-trial callback: trials out of a trial
    budget or, with `seconds`, tuning time out of a time budget."""

    def __init__(self, total: int | None, seconds: float | None = None):
        self.seconds = seconds
        count = ("{task.fields[trials]} trials, {task.completed:.0f}/{task.total:.0f} s"
                 if seconds is not None else "{task.completed}/{task.total} trials")
        self.progress = Progress(TextColumn("[bold]{task.fields[name]}"), BarColumn(),
                                 TextColumn(count), TextColumn("{task.fields[best]}"),
                                 TimeRemainingColumn(), console=console, transient=False)
        self.task = self.progress.add_task("tune", total=seconds if seconds is not None
                                           else total, name="", best="", trials=0)
        self.updates = 0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def __call__(self, p) -> None:
        self.updates += 1
        best = f"best {p.best_gflops:.1f} GFLOPS"
        if self.seconds is not None:
            self.progress.update(self.task, completed=min(p.elapsed, self.seconds),
                                 trials=p.trials_done, name=p.task_name, best=best)
        else:
            self.progress.update(self.task, completed=p.trials_done, total=p.trials_total,
                                 name=p.task_name, best=best)

    def reused(self, held: int, total: int | None) -> None:
        """Nothing was measured: show the trials the database already held."""
        if not self.updates and self.seconds is None:
            self.progress.update(self.task, completed=min(held, total), total=total,
                                 name="all from the database")


def _progress(total: int | None, seconds: float | None):
    """The rich bar on a terminal; off one (nohup, CI, a log file) a line at a steady
    interval (kiln/progress_lines.py)."""
    if console.is_terminal:
        return _ProgressBar(total, seconds)
    from .progress_lines import LineProgress
    return LineProgress(total, seconds, print_line=lambda text: console.print(
        text, soft_wrap=True, highlight=False))


def _cluster_option(address: str | None) -> dict:
    """tune(..., cluster=ADDRESS) when --cluster was given (the cluster extra is checked
    before anything is tuned)."""
    if address is None:
        return {}
    from .autotune.cluster import require_distributed
    require_distributed()
    return {"cluster": address}


def cmd_worker(args) -> int:
    from .autotune.cluster import require_distributed
    from .autotune.cluster.fingerprint import host_name
    require_distributed()
    from .autotune.cluster.worker import run_worker
    threads = args.threads
    if threads is not None and threads < 1:
        raise KilnError(f"kiln worker --threads {threads}: give a thread count >= 1")
    isa = tuple(f for f in args.advertise_isa.split(",") if f) if args.advertise_isa else None
    run_worker(args.scheduler, args.name or host_name(), threads or os.cpu_count() or 1, isa,
               host=args.host)
    return 0


# ----------------------------------------------------------------------------- commands

def _default_model():
    """(the ONNX model `kiln tune`/`kiln bench` use without one, its name): ResNet-18's
    layer shapes at 224x224, built at run time with random weights (graph/models.py)."""
    from .graph.models import DEFAULT_MODEL, MODELS
    return MODELS[DEFAULT_MODEL](), DEFAULT_MODEL


def _tasks_without_records(model, target: str, db, layout: str, winograd: bool) -> tuple[int, int]:
    """(tasks of `model` with no record of this CPU that a compile would apply, tasks)."""
    from .autotune.dispatch import select_record
    from .graph.compile.model import model_tasks
    from .codegen.target import Target
    target = Target.from_string(target)     # parsed once: model_tasks and select_record share it
    from .codegen.runtime_config import resolve_threads
    threads = resolve_threads(None)         # what a compile at the default count selects for
    tasks = model_tasks(model, target, layout=layout, winograd=winograd)
    missing = sum(1 for mt in tasks
                  if select_record(mt.task, target, db, threads, similar_cpus=False).record is None)
    return missing, len(tasks)


def cmd_tune(args) -> int:
    db = _open_db(args.db)
    if args.op:
        return _tune_op(args, db)
    if args.model is not None:
        trials = args.trials
        if trials is None and args.time is None:
            trials = DEFAULT_MODEL_TRIALS
        return _tune_model(args.model, args.model, args.model, args.target, trials, db, args.time,
                           leaders=args.leaders, layout=args.layout,
                           winograd=args.winograd, mutations=args.mutations,
                           model_check=args.model_check,
                           verbose=args.verbose, as_json=args.json, cluster=args.cluster)
    model, name = _default_model()
    trials, seconds = args.trials, args.time
    missing, total = _tasks_without_records(model, args.target, db, args.layout, args.winograd)
    what = f"the default model ({name}: ResNet-18's layers at 224x224, random weights)"
    cpu = _cpu_name(args.target)
    if missing:
        console.print(f"{what}: {missing} of its {total} tasks have no tuning records for this "
                      f"CPU ({cpu})")
    else:
        console.print(f"{what}: all {total} tasks have tuning records for this CPU ({cpu})")
    if trials is None and seconds is None:
        if not missing:
            console.print("compiling with them and comparing (--time 10m would tune further)")
            return _compare(model, name, args.target, db, args.layout, args.winograd,
                            verbose=args.verbose, as_json=args.json)
        seconds = DEFAULT_MODEL_TIME
        console.print(f"tuning it for {_duration(seconds)} first (--time changes it; Ctrl-C "
                      "stops early and keeps every measurement)")
    return _tune_model(model, f"the default model ({name})", name, args.target, trials, db,
                       seconds, leaders=args.leaders, layout=args.layout,
                       winograd=args.winograd, mutations=args.mutations,
                       model_check=args.model_check,
                       verbose=args.verbose, as_json=args.json, cluster=args.cluster)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def _record_cpu(target: str) -> str:
    """The CPU of a stored record's target string (the string itself if it does not parse)."""
    from .codegen.target import Target
    from .te.errors import TargetError
    try:
        return Target.from_string(target).cpu
    except TargetError:
        return target


def _cpu_name(target: str) -> str:
    from .codegen.target import Target
    return Target.from_string(target).cpu


def _tune_op(args, db) -> int:
    from .autotune.task import Task
    from .autotune.tuner import tune_task
    shape = [int(s) for s in args.shape.split(",")] if args.shape else []
    task = Task.from_op(args.op, shape, target=args.target)
    trials = args.trials if args.trials is not None else 200 if args.time is None else 2 ** 62
    budget = " and ".join(([f"{trials} trials"] if args.trials is not None
                           or args.time is None else [])
                          + ([f"{_duration(args.time)}"] if args.time is not None else []))
    console.print(f"tuning [bold]{task.description}[/] on {args.target}, {budget} "
                  f"({_db_name(db)})")
    with _progress(trials, args.time) as bar:
        result = tune_task(task, args.target, trials, db, search=args.search, callback=bar,
                           time_budget=args.time, **_cluster_option(args.cluster))
    state = "interrupted; " if result.interrupted else ""
    console.print(f"{state}measured {result.measured} new candidates, {result.total_trials} "
                  f"in the database; best {result.best_seconds * 1e3:.3f} ms = "
                  f"{result.best_gflops:.1f} GFLOPS")
    return 0


def _tune_model(model, label: str, name: str, target: str, trials: int | None, db,
                seconds: float | None, leaders: int = 3, layout: str = "nchwc",
                winograd: bool = True, mutations: int = 0, model_check: bool = True,
                verbose: bool = False, as_json: bool = False,
                cluster: str | None = None) -> int:
    from .autotune.confirm import ConfirmOptions
    from .graph.compile.model import tune_model
    budget = " and ".join(([f"up to {trials} trials in total"] if trials is not None else [])
                          + ([f"for {_duration(seconds)}"] if seconds is not None else []))
    console.print(f"tuning {label} on {target}: {budget} (reusing the {_db_name(db)})")
    start = time.perf_counter()
    with _progress(trials, seconds) as bar:
        if leaders < 0 or mutations < 0:
            raise KilnError(f"--leaders {leaders} --mutations {mutations}: give counts >= 0 "
                            "(both 0: no confirmation)")
        confirm = (ConfirmOptions(leaders=leaders, mutations=mutations)
                   if leaders or mutations else None)
        reports = tune_model(model, target=target, trials=trials, db=db, callback=bar,
                             layout=layout, winograd=winograd, time_budget=seconds,
                             confirm=confirm, model_check=model_check,
                             **_cluster_option(cluster))
        held = sum(r.trials for r in reports)
        bar.reused(held, trials)
    console.print(f"tuning took {time.perf_counter() - start:.1f} s; the database holds {held} "
                  f"trials of this model's {len(reports)} tasks on this target")
    confirmed = [r.choice for r in reports if r.choice is not None]
    if confirmed:
        tuned = [c for c in confirmed if not c.is_default]
        console.print(f"confirmed {_count(len(confirmed), 'task')} side by side with their "
                      f"defaults: {len(tuned)} take a tuned schedule (the default's time / theirs: "
                      f"{_geomean([c.speedup for c in tuned]):.2f}x geomean), "
                      f"{len(confirmed) - len(tuned)} keep the default")
    checked = [r for r in reports if r.in_model is not None]
    if checked:
        kept = [r for r in checked if r.in_model.kept]
        console.print(f"tried {_count(len(checked), 'tuned schedule')} inside the model "
                      f"against the default: {len(kept)} kept (the model ran faster with "
                      f"them), {len(checked) - len(kept)} back to the default")
    return _compare(model, name, target, db, layout, winograd, verbose=verbose,
                    as_json=as_json)


def _compare(model, name: str, target: str, db, layout: str, winograd: bool,
             repeat: int = 20, verbose: bool = False, as_json: bool = False) -> int:
    from .graph.compile.model import compile_model
    compiled = compile_model(model, target=target, db=db, layout=layout, winograd=winograd)
    _print_comparison(model, compiled, repeat=repeat, name=name, verbose=verbose,
                      as_json=as_json)
    return 0


def cmd_confirm(args) -> int:
    from .autotune.confirm import ConfirmOptions
    from .graph.compile.model import confirm_model
    from .graph.models import MODELS
    db = _open_db(args.db)
    if args.model is None:
        model, name = _default_model()
    elif args.model in MODELS:
        model, name = MODELS[args.model](), args.model
    else:
        model, name = args.model, args.model
    for flag, value, low in (("--leaders", args.leaders, 0), ("--mutations", args.mutations, 0),
                             ("--rounds", args.rounds, 3)):
        if value < low:
            raise KilnError(f"{flag} {value}: give a count >= {low}")
    options = ConfirmOptions(leaders=args.leaders, rounds=args.rounds, mutations=args.mutations)
    console.print(f"confirming {name} on {args.target}: each task's default, its "
                  f"{args.leaders} fastest records and {args.mutations} mutations of the "
                  f"default, side by side in {args.rounds} rounds ({_db_name(db)})")
    start = time.perf_counter()
    choices = confirm_model(model, target=args.target, db=db, options=options,
                            threads=args.threads, layout=args.layout, winograd=args.winograd)
    tuned = [c for c in choices.values() if not c.is_default]
    labels = sum(len(c.candidates) - 1 for c in choices.values())
    console.print(f"confirmed {_count(len(choices), 'task')} in "
                  f"{time.perf_counter() - start:.1f} s: {len(tuned)} take another schedule "
                  f"({_geomean([c.speedup for c in tuned]):.2f}x the default's speed, "
                  f"geomean), {len(choices) - len(tuned)} keep the default; {labels} compared "
                  "configs stored for the zero-shot model")
    return 0


def cmd_compile(args) -> int:
    from .graph.compile.model import compile_model
    db = _open_db(args.db)
    if args.c_api or args.target.startswith("wasm32"):
        from .deploy_cli import compile_deployable
        return compile_deployable(args, db, console)
    compiled = compile_model(args.model, target=args.target, db=db, layout=args.layout,
                             winograd=args.winograd)
    out = compiled.export(args.output)
    console.print(f"wrote {out}")
    console.print(compiled.summary())
    return 0


def cmd_bench(args) -> int:
    db = _open_db(args.db)
    model, name = (args.model, args.model) if args.model else _default_model()
    return _compare(model, name, args.target, db, args.layout, args.winograd, args.repeat,
                    verbose=args.verbose, as_json=args.json)


def cmd_quantize(args) -> int:
    from .quantize import quantize_model
    out = quantize_model(args.model, args.output, mode=args.mode, calibrate=args.calibrate,
                         random=args.random, per_channel=not args.per_tensor,
                         quant_format=args.format, activation=args.activation)
    console.print(f"wrote {out} ({args.mode} int8, via onnxruntime.quantization)")
    return 0


def _print_comparison(model, compiled, repeat: int = 20, name: str | None = None,
                      verbose: bool = False, as_json: bool = False) -> None:
    """Kiln vs the numpy executor vs onnxruntime on one random input, latency and error: the
    table and one line of summary; `verbose` adds the per-kernel table before that line,
    `as_json` one JSON object of the figures after it (for scripts)."""
    from .bench import compare_model
    name = Path(name or str(model)).name
    rows, figures = compare_model(model, compiled, repeat=repeat, name=name)
    numpy_runs = "" if figures["numpy_repeat"] == repeat else \
        f"; numpy executor: of {figures['numpy_repeat']}"
    table = Table(title=f"{name}: batch latency (median of {repeat}{numpy_runs})")
    for col in ("runtime", "latency ms", "vs Kiln", "max abs error vs Kiln"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if verbose:
        console.print(compiled.summary())
    console.print(_summary_line(name, compiled, figures, verbose), soft_wrap=True)
    if as_json:
        print(json.dumps(figures, sort_keys=True))


def _summary_line(name: str, compiled, figures: dict, verbose: bool) -> str:
    """One line: Kiln's latency against the baselines and where the schedules came from."""
    ort = figures.get("kiln_over_ort_latency")
    versus = (f"Kiln's latency is {ort:.2f}x onnxruntime's" if ort is not None
              else "Kiln (onnxruntime is not installed)")
    steps = getattr(getattr(compiled, "plan", None), "steps", None)
    if steps is None:           # a dynamic or staged model: its own first summary line
        schedules = compiled.summary().splitlines()[0]
    else:
        sources: dict[str, int] = {}
        for step in steps:
            sources[step.source] = sources.get(step.source, 0) + 1
        schedules = f"{_count(len(steps), 'kernel call')}, schedules: " + ", ".join(
            f"{n} {source}" for source, n in sorted(sources.items(), key=lambda kv: -kv[1]))
    more = "" if verbose else " (-v lists each kernel)"
    return (f"{name}: {versus}, {figures['kiln_speedup_vs_numpy']:.1f}x the numpy executor's "
            f"speed; {schedules}{more}")


def _misfits(db, model: str, target: str) -> list[tuple[str, object, str]]:
    """(task name, record, why) for each stored record of `model`'s tasks on any target
    that does not fit the task's search space today."""
    from .autotune.space.rules import SearchSpace
    from .graph.compile.model import model_tasks
    targets: dict[str, set] = {}
    for row in db.summary():            # (one pass over the log, not one per task)
        targets.setdefault(row["task_key"], set()).add(row["target"])
    out = []
    for mt in model_tasks(model, target):
        for tgt in sorted(targets.get(mt.task.workload_key, ())):
            space = SearchSpace(mt.task.retargeted(tgt))
            for record in db.records(mt.task.workload_key, tgt):
                reason = space.misfit(record.config)
                if reason is not None:
                    out.append((mt.name, record, reason))
    return out


def cmd_logs(args) -> int:
    db = _open_db(args.db)
    if args.export_file or args.import_file:
        return _exchange(args, db)
    if args.merge:
        from .autotune.merge import merge_database
        counts = merge_database(db, args.merge)
        db.close()
        console.print(f"merged {args.merge} into {db.path}: {counts}")
        return 0
    if args.train_zero_shot:
        from .autotune.zero_shot import train_shipped
        made = train_shipped(db, Path(args.train_zero_shot))
        db.close()
        for path in made:
            console.print(f"zero-shot model: {path}")
        console.print(f"{len(made)} zero-shot model(s) in {args.train_zero_shot} (one per "
                      "vector ISA with enough confirmations; others there removed)")
        return 0
    if args.check or args.prune:
        misfits = _misfits(db, args.check, args.target) if args.check else []
        for name, record, reason in misfits:
            console.print(f"{name}: record {record.record_id} does not fit: {reason}")
        if args.check:
            console.print(f"{len(misfits)} record(s) of {args.check}'s tasks do not fit "
                          "today's search spaces")
        if args.prune:
            removed = db.prune_stale(r.record_id for _, r, _ in misfits)
            console.print(f"removed {removed} stale record(s) from {db.path} (records shipped "
                          "with Kiln are never changed)")
        return 0
    rows = db.summary()
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True, default=str))
        return 0
    table = Table(title=_db_name(db))
    for col in ("task", "cpu", "threads", "trials", "ok", "failed", "stale", "best ms",
                "GFLOPS", "confirmed", "last"):
        table.add_column(col, no_wrap=col in ("task", "last"))
    for r in rows:
        ok = r["by_status"].get("OK", 0)
        best = f"{r['best_seconds'] * 1e3:.3f}" if r["best_seconds"] else "-"
        gflops = f"{r['best_gflops']:.1f}" if r["best_gflops"] else "-"
        cpu = _record_cpu(r["target"])
        when = datetime.fromtimestamp(r["last_time"]).strftime("%Y-%m-%d %H:%M") \
            if isinstance(r["last_time"], (int, float)) else str(r["last_time"])
        threads = ",".join("?" if t is None else str(t) for t in r["threads"])
        confirmed = ", ".join(
            f"{t}: " + ("default" if speedup is None else f"{speedup:.2f}x")
            for t, speedup in sorted(r["choices"].items())) or "-"
        table.add_row(r["description"].split(":")[0], cpu, threads, str(r["trials"]), str(ok),
                      str(r["trials"] - ok), str(r["stale"] or "-"), best, gflops, confirmed,
                      when)
    console.print(table)
    stale = sum(r["stale"] for r in rows)
    if stale:
        console.print(f"{stale} stale record(s): made for an older search space, never "
                      "applied (a compile of their model renames those it can; `kiln logs "
                      "--prune` removes yours, the records shipped with Kiln stay)")
    if not rows:
        console.print("the database holds no records yet: run `kiln tune`")
    return 0


def _exchange(args, db) -> int:
    """kiln logs --export FILE.jsonl [--model M] / --import FILE.jsonl (autotune/exchange.py)."""
    from .autotune import exchange
    if args.export_file:
        keys = None
        if args.model:
            from .graph.compile.model import model_tasks
            keys = {mt.task.workload_key for mt in model_tasks(args.model, args.target)}
        counts = exchange.export_log(db, args.export_file, task_keys=keys)
        console.print(f"exported {counts} from {_db_name(db)} to {args.export_file}")
    if args.import_file:
        counts = exchange.import_log(db, args.import_file)
        console.print(f"imported {args.import_file} into {db.path}: {counts}")
    db.close()
    return 0


def cmd_warmup(args) -> int:
    """kiln warmup: build the generic kernel library for this CPU (codegen/generic), so the
    first tiered compile of any model finds it."""
    from .codegen.generic.library import library_dir, warm_up
    from .codegen.generic.runner import runner_address
    from .codegen.target import Target
    target = Target.from_string(args.target)
    start = time.perf_counter()
    try:
        seconds = warm_up(target)
    finally:
        if args.lock:       # a background warm-up (codegen/generic/library.py) is done
            Path(args.lock).unlink(missing_ok=True)
    runner_address(target)
    if target.can_run_on_host():
        from .codegen.runtime import native_runtime_object
        native_runtime_object()       # the thread pool's code, stored with the library
    for family, s in seconds.items():
        console.print(f"  {family:12s} {s:6.2f} s")
    where = library_dir() or "memory only (KILN_GENERIC_DIR=off)"
    console.print(f"generic kernel library for {target.cpu}: {len(seconds)} kernel families in "
                  f"{time.perf_counter() - start:.1f} s, in {where}", soft_wrap=True)
    return 0


# ----------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="Kiln: tune, compile and "
                                     "benchmark tensor programs and ONNX models on this CPU.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what Kiln does")
    sub = parser.add_subparsers(dest="command", required=True)

    tune = sub.add_parser("tune", help="tune a model (default: a ResNet-18-shaped model with "
                          "random weights) or an operator")
    tune.add_argument("model", nargs="?", help="an ONNX file (default: ResNet-18's layers at "
                      "224x224 with random weights; on a CPU with its records in the "
                      "database it is only compiled and compared, else tuned for "
                      f"{_duration(DEFAULT_MODEL_TIME)})")
    tune.add_argument("--op", help="tune one operator instead: matmul, conv2d, softmax, ...")
    tune.add_argument("--shape", help="the operator's shape, e.g. 1024,1024,1024")
    tune.add_argument("--trials", type=int, help="trial budget (records in the database "
                      "count towards it, so a rerun resumes)")
    tune.add_argument("--time", type=parse_duration, metavar="DURATION",
                      help="time budget, e.g. 90s, 10m, 1h: the task scheduler spends it "
                           "where the model's latency is and stops when it runs out (with "
                           "--trials, whichever comes first; a rerun resumes)")
    tune.add_argument("--search", default="xgb", choices=("xgb", "random", "grid"))
    tune.add_argument("--leaders", "--remeasure", dest="leaders", type=int, default=3,
                      metavar="K",
                      help="the confirmation that ends tuning times each task's default and "
                           "its K fastest records side by side and keeps the winner "
                           "(default 3; 0: no confirmation, the fastest record is used)")
    tune.add_argument("--mutations", type=int, default=0, metavar="N",
                      help="also time N mutations of each task's incumbent in the "
                           "confirmation; with --time it then climbs, pass after pass, in "
                           "half of the budget (default 0)")
    tune.add_argument("--no-model-check", dest="model_check", action="store_false",
                      help="keep the confirmed choices without trying each against its "
                           "default inside the compiled model (the check keeps a choice "
                           "only where the model runs faster with it; with --time it "
                           "takes up to 15%% of the budget)")
    tune.add_argument("--cluster", metavar="ADDRESS",
                      help="measure on the `kiln worker`s of the Dask scheduler at ADDRESS "
                           "(tcp://host:8786) whose CPU matches the target; this process "
                           "stays the only writer of the log (needs the cluster extra)")
    tune.set_defaults(func=cmd_tune)

    work = sub.add_parser("worker", help="measure candidates for `kiln tune --cluster` on this "
                          "machine: a Dask worker, one measurement at a time")
    work.add_argument("scheduler", metavar="SCHEDULER_ADDRESS",
                      help="the Dask scheduler, e.g. tcp://10.0.0.5:8786")
    work.add_argument("--name", help="the worker's name in records (default: host-pid)")
    work.add_argument("--threads", type=int, metavar="T", help="threads each measured kernel "
                      "runs with (default: every core); tuners measuring at another count "
                      "send it nothing")
    work.add_argument("--advertise-isa", metavar="F1,F2",
                      help="advertise this vector ISA (e.g. avx2,fma,avx) instead of the "
                           "detected one (tests and dry runs: tuners for this CPU then send "
                           "it nothing)")
    work.add_argument("--host", help="the address to listen on (default: chosen by Dask)")
    work.set_defaults(func=cmd_worker)

    conf = sub.add_parser("confirm", help="time each task's default, fastest records and "
                          "mutations side by side; keep the winners (and the zero-shot "
                          "model's labels)")
    conf.add_argument("model", nargs="?", help="an ONNX file or a bundled model name "
                      "(default: the ResNet-18-shaped default model)")
    conf.add_argument("--leaders", type=int, default=3, metavar="K",
                      help="fastest records per task (default 3)")
    conf.add_argument("--mutations", type=int, default=6, metavar="N",
                      help="mutations of the default per task (default 6)")
    conf.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    conf.set_defaults(func=cmd_confirm)

    comp = sub.add_parser("compile", help="compile a model into a shared library")
    comp.add_argument("model")
    comp.add_argument("-o", "--output", required=True, help="output .so path (.wasm for "
                      "--target wasm32)")
    comp.add_argument("--c-api", action="store_true", help="a C library that runs without "
                      "Python: the .so, lib<prefix>.a and <prefix>.h (kiln/deploy.py)")
    comp.add_argument("--prefix", help="C name prefix (default: from the output name, "
                      "libmodel.so -> model)")
    comp.add_argument("--weights", default="auto", choices=("auto", "embed", "file"),
                      help="--c-api: weights in the library (embed), in <prefix>.weights "
                           "(file), or embedded up to 256 MiB (auto)")
    comp.add_argument("--input-shape", action="append", default=[], metavar="NAME=D,D,...",
                      help="fix a dynamic input's shape (repeatable)")
    comp.set_defaults(func=cmd_compile)

    bench = sub.add_parser("bench", help="Kiln vs numpy executor vs onnxruntime latency")
    bench.add_argument("model", nargs="?", help="an ONNX file (default: the default model of "
                       "`kiln tune`, ResNet-18's layers with random weights)")
    bench.add_argument("--repeat", type=int, default=20)
    bench.set_defaults(func=cmd_bench)

    quant = sub.add_parser("quantize", help="an int8 model via onnxruntime.quantization "
                           "(static QDQ per-channel, or dynamic for transformers)")
    quant.add_argument("model")
    quant.add_argument("-o", "--output", required=True, help="output .onnx path")
    quant.add_argument("--mode", default="static", choices=("static", "dynamic"),
                       help="static: QDQ calibrated activations (CNNs); dynamic: activations "
                            "quantized at run time (transformers)")
    source = quant.add_mutually_exclusive_group()
    source.add_argument("--calibrate", metavar="DIR", help="calibrate on the .npy/.npz files "
                        "of DIR (one sample each; .npz keyed by input name)")
    source.add_argument("--random", type=int, default=8, metavar="N",
                        help="calibrate on N random normal inputs (default 8)")
    quant.add_argument("--per-tensor", action="store_true",
                       help="one weight scale per tensor (default: per output channel)")
    quant.add_argument("--format", default="qdq", choices=("qdq", "qoperator"),
                       help="static mode: QuantizeLinear/DequantizeLinear pairs (qdq) or "
                            "QLinearConv/QLinearMatMul/... (qoperator)")
    quant.add_argument("--activation", default="uint8", choices=("uint8", "int8"),
                       help="static mode: the activations' type (weights are int8)")
    quant.set_defaults(func=cmd_quantize)

    logs = sub.add_parser("logs", help="what the tuning database holds")
    logs.add_argument("--json", action="store_true", help="one JSON object per task")
    logs.add_argument("--check", metavar="MODEL", help="list the records of MODEL's tasks "
                      "that do not fit today's search spaces")
    logs.add_argument("--prune", action="store_true", help="remove stale records (older "
                      "schema; with --check, also the misfits it lists) from your log")
    logs.add_argument("--merge", metavar="SRC.db", help="copy SRC.db's tasks, records (with "
                      "features) and confirmations into the log (--db DEST); rows it already "
                      "holds are skipped, so merging twice adds nothing")
    logs.add_argument("--train-zero-shot", metavar="DIR", help="train the zero-shot model of "
                      "every vector ISA on the log's confirmations into DIR (the shipped "
                      "log's go to tuning_logs/zero_shot after it changes)")
    logs.add_argument("--export", dest="export_file", metavar="FILE.jsonl",
                      help="write the log's tasks, records (with provenance and features) "
                           "and confirmations as plain JSON lines")
    logs.add_argument("--model", help="with --export: only the tasks of this ONNX model")
    logs.add_argument("--import", dest="import_file", metavar="FILE.jsonl",
                      help="add the records of an exported file to the log (--db); ones "
                           "it already holds are skipped, so importing twice adds nothing")
    logs.add_argument("--target", default="native", help=argparse.SUPPRESS)
    logs.set_defaults(func=cmd_logs)

    warm = sub.add_parser("warmup", help="build the generic kernel library for this CPU "
                          "once (tiered compiles then start on it at once)")
    warm.add_argument("--target", default="native", help='"native" or "llvm -mcpu=..."')
    warm.add_argument("--lock", help=argparse.SUPPRESS)
    warm.set_defaults(func=cmd_warmup)

    for p in (tune, conf, comp, bench, logs):
        p.add_argument("--db", help="tuning database file (default: your own log, "
                       "KILN_TUNING_DB or ~/.local/share/kiln/tuning.db, layered over the "
                       "records shipped with Kiln; new measurements go to your log)")
    for p in (tune, bench):
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="also list each kernel of the compiled model (and log)")
        p.add_argument("--json", action="store_true",
                       help="end with one JSON object of the comparison's figures")
    for p in (tune, conf, comp, bench):
        p.add_argument("--target", default="native", help='"native" or "llvm -mcpu=..."')
        p.add_argument("--threads", type=int, metavar="N",
                       help="threads to measure / run at (same as KILN_NUM_THREADS=N; default: "
                            "KILN_NUM_THREADS, else every core); schedules measured at N are "
                            "preferred when compiling")
        p.add_argument("--layout", default="nchwc", choices=("nchwc", "nchw"),
                       help="conv activations channel-blocked between convs (nchwc, the "
                            "default) or in the model's NCHW layout")
        p.add_argument("--no-winograd", dest="winograd", action="store_false",
                       help="run every conv directly (default: 3x3 stride-1 convs of the "
                            "nchwc layout as Winograd transforms + batched GEMMs where faster)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "op", None) and getattr(args, "model", None):
        console.print("[red]error:[/] give a model or --op, not both")
        return 2
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        console.print(f"[red]error:[/] --threads {threads}: give a thread count >= 1",
                      soft_wrap=True)
        return 2
    try:
        with threads_env(threads):      # --threads N is KILN_NUM_THREADS=N for the command
            return args.func(args)
    except KilnError as exc:
        # never wrapped: an error names a path or a shape that a grep should find whole
        console.print(f"[red]error:[/] {type(exc).__name__}: {escape(str(exc))}",
                      soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())

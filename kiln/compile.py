"""kiln.compile / kiln.tune / kiln.load_compiled: the public model-level entry points."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from .autotune.task import Task
from .autotune.tuner import Progress, TuneResult, tune_task
from .autotune.database import Database
from .autotune.default_db import open_database
from .codegen.runtime_config import resolve_threads
from .codegen.target import Target
from .graph.compile.model import tune_model
from .graph.compile.tiers import tiered_setting
from .graph.ir import Graph
from .graph.runtime.dynamic import DynamicModel, compile_specialized
from .graph.runtime.staged import StagedModel
from .graph.runtime.executor import CompiledModel, load_compiled
from .jit.function import JitFunction
from .te.errors import KilnError


def compile(model, target: str = "native", db="default",  # noqa: A001 - the public name
            input_shapes=None, jobs: int | None = None, layout: str = "nchwc",
            threads: int | None = None, winograd: bool = True,
            constants=None, zero_shot: bool = False,
            tiered: bool | None = None) -> CompiledModel | DynamicModel | StagedModel:
    """Compile an ONNX model (path or ModelProto) with the best schedules known in `db` for
    running at `threads` (default: KILN_NUM_THREADS, else every core), falling back to
    default schedules. `db`: "default" (the user's tuning log layered over the records
    shipped with Kiln, as the CLI uses), a path or Database, or None (no records).
    `jobs`: kernels compiled in parallel worker processes (default: KILN_NUM_THREADS, else
    every core). `layout`: "nchwc" keeps conv activations channel-blocked, "nchw" keeps the
    model's layout. `winograd`: 3x3 stride-1 convs of the blocked layout run as Winograd
    transforms + batched GEMMs where that is faster (False: every conv direct).
    `zero_shot`: a task with no record of its own takes the schedule a cost model trained on
    `db`'s other records ranks best (needs a database; nothing changes with db=None). Off by
    default: on the leave-one-model-out benchmark (benchmarks/zero_shot.py, RESULTS.md) its
    picks ran slower than the defaults.
    `tiered`: return at once on a first tier (shape-generic kernels built once per machine,
    graph/generic, where they cover the model; else kernels built fast), build the
    optimised ones in the background after the first run and swap them in between runs
    (graph/compile/tiers.py; `model.optimized()` waits for them); None: KILN_TIERED, else
    on.

    Shapes: `input_shapes` ({name: shape}) pins symbolic input dims; `constants` ({name:
    array}) gives the values of graph inputs that decide shapes (a Reshape's shape, a Slice's
    starts, ...). When every shape is known, the result is a CompiledModel. Otherwise it is a
    DynamicModel (graph/runtime/dynamic.py): each run at a new input shape, or a new value of a
    shape-deciding input, compiles a specialisation (same database and options) that later
    runs reuse. A model with NonZero, Unique or NonMaxSuppression (output sizes that depend
    on the data) is a StagedModel (graph/runtime/staged.py): compiled in stages around those ops."""
    target = Target.from_string(target)     # parsed once: below, a Target
    threads = None if threads is None else int(threads)
    if threads is not None and threads < 1:
        raise KilnError(f"kiln.compile(threads={threads}): the thread count the model runs at "
                        "must be >= 1 (None: KILN_NUM_THREADS, else every core)")
    threads, jobs = resolve_threads(threads), resolve_threads(jobs)     # defaulted once, here
    return compile_specialized(model, target=target, db=db, input_shapes=input_shapes,
                               jobs=jobs, layout=layout, threads=threads, winograd=winograd,
                               constants=constants, zero_shot=zero_shot,
                               tiered=tiered_setting(tiered))


DEFAULT_TRIALS = 200


def tune(model_or_task, target: str = "native", trials: int | None = None, db="default",
         callback: Callable[[Progress], None] | None = None,
         time_budget: float | None = None, **options):
    """Tune a model (ONNX path or ModelProto: its tasks share the budget), a kiln.jit
    function (`kiln.tune(f, example_args, ...)`: the tasks of the signature of those
    arguments, for the function's own target) or one autotune Task; every measurement is
    recorded in `db`: "default" (the user's tuning log, layered over the shipped records;
    see kiln.autotune.default_db), a path or Database, or None (a throwaway log, deleted
    when tuning ends: only the returned result remains).

    The budget: `trials` (records in the database count towards it, so a rerun resumes)
    and/or `time_budget` seconds of tuning, whichever runs out first; a model's task
    scheduler spends it where the model's latency is. Neither given: 200 trials."""
    jitted = None
    if isinstance(model_or_task, JitFunction):
        # kiln.tune(f, example_args, ...): the arguments pick the signature whose tasks are
        # tuned (the target is the jitted function's); its next call compiles with the records
        jitted, example = model_or_task, (tuple(target) if isinstance(target, (tuple, list))
                                          else (target,))
        model_or_task, target = jitted.trace(*example), jitted.target
    target = Target.from_string(target)     # parsed once: below, a Target
    if time_budget is not None and not (isinstance(time_budget, (int, float))
                                        and time_budget > 0):
        raise KilnError(f"kiln.tune(time_budget={time_budget!r}): give a number of seconds > 0")
    if trials is not None and trials < 0:
        raise KilnError(f"kiln.tune(trials={trials}): give a trial count >= 0")
    if trials is None and time_budget is None:
        trials = DEFAULT_TRIALS
    if db is None:
        with tempfile.TemporaryDirectory(prefix="kiln-tune-") as tmp:
            database = Database(Path(tmp) / "tune.db")
            try:
                return tune(model_or_task, target, trials, database, callback,
                            time_budget=time_budget, **options)
            finally:
                database.close()
    if jitted is not None:
        reports = tune_model(model_or_task, target, trials, db, callback=callback,
                             time_budget=time_budget, **options)
        jitted.clear_cache()
        return reports
    if isinstance(model_or_task, Task):
        return tune_task(model_or_task, target, trials if trials is not None else 2 ** 62,
                         open_database(db), callback=callback, time_budget=time_budget,
                         **options)
    if isinstance(model_or_task, (str, os.PathLike, Graph)) or hasattr(model_or_task, "graph"):
        return tune_model(model_or_task, target, trials, db, callback=callback,
                          time_budget=time_budget, **options)
    raise KilnError(f"kiln.tune takes an ONNX model (path or ModelProto), a kiln.jit function "
                    f"(with example arguments) or an autotune Task, got "
                    f"{type(model_or_task).__name__}")


__all__ = ["compile", "tune", "load_compiled", "CompiledModel", "DynamicModel", "StagedModel",
           "TuneResult"]

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
from .graph.compile import compile_model, tune_model
from .graph.executor import CompiledModel, load_compiled
from .te.errors import KilnError


def compile(model, target: str = "native", db="default",  # noqa: A001 - the public name
            input_shapes=None, jobs: int | None = None, layout: str = "nchwc",
            threads: int | None = None, winograd: bool = True) -> CompiledModel:
    """Compile an ONNX model (path or ModelProto) with the best schedules known in `db` for
    running at `threads` (default: KILN_NUM_THREADS, else every core), falling back to
    default schedules. `db`: "default" (the user's tuning log layered over the records
    shipped with Kiln, as the CLI uses), a path or Database, or None (no records).
    `jobs`: kernels compiled in parallel worker processes (default: KILN_NUM_THREADS, else
    every core). `layout`: "nchwc" keeps conv activations channel-blocked, "nchw" keeps the
    model's layout. `winograd`: 3x3 stride-1 convs of the blocked layout run as Winograd
    transforms + batched GEMMs where that is faster (False: every conv direct)."""
    return compile_model(model, target=target, db=db, input_shapes=input_shapes, jobs=jobs,
                         layout=layout, threads=threads, winograd=winograd)


DEFAULT_TRIALS = 200


def tune(model_or_task, target: str = "native", trials: int | None = None, db="default",
         callback: Callable[[Progress], None] | None = None,
         time_budget: float | None = None, **options):
    """Tune a model (ONNX path or ModelProto: its tasks share the budget) or one autotune
    Task; every measurement is recorded in `db`: "default" (the user's tuning log, layered
    over the shipped records; see kiln.autotune.default_db), a path or Database, or None (a
    throwaway log, deleted when tuning ends: only the returned result remains).

    The budget: `trials` (records in the database count towards it, so a rerun resumes)
    and/or `time_budget` seconds of tuning, whichever runs out first; a model's task
    scheduler spends it where the model's latency is. Neither given: 200 trials."""
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
    if isinstance(model_or_task, Task):
        return tune_task(model_or_task, target, trials if trials is not None else 2 ** 62,
                         open_database(db), callback=callback, time_budget=time_budget,
                         **options)
    if isinstance(model_or_task, (str, os.PathLike)) or hasattr(model_or_task, "graph"):
        return tune_model(model_or_task, target, trials, db, callback=callback,
                          time_budget=time_budget, **options)
    raise KilnError(f"kiln.tune takes an ONNX model (path or ModelProto) or an autotune Task, "
                    f"got {type(model_or_task).__name__}")


__all__ = ["compile", "tune", "load_compiled", "CompiledModel", "TuneResult"]

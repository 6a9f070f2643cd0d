"""From the tuning log to a schedule: the best stored record that fits today's space.

A compile asks `apply_best` for each task. The search goes: this CPU's records at the thread
count the kernel will run at, then at other counts (Database.best ranks them), then, with
`similar_cpus`, another CPU of the same vector ISA; else the space's default. A record whose
config does not fit the space (a knob the space no longer has, a value it no longer offers)
is skipped, logged once per task, and counted; a record never makes a compile fail. A
confirmed choice (autotune/confirm.py: the default and the leading records timed again side
by side) outranks the plain minimum of the records while no faster record has been added. Records
of an older schema are renamed on the way (autotune/migrate.py) where the log is writable.
"""
from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass

from .. import codegen
from ..codegen.runtime_config import resolve_threads
from ..codegen.target import Target
from ..schedule import lower
from ..schedule.schedule import Schedule
from .database import Choice, Database, Record
from .migrate import legacy_knob_names, rename_config
from .space.rules import SearchSpace
from .task import Task
from .zero_shot import ZERO_SHOT_SOURCE, cached_pick

log = logging.getLogger(__name__)

# the source of a schedule measured on another CPU of the same vector ISA
SIMILAR_CPU_SOURCE = "similar CPU"
DEFAULT_SOURCE = "default (no tuning records)"
CONFIRMED_DEFAULT_SOURCE = "default (confirmed faster than the tuned records)"
# stored records looked at, fastest first, before settling for the default
MAX_CANDIDATES = 64
_warned: set[tuple[str, str]] = set()      # (task key, target) whose skips were logged


def canonical_target(target: str | Target) -> str:
    """The database spelling of a target ("native" becomes the host CPU's full string), for
    callers holding a user's string; below the API a Target's `str()` is that spelling."""
    return str(Target.from_string(target))


@dataclass(frozen=True)
class Selection:
    """The record a task's schedule comes from (None: the default) and the faster records
    that were skipped because their configs do not fit the task's space."""

    record: Record | None
    skipped: tuple[tuple[Record, str], ...] = ()
    # without a record: the zero-shot model file that ranks candidate configs (None: the
    # space's default), see autotune/zero_shot.py
    zero_shot: str | None = None
    # with `zero_shot`: the best configs of the most similar tasks, ranked with the default's
    # mutations (zero_shot.donors_for)
    donors: tuple[dict, ...] = ()
    # the confirmation this selection follows (autotune/confirm.py), if any
    choice: Choice | None = None

    def source(self, target: str) -> str:
        if self.record is None:
            return CONFIRMED_DEFAULT_SOURCE if self.choice is not None else DEFAULT_SOURCE
        if self.record.target == target:
            return "database"
        cpu = Target.from_string(self.record.target).cpu
        return f"{SIMILAR_CPU_SOURCE}: tuned on {cpu} (same vector ISA)"


def upgrade_legacy_records(db: Database, space: SearchSpace) -> int:
    """Rename the task's records of an older schema in `db` (a writable log) to today's
    knob names; returns how many. A read-only log is left as it is."""
    legacy = db.legacy_records(space.task.workload_key)
    if not legacy:
        return 0
    names = legacy_knob_names(space)
    renamed = {rid: new for rid, config in legacy
               if (new := rename_config(space, config, names)) is not None}
    try:
        return db.upgrade_records(renamed)
    except sqlite3.OperationalError as exc:     # a read-only file or folder
        log.info("%s: cannot rename its older records in %s (%s)", space.task.name, db, exc)
        return 0


def select_record(task: Task, target: Target, db: Database | None, threads: int,
                  similar_cpus: bool = True, space: SearchSpace | None = None) -> Selection:
    """The fastest stored record of `task` (see the module docstring) for running at
    `threads` that fits its space."""
    if db is None:
        return Selection(None)
    task = task.retargeted(target)
    space = space or SearchSpace(task, threads, target)
    target = str(target)        # the database spelling, below
    upgrade_legacy_records(db, space)
    confirmed = confirmed_selection(task, target, db, threads, space)
    if confirmed is not None:
        return confirmed
    skipped: list[tuple[Record, str]] = []
    tiers = [target] + (db.similar_targets(task.workload_key, target) if similar_cpus else [])
    chosen = None
    for tier in tiers:
        for record in db.best(task.workload_key, tier, k=MAX_CANDIDATES, threads=threads):
            reason = space.misfit(record.config)
            if reason is None:
                chosen = record
                break
            skipped.append((record, reason))
        if chosen is not None:
            break
    if skipped and (task.workload_key, target) not in _warned:
        _warned.add((task.workload_key, target))
        log.warning("%s: skipped %d stored record(s) that do not fit today's search space "
                    "(first: %s); `kiln logs` counts them, `kiln logs --prune` removes them",
                    task.name, len(skipped), skipped[0][1])
    return Selection(chosen, tuple(skipped))


def confirmed_selection(task: Task, target: str, db: Database, threads: int,
                        space: SearchSpace) -> Selection | None:
    """The selection a current confirmation of `task` on this CPU makes (None: there is no
    confirmation, a faster record came after it, or its config no longer fits the space).
    A confirmation of a task without records (its default against mutations of it: `kiln
    confirm`) stands until the task's first record."""
    choice = db.choice(task.workload_key, target, threads)
    if choice is None or space.misfit(choice.config) is not None:
        return None
    best = db.best(task.workload_key, target, 1, threads=threads)
    if best and not choice.is_current(best[0].mean_cost):
        return None
    if choice.is_default:
        return Selection(None, choice=choice)
    record = Record(task.workload_key, target, choice.config, (choice.seconds,), "OK",
                    threads=threads, kiln_version=choice.kiln_version,
                    timestamp=choice.timestamp)
    return Selection(record, choice=choice)


def apply_best(task: Task, target: str | Target, db: Database | None,
               threads: int | None = None, similar_cpus: bool = True
               ) -> tuple[Schedule, list, str]:
    """The best known schedule of `task` on `target` for running at `threads` (default:
    KILN_NUM_THREADS, else every core), and where it came from: "database", "similar CPU:
    tuned on <cpu> (same vector ISA)" or "default (no tuning records)"."""
    target = Target.from_string(target)     # a public entry point: parsed once, here
    threads = resolve_threads(threads)
    task = task.retargeted(target)
    space = SearchSpace(task, threads, target)
    selection = select_record(task, target, db, threads, similar_cpus, space)
    return apply_selection(space, selection)


def apply_selection(space: SearchSpace, selection: Selection) -> tuple[Schedule, list, str]:
    """The schedule `selection` names and its source: the record's config; without one, the
    best-ranked candidate of the zero-shot model (source "zero-shot") when it has one and it
    is not the default; else the space's default, made for `space.threads`."""
    target = space.task.target
    if selection.record is not None:
        sch, args = space.apply(selection.record.config)
        return sch, args, selection.source(target)
    if selection.zero_shot is not None:
        config, picked = cached_pick(space, selection.zero_shot, donors=selection.donors)
        if picked:
            sch, args = space.apply(config)
            return sch, args, ZERO_SHOT_SOURCE
    sch, args = space.apply(space.default_config())
    return sch, args, selection.source(target)


def build_best(task: Task, target: str | Target, db: Database | None,
               threads: int | None = None):
    """Compile the best known schedule of `task` for `threads` (see apply_best) into a Kernel."""
    target = Target.from_string(target)     # a public entry point: parsed once, here
    sch, args, source = apply_best(task, target, db, threads)
    log.info("%s: building the schedule from the %s", task.name, source)
    func = lower(sch, args, name=task.name)
    return codegen.build(func, target=target, num_threads=threads)

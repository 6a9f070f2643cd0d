"""Per-process counters for node identities (the uids of Var, Operation and Buffer).

Why: a uid is a node's identity, and DAGs travel pickled to worker processes with their
uids. A forked worker's counters start where the parent's stood at the fork, so nodes made
there (the axes a schedule splits off) could take a uid the parent drew after the fork: two
loop variables of one kernel then compare equal (a compile worker failed on that). So each
process draws from its own range, its pid x 2**32 onward, reset after every fork; a spawned
process starts its range at import.
"""
from __future__ import annotations

import itertools
import os
import weakref

_counters: "weakref.WeakSet[UidCounter]" = weakref.WeakSet()


class UidCounter:
    """next(counter): the next uid of this process's range."""

    def __init__(self) -> None:
        self.reset()
        _counters.add(self)

    def reset(self) -> None:
        self._next = itertools.count(os.getpid() << 32)

    def __iter__(self) -> "UidCounter":
        return self

    def __next__(self) -> int:
        return next(self._next)


def _after_fork_in_child() -> None:
    for counter in list(_counters):
        counter.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)

"""Claims: two tuning runs on one log never measure the same candidate twice.

Before a run measures a config of a task (on a target, at a thread count) it claims it in
the `claims` table of the same SQLite file, in one IMMEDIATE transaction that also checks the
records: a config already recorded, or claimed by another live run, is not taken. The claim
goes when the record is committed. A claim is another run's until its lease expires or, on
this machine, until the process that made it is gone (a tuner killed with -9 leaves claims
that the next run takes over at once, so a rerun resumes as before).

Why in the log itself: it is the one thing every run already shares, with the locking to
make check-and-claim atomic; no server is needed for two local runs.
"""
from __future__ import annotations

import os
import platform
import time
import uuid

LEASE_SECONDS = 1800.0      # a claim of a run on another machine (or a reused pid) expires


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Claims:
    """The claims of one tuning run (an owner) in a Database's file."""

    def __init__(self, db, lease: float = LEASE_SECONDS):
        self.conn = db._db.conn
        self.lease = lease
        self.host = platform.node()
        self.owner = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS main.claims (task_key TEXT, target TEXT, "
            "threads INTEGER, config_key TEXT, owner TEXT, expires REAL, "
            "PRIMARY KEY (task_key, target, threads, config_key))")
        self.conn.commit()

    def _stale(self, owner: str, expires: float, now: float) -> bool:
        if owner == self.owner:
            return True                 # ours: take it again
        if expires < now:
            return True
        host, _, rest = owner.partition(":")
        pid = rest.split(":", 1)[0]
        return host == self.host and pid.isdigit() and not _pid_alive(int(pid))

    def take(self, task_key: str, target: str, threads: int, keys: list[str]) -> list[str]:
        """Claim the config keys no record holds and no other live run has claimed; returns
        those now this run's (in the order given)."""
        now = time.time()
        granted = []
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for key in keys:
                recorded = self.conn.execute(
                    "SELECT 1 FROM main.records WHERE task_key = ? AND target = ? AND "
                    "config_key = ? AND (threads = ? OR threads IS NULL) LIMIT 1",
                    (task_key, target, key, threads)).fetchone()
                if recorded:
                    continue
                row = self.conn.execute(
                    "SELECT owner, expires FROM main.claims WHERE task_key = ? AND target = ? "
                    "AND threads = ? AND config_key = ?", (task_key, target, threads, key)
                ).fetchone()
                if row is not None and not self._stale(row[0], row[1], now):
                    continue
                self.conn.execute(
                    "INSERT OR REPLACE INTO main.claims VALUES (?, ?, ?, ?, ?, ?)",
                    (task_key, target, threads, key, self.owner, now + self.lease))
                granted.append(key)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return granted

    def release(self, task_key: str, target: str, threads: int, key: str,
                commit: bool = True) -> None:
        """Drop this run's claim of one config (its record is committed, or it was not
        measured after all). `commit=False`: in the transaction the record's commit ends."""
        self.conn.execute("DELETE FROM main.claims WHERE task_key = ? AND target = ? AND "
                          "threads = ? AND config_key = ? AND owner = ?",
                          (task_key, target, threads, key, self.owner))
        if commit:
            self.conn.commit()

    def renew(self) -> None:
        """Extend the lease of every claim of this run (a long queue on a cluster)."""
        self.conn.execute("UPDATE main.claims SET expires = ? WHERE owner = ?",
                          (time.time() + self.lease, self.owner))
        self.conn.commit()

    def release_all(self) -> None:
        """Drop every claim of this run (it ends, or was interrupted)."""
        try:
            self.conn.execute("DELETE FROM main.claims WHERE owner = ?", (self.owner,))
            self.conn.commit()
        except Exception:  # noqa: BLE001 - a closed log: the pid check frees them anyway
            pass

"""Tuning progress off a terminal: one plain line at a steady interval.

Under nohup, in CI or into a log file a live bar prints only its last state; this prints
what a reader of the log wants every `interval` seconds (KILN_PROGRESS_INTERVAL, default
30): trials done, the best latency so far, the workers busy (on a cluster) and the time
left, plus a last line when tuning ends.
"""
from __future__ import annotations

import math
import os
import threading
import time
from typing import Callable

DEFAULT_INTERVAL = 30.0


def _interval() -> float:
    raw = os.environ.get("KILN_PROGRESS_INTERVAL", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_INTERVAL
    except ValueError:
        value = DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LineProgress:
    """A tuner callback (like the CLI's bar) that prints a line every `interval` seconds
    from a background thread, so a long trial or a quiet cluster still shows it is alive."""

    def __init__(self, total: int | None, seconds: float | None,
                 print_line: Callable[[str], None] = print, interval: float | None = None):
        self.total, self.seconds = total, seconds
        self.print_line = print_line
        self.interval = interval or _interval()
        self.latest = None
        self.updates = 0
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="kiln-progress-lines")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.latest != "reused":
            self.print_line(self.line(final=True))

    def __call__(self, p) -> None:
        self.latest = p
        self.updates += 1

    def reused(self, held: int, total: int | None) -> None:
        if not self.updates:
            self.print_line(f"nothing measured: all from the database ({held} trials)")
            self.latest = "reused"

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.latest != "reused":
                self.print_line(self.line())

    def line(self, final: bool = False) -> str:
        elapsed = time.perf_counter() - self.started
        p = self.latest
        stamp = time.strftime("%H:%M:%S")
        if p is None:
            return f"[{stamp}] tuning: no trial done yet ({_clock(elapsed)} elapsed)"
        done = f"{p.trials_done}/{p.trials_total}" if self.seconds is None else \
            f"{p.trials_done}"
        best = (f"best {p.best_seconds * 1e3:.4g} ms ({p.best_gflops:.1f} GFLOPS) on "
                f"{p.task_name}" if math.isfinite(getattr(p, "best_seconds", math.inf))
                else f"best {p.best_gflops:.1f} GFLOPS on {p.task_name}")
        parts = [f"{done} trials", best]
        if getattr(p, "workers", ""):
            parts.append(f"workers busy {p.workers}")
        if final:
            parts.append(f"done in {_clock(elapsed)}")
        else:
            left = (max(0.0, self.seconds - p.elapsed) if self.seconds is not None
                    else p.eta_seconds)
            parts.append(f"{_clock(left)} left")
        return f"[{stamp}] tuning: " + ", ".join(parts)

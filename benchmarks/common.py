"""Shared benchmark helpers: median timing, thread limits for numpy, the closing JSON line."""
from __future__ import annotations

import json
import statistics
import time
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

from kiln.codegen.runtime_config import threads_env


def median_seconds(fn, repeat: int = 7, number: int = 1, warmup: int = 1) -> float:
    """Median over `repeat` runs of the mean time of `number` calls of fn()."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def kiln_threads(n: int):
    """Set KILN_NUM_THREADS for kernels loaded inside the block (the runtime reads it at load)."""
    return threads_env(n)


@contextmanager
def numpy_threads(n: int):
    """Limit numpy's BLAS (and any OpenMP pool) to n threads."""
    with threadpool_limits(limits=n):
        yield


def print_table(headers: list[str], rows: list[list]) -> None:
    widths = [max(len(str(h)), *(len(_fmt(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  ".join(_fmt(v).rjust(w) for v, w in zip(r, widths)))


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def emit_json(figures: dict) -> None:
    """The last line of every benchmark: one JSON object with its figures."""
    print(json.dumps(figures, sort_keys=True))

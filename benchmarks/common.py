"""Shared benchmark helpers: median timing, thread limits for numpy, the closing JSON line."""
from __future__ import annotations

import json
import os
import statistics
import time
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

from kiln.codegen.runtime_config import threads_env

# The caller's KILN_TIERED (None: kiln.compile's default, tiered), read before the line below.
CALLER_TIERED = os.environ.get("KILN_TIERED")
# Benchmarks time optimised models, and a tiered compile (kiln.compile's default) runs on its
# first tier until the optimised one is swapped in: they compile untiered unless the caller
# says otherwise. compile_time_ort.py measures the first result under the caller's setting.
os.environ.setdefault("KILN_TIERED", "0")


# The pause before each timing, for the worker threads runtimes leave spinning after a call:
# one value for the benchmarks and `kiln bench` (kiln/bench.py explains it). Measured on
# znver4: the tuned 1024^3 GEMM at 2 threads ran at 140 GFLOPS right after a full-thread
# `a @ b` (its correctness check) and at 218 after a pause.
from kiln.bench import SETTLE_SECONDS  # noqa: E402


def median_seconds(fn, repeat: int = 7, number: int = 1, warmup: int = 1,
                   settle: float = SETTLE_SECONDS, clock=time.perf_counter) -> float:
    """Median over `repeat` runs of the mean time of `number` calls of fn(), started after
    `settle` seconds of quiet (see SETTLE_SECONDS). `clock`: time.perf_counter (wall), or
    time.thread_time (this thread's CPU time: on a shared machine it leaves out the time
    slices other processes take, for code that runs on the calling thread only)."""
    time.sleep(settle)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = clock()
        for _ in range(number):
            fn()
        times.append((clock() - start) / number)
    return statistics.median(times)


def interleaved_medians(fn_a, fn_b, rounds: int = 5, repeat: int = 10,
                        clock=time.perf_counter, number: int = 1) -> tuple[float, float, float]:
    """(median seconds of fn_a, of fn_b, median of the per-round ratios a/b) over `rounds`
    rounds that each time a then b (`repeat`-run medians of `number` calls each): both sides
    of each ratio see the same machine load, which back-to-back blocks of runs on a shared
    machine do not. `clock`: as in median_seconds."""
    a, b = [], []
    for _ in range(rounds):
        a.append(median_seconds(fn_a, repeat, number, clock=clock))
        b.append(median_seconds(fn_b, repeat, number, clock=clock))
    return (statistics.median(a), statistics.median(b),
            statistics.median(x / y for x, y in zip(a, b)))


def calls_per_sample(fn, seconds: float = 0.002) -> int:
    """How many calls of fn() make a sample of about `seconds`: a sample of one 20 us run
    right after median_seconds' settling sleep times a CPU still waking up (on the VMs here
    the first runs after a pause take several times as long), not the code."""
    fn()
    start = time.perf_counter()
    fn()
    one = time.perf_counter() - start
    return max(1, min(1000, int(seconds / max(one, 1e-7))))


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


def ort_session(model, threads: int):
    """An onnxruntime session of `model` (a ModelProto) at `threads` intra-op threads."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def sized_bundled_model(name: str):
    """The bundled models the thread and tuning benchmarks run at reduced sizes (a few ms
    each), as ModelProtos; None for any other name."""
    from kiln.graph import models
    sized = {"mobilenetv2_like": lambda: models.mobilenetv2_like(image_size=128),
             "resnet18_like": lambda: models.resnet18_like(image_size=112),
             "bert_like": lambda: models.bert_like_encoder(seq=64, hidden=256, layers=2)}
    return sized[name]() if name in sized else None

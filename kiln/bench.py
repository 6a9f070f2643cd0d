"""Side-by-side latency of a model: Kiln's compiled kernels, the numpy executor, onnxruntime.

All three run the same input at the same thread count (KILN_NUM_THREADS, default: all cores);
numpy's BLAS is limited to it with threadpoolctl. Latency is the median of `repeat` runs.
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from .codegen.runtime_config import resolve_threads
from .graph.onnx.load import load_onnx
from .graph.passes.fold_constants import fold_constants
from .graph.passes.simplify import simplify
from .graph.reference import run_reference


# Runtimes keep their worker threads spinning for a while after a call (OpenBLAS ~0.1 s,
# onnxruntime's intra-op pool, Kiln's pool ~200 us) before they sleep: a runtime timed right
# after another one would share the cores with those spinners. Each timing starts after this
# pause (benchmarks/common.py uses the same one).
SETTLE_SECONDS = 0.3
# about how long the numpy executor is timed for (at least 3 runs)
NUMPY_SECONDS = 3.0


def median_seconds(fn, repeat: int, settle: float = SETTLE_SECONDS) -> float:
    """Median of `repeat` timed calls of fn(), after `settle` seconds of quiet and a warm-up."""
    time.sleep(settle)
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_inputs(graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        if v.dtype.startswith("float"):
            out.append(rng.standard_normal(v.shape).astype(v.dtype))
        else:
            out.append(rng.integers(0, 8, size=v.shape).astype(v.dtype))
    return out


def _onnxruntime_session(model, threads: int):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    source = model if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def compare_model(model, compiled, repeat: int = 20, name: str | None = None):
    """Rows for a table ([runtime, ms, ratio, error]) and a dict of figures (`name`: the
    model's, default the file's); the baselines run at the thread count the model was
    compiled for. The numpy executor runs the model's own graph, as onnxruntime does."""
    threads = resolve_threads(compiled.plan.meta.get("threads"))
    graph = fold_constants(simplify(load_onnx(model)))
    inputs = random_inputs(graph)
    kiln_out = compiled.run(inputs)
    t_kiln = median_seconds(lambda: compiled.run(inputs), repeat)
    with threadpool_limits(limits=threads):
        start = time.perf_counter()
        ref = list(run_reference(graph, inputs).values())
        # the numpy executor is 5-25x slower than Kiln: a few seconds of it is enough
        numpy_repeat = max(3, min(repeat, int(NUMPY_SECONDS / (time.perf_counter() - start))))
        t_numpy = median_seconds(lambda: run_reference(graph, inputs), numpy_repeat)
    err_numpy = max(float(np.max(np.abs(a - b))) for a, b in zip(kiln_out, ref))
    rows = [["kiln", f"{t_kiln * 1e3:.3f}", "1.00x", "-"],
            ["numpy executor", f"{t_numpy * 1e3:.3f}", f"{t_numpy / t_kiln:.2f}x slower"
             if t_numpy >= t_kiln else f"{t_kiln / t_numpy:.2f}x faster", f"{err_numpy:.2e}"]]
    if name is None:
        name = os.path.basename(str(model)) if isinstance(model, (str, os.PathLike)) else \
            (model.graph.name or "model")
    figures = {"bench": "model", "model": name, "threads": threads,
               "kiln_ms": round(t_kiln * 1e3, 4), "numpy_ms": round(t_numpy * 1e3, 4),
               "repeat": repeat, "numpy_repeat": numpy_repeat,
               "kiln_speedup_vs_numpy": round(t_numpy / t_kiln, 3),
               "max_abs_error_vs_numpy": err_numpy}
    session = _onnxruntime_session(model, threads)
    if session is not None:
        feeds = {v.name: a for v, a in zip(graph.inputs, inputs)}
        ort_out = session.run(None, feeds)
        t_ort = median_seconds(lambda: session.run(None, feeds), repeat)
        err_ort = max(float(np.max(np.abs(a - b))) for a, b in zip(kiln_out, ort_out))
        rows.append(["onnxruntime", f"{t_ort * 1e3:.3f}", f"{t_ort / t_kiln:.2f}x slower"
                     if t_ort >= t_kiln else f"{t_kiln / t_ort:.2f}x faster", f"{err_ort:.2e}"])
        figures.update(ort_ms=round(t_ort * 1e3, 4), kiln_over_ort_latency=round(
            t_kiln / t_ort, 3), max_abs_error_vs_ort=err_ort)
    return rows, figures

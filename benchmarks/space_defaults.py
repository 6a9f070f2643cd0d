"""Default (untuned) schedules of memory-bound anchors: this tree's defaults vs an older
revision's, interleaved in one process (medians of many rounds; the machine is shared).

    python benchmarks/space_defaults.py [--baseline REV] [--threads 1,2] [--rounds 15]
                                        [--only dw,pool,gemv,conv,pad]

The baseline default config comes from autotune/space/rules.py at git revision REV (loaded as a
module); it is applied by the current space, which also checks that stored configs keep
their meaning. Every kernel is checked against the TE reference first. Prints a table and,
last, one JSON line.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln import codegen, te  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.schedule import lower  # noqa: E402
from kiln.te import ops  # noqa: E402
from kiln.te.reference import evaluate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def depthwise(c: int, h: int, stride: int) -> Task:
    """MobileNetV2's depthwise 3x3 group: conv, bias add, clip(0, 6)."""
    X = te.placeholder((1, c, h, h), name="X")
    W = te.placeholder((c, 1, 3, 3), name="W")
    b = te.placeholder((c, 1, 1), name="bias")
    D = ops.depthwise_conv2d_nchw(X, W, stride=stride, padding=1)
    A = te.compute(D.shape, lambda n, k, y, x: D[n, k, y, x] + b[k, 0, 0], name="add")
    C = te.compute(D.shape, lambda *i: te.minimum(te.maximum(A(*i), 0.0), 6.0), name="clip")
    return Task(f"dw{c}x{h}s{stride}", (C,), (X, W, b, C))


def gemv(k: int, n: int) -> Task:
    """The classifier: [1, k] @ [k, n] + bias."""
    A = te.placeholder((1, k), name="A")
    B = te.placeholder((k, n), name="B")
    b = te.placeholder((n,), name="b")
    M = ops.matmul(A, B, name="matmul")
    C = te.compute(M.shape, lambda i, j: M[i, j] + b[j], name="add")
    return Task(f"gemv{k}x{n}", (C,), (A, B, b, C))


def maxpool(c: int, h: int) -> Task:
    """ResNet's stem pool: 3x3 stride 2 pad 1."""
    X = te.placeholder((1, c, h, h), name="X")
    P = ops.max_pool2d(X, 3, stride=2, padding=1, name="maxpool")
    return Task(f"maxpool{c}x{h}", (P,), (X, P))


def conv(c: int, h: int, k: int) -> Task:
    """A padded 3x3 conv (its pad stage is materialised by default)."""
    return Task.from_op("conv2d", (1, c, h, h, k, 3, 3, 1, 1))


TASKS = {
    "dw": lambda: [depthwise(32, 112, 1), depthwise(96, 112, 2), depthwise(144, 56, 1),
                   depthwise(144, 56, 2), depthwise(192, 28, 1), depthwise(576, 14, 1),
                   depthwise(960, 7, 1)],
    "pool": lambda: [maxpool(64, 112)],
    "gemv": lambda: [gemv(512, 1000), gemv(1280, 1000)],
    "conv": lambda: [conv(64, 56, 64), conv(3, 224, 16)],
}


def baseline_space(rev: str):
    """autotune/space/rules.py at `rev`, imported inside the kiln.autotune package."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:autotune/space/rules.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "space_baseline.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("kiln.autotune._space_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.SearchSpace


def _arrays(task: Task) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args]


def _build(task: Task, config: dict, threads: int):
    os.environ["KILN_NUM_THREADS"] = str(threads)   # the runtime reads it when loading
    sch, args = SearchSpace(task).apply(config)
    return codegen.build(lower(sch, args, name=task.name))


def _check(task: Task, kernel) -> None:
    arrays = _arrays(task)
    inputs = {t: a for t, a in zip(task.args, arrays) if t not in task.outputs}
    want = evaluate(list(task.outputs), inputs)
    kernel(*arrays)
    for t, w in zip(task.outputs, want):
        np.testing.assert_allclose(arrays[task.args.index(t)], w, rtol=1e-4, atol=1e-4,
                                   err_msg=task.name)


def compare(task: Task, configs: dict, threads: int, rounds: int) -> dict:
    """Median ms of each config's kernel, timed round-robin."""
    kernels = {name: _build(task, c, threads) for name, c in configs.items()}
    for kernel in kernels.values():
        _check(task, kernel)
    arrays = _arrays(task)
    times = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, kernel in kernels.items():
            start = time.perf_counter()
            for _ in range(3):
                kernel(*arrays)
            times[name].append((time.perf_counter() - start) / 3)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="7f9cf38", help="git revision of the old space")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", default=",".join(TASKS))
    opts = parser.parse_args()
    Old = baseline_space(opts.baseline)
    rows, figures = [], {}
    for group in opts.only.split(","):
        for task in TASKS[group]():
            configs = {"old": Old(task).default_config(),
                       "new": SearchSpace(task).default_config()}
            for threads in (int(t) for t in opts.threads.split(",")):
                ms = compare(task, configs, threads, opts.rounds)
                rows.append([task.name, threads, ms["old"], ms["new"], ms["old"] / ms["new"]])
                figures[f"{task.name}@{threads}"] = ms
                print_table(["task", "threads", "old ms", "new ms", "speed-up"], rows[-1:])
    print()
    print_table(["task", "threads", "old ms", "new ms", "speed-up"], rows)
    emit_json(figures)


if __name__ == "__main__":
    main()

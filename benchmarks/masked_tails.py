"""Masked vector tails on against off (codegen/masked_tail.ENABLED), kernel by kernel.

    python benchmarks/masked_tails.py [--rounds 5] [--repeat 20]

Each kernel (default schedule, 1 thread) is built twice in this process, with masked tails
on and off (the flag is read when a kernel is emitted; the kernel cache is keyed on the LLVM
IR, so the two builds never share an entry), and timed in interleaved rounds (on, off, on,
...) of a `--repeat`-run median each, on thread CPU time; the ratio on/off is taken per
round and its median reported. The shapes are GEMMs (and a Linear with bias and ReLU, a
softmax) whose columns 16 (an AVX-512 vector of float32) does not divide, as in EdgeNeXt's
and EfficientViT's Linears, and a uint8 quantize of 17 columns (the kernel whose one-lane
tail LLVM stored wide). Both builds' outputs are compared with numpy. Prints a table and,
last, one JSON object.

    python benchmarks/masked_tails.py --onnx DIR --models a,b [--cache-dirs ON,OFF]

With --onnx, whole models instead (DIR/<name>.onnx, examples as benchmarks/architectures.py
makes them): each compiled twice in this process (default schedules, 1 thread), with tails
on and off, each into its own model cache (--cache-dirs; a model compiled by
architectures.py under KILN_MASKED_TAILS=1 / =0 with those KILN_CACHE_DIRs loads from
them), the two outputs compared, then timed in interleaved rounds as the kernels are; the
kernels whose LLVM IR differs between the two are also timed one by one (a model with none
differs only in where its memory lies).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import emit_json, interleaved_medians, print_table  # noqa: E402

from kiln import te  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.codegen import build, masked_tail  # noqa: E402
from kiln.schedule.lower import lower  # noqa: E402
from kiln.te import expr as E  # noqa: E402

GEMMS = [("matmul", (1024, 96, 24)), ("matmul", (256, 352, 88)), ("matmul", (64, 672, 168)),
         ("matmul", (1024, 96, 40)), ("matmul", (196, 64, 17)), ("matmul", (196, 64, 50)),
         ("dense", (196, 64, 17)), ("dense", (64, 96, 100)), ("softmax", (196, 17))]
CALL_SECONDS = 1e-3     # calls per timed sample: about this long, so short kernels time well


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


REFERENCES = {"matmul": lambda a, b: a @ b,
              "dense": lambda x, w, bias: np.maximum(x @ w.T + bias, 0), "softmax": _softmax}


def _quantize_task(m: int, n: int) -> tuple[Task, object]:
    x = te.placeholder((m, n), "float32", "x")
    y = te.compute((m, n), lambda i, j: E.cast(E.minimum(E.maximum(
        E.round(x[i, j] * 50.0) + 3.0, 0.0), 255.0), "uint8"), name="y")
    return (Task(f"quantize_{m}x{n}", (y,), (x, y)),
            lambda a: np.clip(np.round(a * np.float32(50)) + 3, 0, 255).astype(np.uint8))


def _kernel(task: Task, enabled: bool):
    space = SearchSpace(task)
    sch, args = space.apply(space.default_config())
    saved = masked_tail.ENABLED
    masked_tail.ENABLED = enabled
    try:
        return build(lower(sch, args, name=f"{task.name}_{'on' if enabled else 'off'}"),
                     target="native", num_threads=1)
    finally:
        masked_tail.ENABLED = saved


def measure(task: Task, reference, rounds: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args
              if t not in task.outputs]
    out = task.outputs[0]
    kernels, outputs = {}, {}
    for enabled in (True, False):
        k = _kernel(task, enabled)
        result = np.zeros(out.shape, out.dtype)
        k(*inputs, result)
        want = reference(*inputs)
        if out.dtype == "uint8":
            np.testing.assert_array_equal(result, want)
        else:
            np.testing.assert_allclose(result, want, rtol=1e-4, atol=1e-4)
        kernels[enabled], outputs[enabled] = k, result
    masked = "llvm.masked.store" in kernels[True].llvm_ir()
    start = time.perf_counter()
    kernels[False](*inputs, outputs[False])
    calls = max(1, int(CALL_SECONDS / max(time.perf_counter() - start, 1e-7)))

    def timed(enabled):
        def run():
            for _ in range(calls):
                kernels[enabled](*inputs, outputs[enabled])
        return run
    on, off, ratio = interleaved_medians(timed(True), timed(False), rounds=rounds,
                                         repeat=repeat, clock=time.thread_time)
    return {"kernel": task.name, "masked_stores": masked, "on_us": on / calls * 1e6,
            "off_us": off / calls * 1e6, "on_over_off": ratio}


def _compile(model, feeds: dict, enabled: bool, cache: str):
    import kiln
    from kiln.codegen import cache_store
    saved = masked_tail.ENABLED, os.environ.get("KILN_CACHE_DIR")
    masked_tail.ENABLED = enabled
    cache_store.environment_key.cache_clear()       # the model cache's key holds the flag
    os.environ["KILN_CACHE_DIR"] = cache
    try:
        return kiln.compile(model, db=None, threads=1, tiered=False,
                            input_shapes={n: a.shape for n, a in feeds.items()})
    finally:
        masked_tail.ENABLED = saved[0]
        cache_store.environment_key.cache_clear()
        if saved[1] is None:
            os.environ.pop("KILN_CACHE_DIR", None)
        else:
            os.environ["KILN_CACHE_DIR"] = saved[1]


def measure_model(name: str, onnx_dir: str, caches: list[str], rounds: int,
                  repeat: int) -> dict:
    import onnx

    from architectures import example_feeds
    model = onnx.load(os.path.join(onnx_dir, name + ".onnx"))
    feeds = example_feeds(model, 32)
    x = list(feeds.values())
    on, off = (_compile(model, feeds, enabled, cache)
               for enabled, cache in zip((True, False), caches))
    a, b = on.run(x)[0].copy(), off.run(x)[0].copy()
    err = float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) or 1.0))
    t_on, t_off, ratio = interleaved_medians(lambda: on.run(x), lambda: off.run(x),
                                             rounds=rounds, repeat=repeat,
                                             clock=time.thread_time)
    differ, k_on, k_off = _differing_kernels(on, off, rounds)
    return {"model": name, "on_ms": t_on * 1e3, "off_ms": t_off * 1e3, "on_over_off": ratio,
            "rel_diff": err, "kernels_differ": differ, "differ_on_us": k_on * 1e6,
            "differ_off_us": k_off * 1e6}


def _differing_kernels(on, off, rounds: int, calls: int = 30) -> tuple[int, float, float]:
    """(how many steps' kernels differ in LLVM IR between the two builds, their summed
    seconds on, off): each pair timed alone on its model's buffers, alternating which goes
    first. A model whose kernels all match differs in memory placement only."""
    count, sum_on, sum_off = 0, 0.0, 0.0
    for s_on, s_off in zip(on.plan.steps, off.plan.steps):
        pair = (on.kernels[s_on.kernel], off.kernels[s_off.kernel])
        if pair[0].llvm_ir() == pair[1].llvm_ir():
            continue
        count += 1
        args = ([on.buffers[a].ctypes.data for a in s_on.args],
                [off.buffers[a].ctypes.data for a in s_off.args])
        times = ([], [])
        for r in range(2 * rounds + 1):
            for k in ((0, 1) if r % 2 else (1, 0)):
                pair[k]._raw(*args[k])
                start = time.thread_time()
                for _ in range(calls):
                    pair[k]._raw(*args[k])
                times[k].append((time.thread_time() - start) / calls)
        sum_on += float(np.median(times[0]))
        sum_off += float(np.median(times[1]))
    return count, sum_on, sum_off


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--onnx", default=None, metavar="DIR")
    parser.add_argument("--models", default="")
    parser.add_argument("--cache-dirs", default=None, metavar="ON,OFF",
                        help="model caches of the two builds (default: two folders under "
                             "the system's temporary folder)")
    args = parser.parse_args(argv)
    if args.onnx:
        import tempfile
        caches = (args.cache_dirs.split(",") if args.cache_dirs else
                  [os.path.join(tempfile.gettempdir(), f"kiln_masked_tails_{s}")
                   for s in ("on", "off")])
        rows = [measure_model(n, args.onnx, caches, args.rounds, args.repeat)
                for n in args.models.split(",") if n]
        print_table(["model", "on ms", "off ms", "on/off", "rel diff", "kernels differ",
                     "their us on", "off"],
                    [[r["model"], r["on_ms"], r["off_ms"], r["on_over_off"], r["rel_diff"],
                      r["kernels_differ"], r["differ_on_us"], r["differ_off_us"]]
                     for r in rows])
        ratios = [r["on_over_off"] for r in rows]
        geomean = float(np.exp(np.mean(np.log(ratios)))) if ratios else None
        print(f"geomean on/off {geomean:.3f}" if ratios else "no models")
        emit_json({"models": rows, "geomean_on_over_off": geomean})
        return 0
    rows = []
    for op, shape in GEMMS:
        rows.append(measure(Task.from_op(op, shape), REFERENCES[op], args.rounds, args.repeat))
    rows.append(measure(*_quantize_task(2048, 17), args.rounds, args.repeat))
    print_table(["kernel", "masked stores", "on us", "off us", "on/off"],
                [[r["kernel"], r["masked_stores"], r["on_us"], r["off_us"], r["on_over_off"]]
                 for r in rows])
    emit_json({"kernels": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

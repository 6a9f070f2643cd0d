"""Concatenation along the vectorized axis, lane-uniform select branching off / on (A/B).

    KILN_CACHE_DIR=off python benchmarks/concat_ab.py [--rounds 5] [--models googlenet ...]

schedule/passes/uniform_select.py turns a concat's select chain into branches (and masked loads
where a boundary falls inside a vector), so its inputs are read with vector loads instead of
a load per lane. Both sides are built in this process, alternating (the machine is shared):
kernels: compile CPU seconds (thread time: emit + LLVM) and run time (thread CPU time per
call at 1 thread, median of rounds) of concat kernels under their default schedules, outputs
checked against numpy; models (quantized ONNX files in --model-dir): compile_model CPU time
(jobs=1, no caches; best of --compile-reps per side, in turns) and run time per inference (thread CPU, median of rounds), the two sides'
outputs compared bit for bit. Prints tables and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("KILN_CACHE_DIR", "off")

from kiln import te  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.codegen import build  # noqa: E402
from kiln.schedule.passes import uniform_select  # noqa: E402
from kiln.schedule.lower import lower  # noqa: E402
from kiln.te.ops.int8.core import quantize  # noqa: E402
from kiln.te.ops.transform import concatenate  # noqa: E402

# (name, input shapes, concat axis, quantize after, forced vector width or None)
KERNELS = [
    ("googlenet_3a_concat_quantize", [(1, 28, 28, c) for c in (64, 128, 32, 32)], 3, True,
     None),
    ("googlenet_3a_concat_f32", [(1, 28, 28, c) for c in (64, 128, 32, 32)], 3, False, None),
    ("concat_7_13_last_axis", [(1, 7, 13), (1, 7, 19)], 2, False, 8),
    ("transformer_qkv_concat", [(1, 197, 768)] * 3, 2, False, None),
]


def _kernel_case(shapes, axis, quant, vector):
    ins = [te.placeholder(s, "float32", name=f"x{i}") for i, s in enumerate(shapes)]
    out = concatenate(ins, axis=axis)
    extra = []
    if quant:
        scale = te.placeholder((1,), "float32", name="scale")
        zp = te.placeholder((1,), "uint8", name="zp")
        out = quantize(out, scale, zp)
        extra = [scale, zp]
    task = Task("concat", (out,), tuple(ins + extra + [out]))
    space = SearchSpace(task, threads=1)
    config = space.default_config()
    if vector is not None:
        config = {k: (vector if k.endswith("/vector") else v) for k, v in config.items()}
    sch, args = space.apply(config)
    func = lower(sch, args, name="concat")
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-3, 3, t.shape).astype("float32") for t in ins]
    ref = np.concatenate(arrays, axis=axis)
    if quant:
        arrays += [np.array([0.05], "float32"), np.array([7], "uint8")]
        ref = np.clip(np.round(ref / 0.05) + 7, 0, 255).astype("uint8")
    return func, arrays + [np.zeros(out.shape, out.dtype)], ref, config


def _cpu_per_call(fn, min_seconds=0.05) -> float:
    n, start = 0, time.thread_time()
    while True:
        fn()
        n += 1
        spent = time.thread_time() - start
        if spent >= min_seconds:
            return spent / n


def _set(on: bool) -> None:
    uniform_select.ENABLED = on


def bench_kernels(rounds: int) -> list[dict]:
    rows = []
    for name, shapes, axis, quant, vector in KERNELS:
        func, arrays, ref, config = _kernel_case(shapes, axis, quant, vector)
        compile_s, run_s = {False: [], True: []}, {False: [], True: []}
        for _ in range(rounds):
            for on in (False, True):
                _set(on)
                start = time.thread_time()
                kernel = build(func, cache_kernel=False)
                compile_s[on].append(time.thread_time() - start)
                kernel.set_num_threads(1)
                arrays[-1][...] = 0
                kernel(*arrays)
                if not np.array_equal(arrays[-1], ref):
                    raise SystemExit(f"{name}: wrong result with the pass {'on' if on else 'off'}")
                run_s[on].append(_cpu_per_call(lambda: kernel(*arrays)))
        _set(True)
        med = {k: statistics.median(v) for k, v in (("c0", compile_s[False]),
                                                   ("c1", compile_s[True]),
                                                   ("r0", run_s[False]), ("r1", run_s[True]))}
        rows.append({"kernel": name, "vector": next(v for k, v in config.items()
                                                     if k.endswith("/vector")),
                     "compile_off_s": med["c0"], "compile_on_s": med["c1"],
                     "run_off_us": med["r0"] * 1e6, "run_on_us": med["r1"] * 1e6})
    return rows


def bench_models(names: list[str], model_dir: Path, rounds: int,
                 compile_reps: int) -> list[dict]:
    from kiln.graph.compile.model import compile_model
    rows = []
    for name in names:
        path = next(model_dir.glob(f"{name}*.static.onnx"))
        models, compile_s = {}, {False: [], True: []}
        for _ in range(compile_reps):       # in turns: the first compile warms the caches
            for on in (False, True):
                _set(on)
                start = time.thread_time()
                models[on] = compile_model(str(path), "native", None, threads=1, jobs=1,
                                           cache_model=False)
                compile_s[on].append(time.thread_time() - start)
        compile_s = {on: min(v) for on, v in compile_s.items()}
        _set(True)
        inputs = models[True]._example_inputs()
        outs = {on: models[on].run(inputs) for on in (False, True)}
        same = all(np.array_equal(a, b) for a, b in zip(outs[False], outs[True]))
        run_s = {False: [], True: []}
        for _ in range(rounds):
            for on in (False, True):
                run_s[on].append(_cpu_per_call(lambda: models[on].run(inputs), 0.3))
        rows.append({"model": name, "bit_identical": same,
                     "compile_off_s": compile_s[False], "compile_on_s": compile_s[True],
                     "run_off_ms": statistics.median(run_s[False]) * 1e3,
                     "run_on_ms": statistics.median(run_s[True]) * 1e3})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", nargs="*", default=[])
    ap.add_argument("--model-dir", default="/tmp/kiln_int8_models")
    ap.add_argument("--compile-reps", type=int, default=2,
                    help="model compiles per side, in turns (best one counts)")
    args = ap.parse_args()
    kernels = bench_kernels(args.rounds)
    print(f"{'kernel':32} {'vec':>4} {'compile off s':>13} {'on s':>7} {'ratio':>6} "
          f"{'run off us':>11} {'on us':>8} {'ratio':>6}")
    for r in kernels:
        print(f"{r['kernel']:32} {r['vector']:>4} {r['compile_off_s']:13.3f} "
              f"{r['compile_on_s']:7.3f} {r['compile_on_s'] / r['compile_off_s']:6.2f} "
              f"{r['run_off_us']:11.1f} {r['run_on_us']:8.1f} "
              f"{r['run_on_us'] / r['run_off_us']:6.2f}")
    models = bench_models(args.models, Path(args.model_dir), args.rounds,
                          args.compile_reps) if args.models else []
    if models:
        print(f"\n{'model':24} {'same':>5} {'compile off s':>13} {'on s':>7} "
              f"{'run off ms':>11} {'on ms':>8} {'ratio':>6}")
        for r in models:
            print(f"{r['model']:24} {str(r['bit_identical']):>5} {r['compile_off_s']:13.2f} "
                  f"{r['compile_on_s']:7.2f} {r['run_off_ms']:11.2f} {r['run_on_ms']:8.2f} "
                  f"{r['run_on_ms'] / r['run_off_ms']:6.2f}")
    print(json.dumps({"kernels": kernels, "models": models}))


if __name__ == "__main__":
    main()

"""Dynamic shapes: what a new input shape costs, and what a cached one costs.

    python benchmarks/dynamic_shapes.py [--models default_cnn,mlp] [--batches 1,4]
                                        [--threads 1] [--db tuning_logs/kiln.db] [--repeat 9]

Each model is exported with a symbolic batch axis 'N' and compiled once with kiln.compile (a
DynamicModel). For every batch: the first run at that batch (it compiles the specialisation),
then the median run at that (now cached) batch through the DynamicModel and through its cached
CompiledModel directly, against a model compiled ahead of time for the same batch with
input_shapes= (a CompiledModel, same database and threads). The three are timed in
alternating rounds, so machine noise hits them alike; the ratio cached/pinned should be 1.
A third case feeds a Reshape's target shape as a graph input: a new value compiles, a seen
value is cached. Prints a table and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SETTLE_SECONDS, emit_json, print_table  # noqa: E402

import kiln  # noqa: E402
from kiln.graph import models  # noqa: E402

MODELS = {"default_cnn": lambda: models.default_cnn(),
          "mlp": lambda: models.mlp(),
          "bert_like_encoder": lambda: models.bert_like_encoder(seq=64, hidden=128, layers=1)}


def symbolic_batch(model):
    """The model with dim 0 of its first input and of its outputs renamed 'N'."""
    for value in (model.graph.input[0], *model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "N"
    return model


def _median_interleaved(fns, rounds: int, number: int) -> tuple[list[float], float]:
    """Median seconds per call of each fn, timed in `rounds` alternating rounds, and the
    median over rounds of the ratio first fn / last fn (neighbours in time share the noise
    of a loaded machine)."""
    times = [[] for _ in fns]
    time.sleep(SETTLE_SECONDS)
    for fn in fns:
        fn()
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[k].append((time.perf_counter() - start) / number)
    ratio = statistics.median(a / b for a, b in zip(times[0], times[-1]))
    return [statistics.median(t) for t in times], ratio


def _feeds(model, batch: int, rng) -> dict:
    inp = model.graph.input[0]
    dims = [batch] + [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
    return {inp.name: rng.standard_normal(dims).astype(np.float32)}


def bench_model(name: str, batches, options: dict, rounds: int, number: int, rng) -> list:
    model = symbolic_batch(MODELS[name]())
    dynamic = kiln.compile(model, **options)
    rows = []
    for batch in batches:
        feeds = _feeds(model, batch, rng)
        start = time.perf_counter()
        dynamic.run(feeds)
        first = time.perf_counter() - start
        start = time.perf_counter()
        pinned = kiln.compile(model, input_shapes={k: v.shape for k, v in feeds.items()},
                              **options)
        ahead = time.perf_counter() - start
        np.testing.assert_allclose(dynamic.run(feeds)[0], pinned.run(feeds)[0], rtol=1e-5,
                                   atol=1e-6)
        spec = dynamic.specialize(feeds)
        (cached, own, fixed), ratio = _median_interleaved(
            [lambda: dynamic.run(feeds), lambda: spec.run(feeds), lambda: pinned.run(feeds)],
            rounds, number)
        rows.append([name, batch, round(first, 3), round(ahead, 3), round(cached * 1e3, 4),
                     round(own * 1e3, 4), round(fixed * 1e3, 4), round(ratio, 3)])
    assert dynamic.compiles == len(set(batches)), dynamic.compiles
    return rows


def reshape_input_model():
    """x[64, 48] -> Reshape(x, shape) -> Relu: the shape arrives as a graph input."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    g = helper.make_graph(nodes, "reshape_input",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 48]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def bench_values(options: dict, rounds: int, number: int, rng) -> list:
    model = reshape_input_model()
    dynamic = kiln.compile(model, **options)
    x = rng.standard_normal((64, 48)).astype(np.float32)
    rows = []
    for shape in ((48, 64), (96, 32)):
        feeds = {"x": x, "shape": np.array(shape, np.int64)}
        start = time.perf_counter()
        dynamic.run(feeds)
        first = time.perf_counter() - start
        start = time.perf_counter()
        pinned = kiln.compile(model, constants={"shape": feeds["shape"]}, **options)
        ahead = time.perf_counter() - start
        spec = dynamic.specialize(feeds)
        (cached, own, fixed), ratio = _median_interleaved(
            [lambda: dynamic.run(feeds), lambda: spec.run(feeds), lambda: pinned.run(feeds)],
            rounds, number)
        rows.append([f"reshape shape={list(shape)}", "-", round(first, 3), round(ahead, 3),
                     round(cached * 1e3, 4), round(own * 1e3, 4), round(fixed * 1e3, 4),
                     round(ratio, 3)])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="default_cnn,mlp")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--db", default=None, help="tuning database (default: none)")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--number", type=int, default=20)
    args = ap.parse_args()
    options = dict(db=args.db, threads=args.threads, jobs=args.jobs)
    rng = np.random.default_rng(0)
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for name in args.models.split(","):
        rows += bench_model(name, batches, options, args.rounds, args.number, rng)
    rows += bench_values(options, args.rounds, args.number, rng)
    print(f"threads={args.threads}, db={args.db}, medians of {args.rounds} alternating rounds "
          f"of {args.number} runs")
    print_table(["model", "batch", "first run s (compiles)", "ahead-of-time compile s",
                 "cached run ms", "its CompiledModel ms", "pinned run ms",
                 "cached/pinned (median of rounds)"], rows)
    emit_json({"dynamic_shapes": [dict(zip(["model", "batch", "first_run_s", "compile_s",
                                            "cached_ms", "specialisation_ms", "pinned_ms",
                                            "ratio"], r))
                                  for r in rows], "threads": args.threads, "db": args.db})


if __name__ == "__main__":
    main()

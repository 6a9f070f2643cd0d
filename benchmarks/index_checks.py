"""What the run-time index checks cost (graph/index_checks.py): the same models compiled with
and without them (the check pass replaced by a no-op for the "off" side), alternating rounds
in one process, medians, at 1 and 2 threads. Cases: embedding lookups (Gather + a positional
add, the common case), a GatherElements as large as its indices (the worst case: the check
reads as much as the gather), a ScatterND. Also the Python cost of one empty check call.
Prints a table and, last, one JSON object.

    python benchmarks/index_checks.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kiln  # noqa: E402
from kiln.graph.compile import model as compile_module  # noqa: E402
from common import emit_json, interleaved_medians, print_table  # noqa: E402


def _model(nodes, inputs, output, inits):
    g = helper.make_graph(nodes, "index_checks", [
        helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cases(rng):
    for vocab, dim, batch, seq in ((32000, 256, 8, 128), (50000, 768, 1, 512),
                                   (1000, 16, 16, 256)):
        emb = rng.standard_normal((vocab, dim)).astype(np.float32)
        pos = rng.standard_normal((seq, dim)).astype(np.float32)
        nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
                 helper.make_node("Add", ["e", "pos"], ["y"])]
        m = _model(nodes, [("ids", TensorProto.INT64, [batch, seq])], "y",
                   {"emb": emb, "pos": pos})
        yield (f"embedding {vocab}x{dim}, {batch}x{seq} ids", m,
               {"ids": rng.integers(-vocab, vocab, (batch, seq))})
    n = 512
    m = _model([helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1)],
               [("x", TensorProto.FLOAT, [n, n]), ("idx", TensorProto.INT64, [n, n])], "y", {})
    yield (f"GatherElements {n}x{n} (worst case)", m,
           {"x": rng.standard_normal((n, n)).astype(np.float32),
            "idx": rng.integers(-n, n, (n, n))})
    m = _model([helper.make_node("ScatterND", ["x", "idx", "u"], ["y"])],
               [("x", TensorProto.FLOAT, [4096, 64]), ("idx", TensorProto.INT64, [64, 1]),
                ("u", TensorProto.FLOAT, [64, 64])], "y", {})
    yield ("ScatterND 4096x64, 64 rows", m,
           {"x": rng.standard_normal((4096, 64)).astype(np.float32),
            "idx": rng.permutation(4096)[:64].reshape(64, 1).astype(np.int64),
            "u": rng.standard_normal((64, 64)).astype(np.float32)})


def compile_pair(model):
    on = compile_module.compile_model(model, db=None, cache_model=False)
    real = compile_module.add_index_checks
    compile_module.add_index_checks = lambda graph: (graph, frozenset())
    try:
        off = compile_module.compile_model(model, db=None, cache_model=False)
    finally:
        compile_module.add_index_checks = real
    assert "index_checks" in on.plan.meta and "index_checks" not in off.plan.meta
    return on, off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows, figures = [], []
    for name, model, feeds in cases(rng):
        on, off = compile_pair(model)
        np.testing.assert_array_equal(on.run(feeds)[0], off.run(feeds)[0])
        for threads in (1, 2):
            on.set_num_threads(threads)
            off.set_num_threads(threads)
            t_on, t_off, ratio = interleaved_medians(lambda: on.run(feeds),
                                                     lambda: off.run(feeds),
                                                     rounds=args.rounds, repeat=20)
            rows.append([name, threads, t_off * 1e3, t_on * 1e3, ratio])
            figures.append({"case": name, "threads": threads, "off_ms": round(t_off * 1e3, 4),
                            "on_ms": round(t_on * 1e3, 4), "on_over_off": round(ratio, 4)})
    checks = on._index_checks
    start, calls = time.perf_counter(), 100000
    for _ in range(calls):
        checks()
    per_call_us = (time.perf_counter() - start) / calls * 1e6
    print_table(["case", "threads", "no checks ms", "checks ms", "checks/none"], rows)
    print(f"one passing check after a run (Python): {per_call_us:.2f} us")
    emit_json({"rounds": args.rounds, "cases": figures, "check_call_us": round(per_call_us, 3)})


if __name__ == "__main__":
    main()

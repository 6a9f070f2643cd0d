"""Generic-tier matmul and reductions (codegen/generic/matmul.py, reduce.py) against
onnxruntime on one-node models of transformer shapes, at 1 and 2 threads.

What it says: the run time the generic tier costs on the ops a transformer spends its time
in, before the specialised kernels are swapped in. "kernel": the generic model's call
sequence alone (what the op costs inside a model); "run": GenericModel.run, which also
copies the inputs in and the outputs out. ratio = kernel / onnxruntime's session run,
the median of interleaved rounds (generic, then onnxruntime, under the same load).

    python benchmarks/generic_matmul.py [--rounds 5] [--repeat 20] [--only matmul]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import (emit_json, interleaved_medians, median_seconds, ort_session,  # noqa: E402
                    print_table)

from kiln.codegen.target import Target  # noqa: E402
from kiln.graph.generic.compile import compile_generic  # noqa: E402
from tests.graph.graph_helpers import make_model  # noqa: E402


def _matmul(sa, sb, const_b):
    rng = np.random.default_rng(0)
    b = rng.standard_normal(sb).astype(np.float32)
    inputs = {"a": (sa, "float32")}
    if not const_b:
        inputs["b"] = (sb, "float32")
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, ["y"],
                       inits={"b": b} if const_b else None)
    feeds = {"a": rng.standard_normal(sa).astype(np.float32)}
    if not const_b:
        feeds["b"] = b
    return model, feeds


def _unary(op, shape, **attrs):
    rng = np.random.default_rng(0)
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)],
                       {"x": (shape, "float32")}, ["y"])
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def _layer_norm(shape):
    rng = np.random.default_rng(0)
    c = shape[-1]
    model = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"],
                                         axis=-1, epsilon=1e-5)],
                       {"x": (shape, "float32")}, ["y"],
                       inits={"s": rng.standard_normal(c).astype(np.float32),
                              "b": rng.standard_normal(c).astype(np.float32)})
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def _reduce_mean(shape, axes):
    rng = np.random.default_rng(0)
    model = make_model([helper.make_node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=1)],
                       {"x": (shape, "float32")}, ["y"])
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


CASES = {
    "matmul [1,64,768]x[768,3072] (weight)": lambda: _matmul((1, 64, 768), (768, 3072), True),
    "matmul [1,64,3072]x[3072,768] (weight)": lambda: _matmul((1, 64, 3072), (3072, 768), True),
    "matmul [1,64,768]x[768,768] (weight)": lambda: _matmul((1, 64, 768), (768, 768), True),
    "matmul [1,12,64,64]x[1,12,64,64]": lambda: _matmul((1, 12, 64, 64), (1, 12, 64, 64),
                                                         False),
    "matmul [1,960]x[960,1000] (weight)": lambda: _matmul((1, 960), (960, 1000), True),
    "softmax [1,12,64,64] axis -1": lambda: _unary("Softmax", (1, 12, 64, 64), axis=-1),
    "layer_norm [1,64,768]": lambda: _layer_norm((1, 64, 768)),
    "reduce_mean [1,256,32,32] axes (2,3)": lambda: _reduce_mean((1, 256, 32, 32), [2, 3]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    target = Target.native()
    rows, figures = [], {}
    for name, make in CASES.items():
        if args.only not in name:
            continue
        model, feeds = make()
        for threads in (1, 2):
            gm = compile_generic(model, target, threads)
            sess = ort_session(model, threads)
            ours = gm.run(feeds)[0]
            theirs = sess.run(None, feeds)[0]
            np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-3)
            # the kernels alone (the op's cost inside a model) against onnxruntime's whole
            # run; gm.run adds copying the inputs in and the outputs out
            g, o, ratio = interleaved_medians(gm._sequence, lambda: sess.run(None, feeds),
                                              rounds=args.rounds, repeat=args.repeat)
            whole = median_seconds(lambda: gm.run(feeds), args.repeat, settle=0)
            rows.append([name, threads, g * 1e3, whole * 1e3, o * 1e3, ratio])
            figures[f"{name} @{threads}T"] = {"generic_kernel_ms": round(g * 1e3, 4),
                                              "generic_run_ms": round(whole * 1e3, 4),
                                              "ort_ms": round(o * 1e3, 4),
                                              "ratio": round(ratio, 3)}
    print_table(["case", "threads", "kernel ms", "run ms", "onnxruntime ms", "ratio"], rows)
    emit_json(figures)


if __name__ == "__main__":
    main()

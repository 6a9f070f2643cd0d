"""NonZero, Unique and NonMaxSuppression (graph/runtime/staged.py): Kiln-compiled staged models
against onnxruntime (1 intra-op thread), interleaved rounds, medians; outputs must be equal.
Also the compile time of each (no tuning database). Prints a table and, last, one JSON object.

    KILN_NUM_THREADS=1 python benchmarks/datadep_ops.py [--clock cpu]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kiln  # noqa: E402
from common import emit_json, interleaved_medians, print_table  # noqa: E402

F32 = TensorProto.FLOAT


def _model(node, inputs, outputs, inits=None):
    graph = helper.make_graph(
        [node], "datadep", [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def cases(rng):
    for n, k in ((200, 10), (1000, 20), (1000, 100)):
        xy = rng.uniform(0, 1, (1, n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + rng.uniform(0.02, 0.2, (1, n, 2))], 2)
        feeds = {"boxes": boxes.astype(np.float32),
                 "scores": rng.uniform(0, 1, (1, 1, n)).astype(np.float32)}
        node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "thr"],
                                ["sel"])
        inits = {"k": np.array([k], np.int64), "iou": np.array([0.5], np.float32),
                 "thr": np.array([0.1], np.float32)}
        yield (f"NMS {n} boxes, keep <= {k}", _model(node, [("boxes", [1, n, 4]),
                                                          ("scores", [1, 1, n])],
                                                     ["sel"], inits), feeds)
    x = (rng.uniform(0, 1, (64, 64)) > 0.9).astype(np.float32)
    yield ("NonZero 64x64 (10% set)",
           _model(helper.make_node("NonZero", ["x"], ["y"]), [("x", [64, 64])], ["y"]),
           {"x": x})
    u = rng.integers(0, 50, (1024,)).astype(np.float32)
    yield ("Unique 1024 (50 values)",
           _model(helper.make_node("Unique", ["x"], ["y", "i", "v", "c"]), [("x", [1024])],
                  ["y", "i", "v", "c"]), {"x": u})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = parser.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    rows, figures = [], {}
    for name, model, feeds in cases(np.random.default_rng(0)):
        start = time.perf_counter()
        compiled = kiln.compile(model, db=None, jobs=1)
        got = compiled.run(feeds)   # compiles the stages (the prefix here)
        compile_s = time.perf_counter() - start
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        equal = all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))
        k_s, o_s, _ = interleaved_medians(lambda: compiled.run(feeds),
                                          lambda: sess.run(None, feeds), clock=clock)
        rows.append([name, round(compile_s, 2), k_s * 1e3, o_s * 1e3, o_s / k_s,
                     got[0].shape[-1] if name.startswith("NonZero") else got[0].shape[0],
                     equal])
        figures[name] = {"compile_s": round(compile_s, 2), "kiln_ms": round(k_s * 1e3, 4),
                         "ort_ms": round(o_s * 1e3, 4), "ort_over_kiln": round(o_s / k_s, 4),
                         "equal": equal}
    print_table(["case", "compile s", "Kiln ms", "ort ms", "ort/Kiln", "count", "equal"], rows)
    emit_json({"clock": args.clock, "cases": figures})


if __name__ == "__main__":
    main()

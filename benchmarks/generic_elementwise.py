"""What the generic tier's elementwise kernels cost in run time: one-node ONNX models on the
shape-generic kernels (codegen/generic/elementwise.py) against onnxruntime on the same model,
at 1 and 2 threads.

The run ratio is the generic model's `run` (its input copies, the kernel, the output copy)
over onnxruntime's `run`, both medians interleaved in rounds so the two see the same load;
the kernel column is the generic model's native call sequence alone, and kernel/ort its
median over onnxruntime's run (which holds onnxruntime's own call overhead and output
allocation: the kernel's cost without GenericModel.run's copies).

    python benchmarks/generic_elementwise.py [--rounds 5] [--repeat 20]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, interleaved_medians, median_seconds, ort_session, print_table  # noqa

from kiln.codegen.target import Target  # noqa: E402
from kiln.graph.generic.compile import compile_generic  # noqa: E402


def one_node_model(op: str, feeds: dict, **attrs) -> onnx.ModelProto:
    """`op` on graph inputs `feeds` (0-d ones as initializers), output typed by onnx."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            list(a.shape)) for n, a in feeds.items() if a.ndim]
    inits = [numpy_helper.from_array(a, n) for n, a in feeds.items() if not a.ndim]
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    out = helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)
    graph = helper.make_graph([node], op, inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    return model


def cases(rng):
    """(name, ONNX op, feeds, attrs): shapes from the exports (ViT, SE blocks, BERT)."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return [
        ("add [1,197,768]+[768]", "Add", {"a": f(1, 197, 768), "b": f(768)}, {}),
        ("mul [1,96,56,56]*[1,96,1,1]", "Mul", {"a": f(1, 96, 56, 56), "b": f(1, 96, 1, 1)},
         {}),
        ("sigmoid [1,96,56,56]", "Sigmoid", {"x": f(1, 96, 56, 56)}, {}),
        ("erf [1,197,3072]", "Erf", {"x": f(1, 197, 3072)}, {}),
        ("where [1,1,64,64],[1,12,64,64],[]", "Where",
         {"c": rng.random((1, 1, 64, 64)) < 0.5, "a": f(1, 12, 64, 64),
          "b": np.array(-1e4, np.float32)}, {}),
        ("add [8,64] (small)", "Add", {"a": f(8, 64), "b": f(8, 64)}, {}),
    ]


def run(rounds: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    target = Target.native()
    rows, figures = [], {}
    for name, op, feeds, attrs in cases(rng):
        model = one_node_model(op, feeds, **attrs)
        feeds = {k: v for k, v in feeds.items() if v.ndim}
        for threads in (1, 2):
            gm = compile_generic(model, target, threads)
            sess = ort_session(model, threads)
            want = sess.run(None, feeds)[0]
            got = gm.run(feeds)[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            ours, theirs, ratio = interleaved_medians(
                lambda: gm.run(feeds), lambda: sess.run(None, feeds), rounds, repeat)
            kernel = median_seconds(gm._sequence, repeat, settle=0.0)
            rows.append([name, threads, ours * 1e6, theirs * 1e6, kernel * 1e6, ratio,
                         kernel / theirs])
            figures[f"{name} @{threads}T"] = {"generic_us": round(ours * 1e6, 1),
                                              "ort_us": round(theirs * 1e6, 1),
                                              "kernel_us": round(kernel * 1e6, 1),
                                              "ratio": round(ratio, 3),
                                              "kernel_ratio": round(kernel / theirs, 3)}
    print_table(["case", "threads", "generic us", "ort us", "kernel us", "run/ort",
                 "kernel/ort"], rows)
    for key, col in (("geomean_ratio", -2), ("geomean_kernel_ratio", -1)):
        figures[key] = round(float(np.exp(np.mean(np.log([r[col] for r in rows])))), 3)
    print(f"geomean run/ort {figures['geomean_ratio']:.3f}, kernel/ort "
          f"{figures['geomean_kernel_ratio']:.3f}")
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    emit_json(run(args.rounds, args.repeat))


if __name__ == "__main__":
    main()

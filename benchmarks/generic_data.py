"""Generic-tier data movement against onnxruntime: one-node models (transpose, concat, split,
slice, broadcast, gather) run on the generic kernels (codegen/generic/data.py) and on
onnxruntime, at 1 and 2 threads; median of interleaved rounds, ratio generic / onnxruntime
(below 1: faster).

"run" is GenericModel.run (copying the inputs in and the outputs out, as a user call does);
"kernels" is its native call sequence alone. The gathers run without their index check
(an `index_range` node, another family's kernel): the bare gather is measured.

    python benchmarks/generic_data.py [--rounds 5] [--repeat 20] [--only NAME]
    python benchmarks/generic_data.py --exports DIR   # check, no timing

--exports runs every distinct data-movement node (op, attrs, input shapes) of the ONNX files
in DIR alone on the generic kernels and on the numpy reference (random inputs, indices in
range) and counts the nodes whose outputs are equal bit for bit.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import statistics

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from common import emit_json, kiln_threads, median_seconds, ort_session, print_table  # noqa: E402
from kiln.codegen.target import Target
from kiln.graph.generic.compile import SKIPPED_PASSES, generic_graph
from kiln.graph.generic.model import GenericModel
from kiln.graph.ir import Graph
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.reference import run_reference

DATA_OPS = ("transpose", "slice", "broadcast_to", "split", "concat", "gather", "gather_nd",
            "gather_elements")


def _model(op, inputs, inits=None, n_out=1, order=None, **attrs):
    """A one-node ONNX model; `inputs`: {name: array} (graph inputs), inits: initializers,
    `order`: the node's input names (default: inputs, then inits)."""
    inits = inits or {}
    node = helper.make_node(op, order or list(inputs) + list(inits),
                            [f"y{k}" for k in range(n_out)], **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         list(v.shape)) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(f"y{k}", TensorProto.UNDEFINED, None)
            for k in range(n_out)]
    graph = helper.make_graph([node], op.lower(), ins, outs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def cases(rng):
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    a, b = f32(1, 64, 56, 56), f32(1, 64, 56, 56)
    qkv = f32(1, 197, 576)
    table = f32(30522, 768)
    ids = rng.integers(0, 30522, (1, 128)).astype(np.int64)
    wide = f32(256, 1024)
    cols = rng.integers(-1024, 1024, (512,)).astype(np.int64)
    x = f32(1, 3136, 192)
    return {
        "transpose [1,8,16,32] (0,2,1,3)":
            (_model("Transpose", {"x": f32(1, 8, 16, 32)}, perm=[0, 2, 1, 3]), None),
        "concat 2x[1,16,14,14] axis 1":
            (_model("Concat", {"a": f32(1, 16, 14, 14), "b": f32(1, 16, 14, 14)}, axis=1), None),
        "transpose [1,12,64,64] (0,2,1,3)":
            (_model("Transpose", {"x": f32(1, 12, 64, 64)}, perm=[0, 2, 1, 3]), None),
        "transpose [1,56,56,96] NHWC->NCHW":
            (_model("Transpose", {"x": f32(1, 56, 56, 96)}, perm=[0, 3, 1, 2]), None),
        "transpose [1,96,56,56] NCHW->NHWC":
            (_model("Transpose", {"x": f32(1, 96, 56, 56)}, perm=[0, 2, 3, 1]), None),
        "concat 2x[1,64,56,56] axis 1": (_model("Concat", {"a": a, "b": b}, axis=1), None),
        "split [1,197,576] -> 3x192 axis 2":
            (_model("Split", {"x": qkv}, {"s": np.array([192] * 3, np.int64)}, n_out=3,
                    axis=2), None),
        "slice [1,3136,192] ::2 axis 1":
            (_model("Slice", {"x": x}, {"s": np.array([0], np.int64),
                                        "e": np.array([3136], np.int64),
                                        "a": np.array([1], np.int64),
                                        "p": np.array([2], np.int64)}), None),
        "broadcast [256,1] -> [256,1024]":
            (_model("Expand", {"x": f32(256, 1)}, {"s": np.array([256, 1024], np.int64)}),
             None),
        "gather [30522,768] by [1,128] ids":
            (_model("Gather", {"i": ids}, {"t": table}, order=["t", "i"], axis=0), None),
        "gather [256,1024] axis 1 by 512":
            (_model("Gather", {"x": wide, "i": cols}, axis=1), None),
        "gather_elements [256,1024] axis 1 by [256,512]":
            (_model("GatherElements", {"x": wide, "i": rng.integers(
                -1024, 1024, (256, 512)).astype(np.int64)}, axis=1), None),
    }


def _feeds(model, rng):
    out = {}
    for v in model.graph.input:
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        if np.dtype(dtype).kind == "i":
            hi = 30522 if v.name == "i" and shape == [1, 128] else 1024   # in range
            out[v.name] = rng.integers(-hi if hi == 1024 else 0, hi, shape).astype(dtype)
        else:
            out[v.name] = rng.standard_normal(shape).astype(dtype)
    return out


def _node_feeds(node, constants, rng):
    feeds = {}
    for k, v in enumerate(node.inputs):
        if v is None or v.name in constants:
            continue
        if node.op in ("gather", "gather_elements") and k == 1:
            m = node.inputs[0].shape[node.attrs["axis"]]
            feeds[v.name] = rng.integers(-m, m, v.shape).astype(v.dtype)
        elif node.op == "gather_nd" and k == 1:
            b = node.attrs.get("batch_dims", 0)
            ext = np.array(node.inputs[0].shape[b:b + v.shape[-1]])
            feeds[v.name] = (rng.integers(0, 1 << 20, v.shape) % ext).astype(v.dtype)
        elif v.dtype == "bool":
            feeds[v.name] = rng.random(v.shape) < 0.5
        elif np.dtype(v.dtype).kind in "iu":
            feeds[v.name] = rng.integers(-100, 100, v.shape).astype(v.dtype)
        else:
            feeds[v.name] = rng.standard_normal(v.shape).astype(v.dtype)
    return feeds


def check_exports(folder: str) -> dict:
    """Every distinct data node of the models in `folder`, alone: generic vs reference."""
    rng, target = np.random.default_rng(0), Target.native()
    counts, seen = collections.Counter(), set()
    for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        g = generic_graph(path)
        for n in g.nodes:
            key = (n.op, repr(sorted(n.attrs.items())),
                   tuple(None if v is None else (v.shape, v.dtype, v.name in g.constants)
                         for v in n.inputs))
            if n.op not in DATA_OPS or key in seen:
                continue
            seen.add(key)
            consts = {v.name: g.constants[v.name] for v in n.inputs
                      if v is not None and v.name in g.constants}
            ins = [v for v in n.inputs if v is not None and v.name not in consts]
            graph = Graph(ins, [n], n.outputs, consts, name=n.op)
            feeds = _node_feeds(n, consts, rng)
            want = list(run_reference(graph, feeds).values())
            got = GenericModel(graph, target, 2).run(feeds)
            same = all(a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
                       for a, b in zip(got, want))
            counts[f"{n.op} {'equal' if same else 'DIFFERENT'}"] += 1
            if not same:
                print(f"DIFFERENT: {os.path.basename(path)} {n.op} {dict(n.attrs)}")
    return dict(counts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ap.add_argument("--exports", default=None, help="check the data nodes of DIR/*.onnx")
    args = ap.parse_args()
    if args.exports:
        counts = check_exports(args.exports)
        print_table(["op, outputs", "distinct nodes"], sorted(counts.items()))
        emit_json({"exports": args.exports, "nodes": counts})
        return
    rng = np.random.default_rng(0)
    target = Target.native()
    rows, figures = [], {"cpu": target.cpu, "cases": {}}
    for name, (model, _) in cases(rng).items():
        if args.only and args.only not in name:
            continue
        feeds = _feeds(model, rng)
        graph = optimize(load_onnx(model), skip=SKIPPED_PASSES)
        for threads in (1, 2):
            with kiln_threads(threads):
                gm = GenericModel(graph, target, threads)
            sess = ort_session(model, threads)
            ours = gm.run(feeds)
            theirs = sess.run(None, feeds)
            for got, want in zip(ours, theirs):
                np.testing.assert_array_equal(got, want)
            seq = gm._sequence
            run_t, kern_t, ort_t, ratios, kratios = [], [], [], [], []
            for _ in range(args.rounds):
                r = median_seconds(lambda g=gm, f=feeds: g.run(f), args.repeat, settle=0.02)
                k = median_seconds(seq, args.repeat, settle=0.02)
                o = median_seconds(lambda s=sess, f=feeds: s.run(None, f), args.repeat,
                                 settle=0.02)
                run_t.append(r), kern_t.append(k), ort_t.append(o)
                ratios.append(r / o), kratios.append(k / o)
            fig = {"run_us": statistics.median(run_t) * 1e6,
                   "kernels_us": statistics.median(kern_t) * 1e6,
                   "ort_us": statistics.median(ort_t) * 1e6,
                   "run_ratio": statistics.median(ratios),
                   "kernels_ratio": statistics.median(kratios),
                   "calls": [c.kernel for c in gm.calls]}
            figures["cases"][f"{name} @{threads}"] = fig
            rows.append([name, threads, fig["ort_us"], fig["run_us"], fig["kernels_us"],
                         fig["run_ratio"], fig["kernels_ratio"]])
    print_table(["case", "threads", "ort us", "run us", "kernels us", "run/ort",
                 "kernels/ort"], rows)
    for t in (1, 2):
        for col, what in ((5, "run"), (6, "kernels")):
            rs = [r[col] for r in rows if r[1] == t]
            if rs:
                figures[f"geomean_{what}_ratio_{t}t"] = float(np.exp(np.mean(np.log(rs))))
    emit_json(figures)


if __name__ == "__main__":
    main()

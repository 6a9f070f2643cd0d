"""Kernels of the shapes issue 33 item 2 left slow, default schedules against onnxruntime.

    python benchmarks/tail_kernels.py [--rounds 7] [--calls 100] [--cases a,b,...]

GEMMs whose columns the vector does not divide (batched with runtime operands, as attention's
scores @ V; and linears with constant weights), 9x9 and band (1x9, 9x1) depthwise convs (7x7
for reference), GhostNet's ghost module (1x1 conv, depthwise 3x3, concat of the halves, 1x1
conv) and MixNet's mixed conv (split, depthwise 3x3 and 5x5, concat). Each case is a small
ONNX model: Kiln's figure is the sum of its kernels (default schedules, db=None, each called
alone; the JSON has each kernel's time, the layout conversions at the model's edges
included), onnxruntime's one session.run on 1 thread (its call overhead included, a few us).
Both are timed by the calling thread's CPU time, median of `--rounds` rounds of `--calls`
calls. Kiln is imported as installed, so the same script measures another checkout when that
one is on the path first. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("KILN_NUM_THREADS", "1")


def _model(nodes, inputs, inits):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
           for n, a in inputs.items()]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", ins, [out],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def matmul(x_shape, w_shape, const):
    rng = np.random.default_rng(0)
    x, w = _rand(rng, *x_shape), _rand(rng, *w_shape)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    if const:
        return _model([node], {"x": x}, {"w": w}), {"x": x}
    return _model([node], {"x": x, "w": w}, {}), {"x": x, "w": w}


def depthwise(c, hw, kh, kw=None):
    rng = np.random.default_rng(0)
    kw = kh if kw is None else kw
    x = _rand(rng, 1, c, hw, hw)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[kh, kw],
                            pads=[kh // 2, kw // 2, kh // 2, kw // 2])
    return _model([node], {"x": x}, {"w": _rand(rng, c, 1, kh, kw), "b": _rand(rng, c)}), \
        {"x": x}


def ghost(cin, half, hw):
    rng = np.random.default_rng(0)
    x = _rand(rng, 1, cin, hw, hw)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a0"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["b0"], group=half, kernel_shape=[3, 3],
                              pads=[1] * 4),
             helper.make_node("Relu", ["b0"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "w3"], ["d"], kernel_shape=[1, 1]),
             helper.make_node("Add", ["d", "x"], ["y"])]
    inits = {"w1": _rand(rng, half, cin, 1, 1), "w2": _rand(rng, half, 1, 3, 3),
             "w3": _rand(rng, cin, 2 * half, 1, 1)}
    return _model(nodes, {"x": x}, inits), {"x": x}


def mixed(cin, sizes, hw):
    """MixNet's mixed conv: Split along channels, a depthwise conv of kernel 3, 5, ... on
    each part, Concat."""
    rng = np.random.default_rng(0)
    x = _rand(rng, 1, cin, hw, hw)
    parts = [f"p{i}" for i in range(len(sizes))]
    inits = {"w0": _rand(rng, cin, cin, 1, 1), "sizes": np.array(sizes, np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Split", ["a", "sizes"], parts, axis=1)]
    for i, size in enumerate(sizes):
        k = 3 + 2 * i
        inits[f"w{i + 1}"] = _rand(rng, size, 1, k, k)
        nodes.append(helper.make_node("Conv", [parts[i], f"w{i + 1}"], [f"d{i}"], group=size,
                                      kernel_shape=[k, k], pads=[k // 2] * 4))
    nodes.append(helper.make_node("Concat", [f"d{i}" for i in range(len(sizes))], ["y"],
                                  axis=1))
    return _model(nodes, {"x": x}, inits), {"x": x}


CASES = {
    "bmm 16x64x64@64x17": lambda: matmul((16, 64, 64), (16, 64, 17), False),
    "bmm 16x64x64@64x20": lambda: matmul((16, 64, 64), (16, 64, 20), False),
    "bmm 4x256x16@16x17": lambda: matmul((4, 256, 16), (4, 16, 17), False),
    "bmm 12x49x49@49x36": lambda: matmul((12, 49, 49), (12, 49, 36), False),
    "bmm 16x64x64@64x32 (control)": lambda: matmul((16, 64, 64), (16, 64, 32), False),
    "linear 512x64@64x20": lambda: matmul((512, 64), (64, 20), True),
    "linear 16x64x64@64x17": lambda: matmul((16, 64, 64), (64, 17), True),
    "linear 4x64x64@64x36": lambda: matmul((4, 64, 64), (64, 36), True),
    "linear 256x192@192x17": lambda: matmul((256, 192), (192, 17), True),
    "linear 1024x96@96x20": lambda: matmul((1024, 96), (96, 20), True),
    "dw 9x9 64ch 32x32": lambda: depthwise(64, 32, 9),
    "dw 9x9 40ch 32x32": lambda: depthwise(40, 32, 9),
    "dw 9x9 120ch 16x16": lambda: depthwise(120, 16, 9),
    "dw 7x7 64ch 32x32 (control)": lambda: depthwise(64, 32, 7),
    "dw 1x9 40ch 32x32": lambda: depthwise(40, 32, 1, 9),
    "dw 9x1 80ch 16x16": lambda: depthwise(80, 16, 9, 1),
    "ghost 16->8+8 at 80x80": lambda: ghost(16, 8, 80),
    "ghost 80->40+40 at 20x20": lambda: ghost(80, 40, 20),
    "ghost 24->12+12 at 40x40": lambda: ghost(24, 12, 40),
    "mixed 480->240+240 at 8x8": lambda: mixed(480, [240, 240], 8),
    "mixed 96->48+48 at 16x16": lambda: mixed(96, [48, 48], 16),
}


def _cpu_time(fn, rounds, calls):
    times = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        times.append((time.thread_time() - start) / calls)
    return statistics.median(times)


def _kernels(model):
    """Every kernel of `model` on its default schedule, with inputs: [(name, kernel, arrays)]."""
    from kiln.autotune.dispatch import Selection, apply_selection, canonical_target
    from kiln.autotune.space.rules import SearchSpace
    from kiln.codegen import build
    from kiln.graph.compile.model import prepare_graph
    from kiln.graph.compile.tasks import extract_tasks
    from kiln.schedule import lower

    target = canonical_target("native")
    graph, groups = prepare_graph(model)
    rng = np.random.default_rng(1)
    out = []
    for mt in extract_tasks(graph, groups, target)[0]:
        task = mt.task
        space = SearchSpace(task.retargeted(target), 1)
        sch, args, _ = apply_selection(space, Selection(None))
        kernel = build(lower(sch, args, name=task.name), target=target, cache_kernel=False)
        arrays = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args]
        out.append((task.name, kernel, arrays))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    import onnxruntime as ort

    names = [c for c in args.cases.split(",") if c] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    rows = {}
    for name in names:
        model, feeds = CASES[name]()
        kernels = _kernels(model)
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        each = {n: _cpu_time(lambda: k(*a), args.rounds, args.calls) * 1e3
                for n, k, a in kernels}
        kiln_ms = sum(each.values())
        ort_ms = _cpu_time(lambda: session.run(None, feeds), args.rounds, args.calls) * 1e3
        rows[name] = {"kiln_ms": round(kiln_ms, 4), "ort_ms": round(ort_ms, 4),
                      "ratio": round(kiln_ms / ort_ms, 3),
                      "kernels_ms": {n: round(t, 4) for n, t in each.items()}}
        print(f"{name:32s} kiln {kiln_ms:8.4f} ms  ort {ort_ms:8.4f} ms  "
              f"kiln/ort {kiln_ms / ort_ms:6.3f}  ({len(kernels)} kernels)", flush=True)
    print(json.dumps({"bench": "tail_kernels", "rounds": args.rounds, "calls": args.calls,
                      "cases": rows}))


if __name__ == "__main__":
    main()

"""The generic tier's conv and pooling kernels (codegen/generic/conv.py) against onnxruntime
on one-node models of ResNet/MobileNet-like shapes.

    python benchmarks/generic_conv.py [--threads 1,2] [--rounds 5] [--repeat 20]
                                      [--cases dense3x3_64,dw7x7_96]

Each case is a one-node ONNX model (Conv without bias, or a pool) planned onto the generic
kernels (compile_generic) and run in onnxruntime (all graph optimisations, intra_op threads
= the count). Rounds alternate Kiln and onnxruntime; each side's time is the median of
`--repeat` runs, the ratio kiln/ort is taken per round (both sides saw the same load) and
its median over rounds reported, with GFLOP/s of the generic kernel; "best" is Kiln's
fastest round over onnxruntime's fastest (the least disturbed, on a shared machine). Prints a
table and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kiln.codegen.target import Target  # noqa: E402
from kiln.graph.generic.compile import compile_generic  # noqa: E402

# name: (C, H, W, O, k, stride, pad, groups)
CASES = {
    "dense3x3_64x56": (64, 56, 56, 64, 3, 1, 1, 1),
    "dense3x3_128x28": (128, 28, 28, 128, 3, 1, 1, 1),
    "dense1x1_256x14": (256, 14, 14, 256, 1, 1, 0, 1),
    "dense3x3_s2_64x56": (64, 56, 56, 128, 3, 2, 1, 1),
    "stem7x7_s2_3x224": (3, 224, 224, 64, 7, 2, 3, 1),
    "patch16_s16_3x224": (3, 224, 224, 192, 16, 16, 0, 1),
    "dw3x3_96x56": (96, 56, 56, 96, 3, 1, 1, 96),
    "dw7x7_96x56": (96, 56, 56, 96, 7, 1, 3, 96),
    "dw3x3_s2_96x56": (96, 56, 56, 96, 3, 2, 1, 96),
    "dw5x5_240x14": (240, 14, 14, 240, 5, 1, 2, 240),
    "grouped3x3_g13_104x16": (104, 16, 16, 104, 3, 1, 1, 13),
    "maxpool3x3_s2_64x112": (64, 112, 112, 0, 3, 2, 1, 0),
}


def _model(spec, rng):
    c, h, w, o, k, s, p, g = spec
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if o == 0:
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                                pads=[p] * 4)
        inits, flops = [], 0.0
    else:
        wt = (rng.standard_normal((o, c // g, k, k)) * 0.1).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k],
                                strides=[s, s], pads=[p] * 4, group=g)
        inits = [numpy_helper.from_array(wt, "w")]
        oh = (h + 2 * p - k) // s + 1
        ow = (w + 2 * p - k) // s + 1
        flops = 2.0 * o * oh * ow * (c // g) * k * k
    graph = helper.make_graph([node], "conv", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, flops


def _median_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    target = Target.native()
    results = {}
    print(f"{'case':24s} {'thr':>3s} {'kiln ms':>9s} {'ort ms':>9s} {'kiln/ort':>9s} "
          f"{'best':>6s} {'GFLOP/s':>8s} {'max_err':>9s}")
    for name in args.cases.split(","):
        model, flops = _model(CASES[name], rng)
        c, h, w = CASES[name][:3]
        x = rng.standard_normal((1, c, h, w)).astype(np.float32)
        for threads in (int(t) for t in args.threads.split(",")):
            gm = compile_generic(model, target, threads)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            sess = ort.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
            ours, theirs = gm.run([x])[0], sess.run(None, {"x": x})[0]
            err = float(np.max(np.abs(ours - theirs)))
            ks, os_, ratios = [], [], []
            for _ in range(args.rounds):
                k = _median_time(lambda: gm.run([x]), args.repeat)
                o = _median_time(lambda: sess.run(None, {"x": x}), args.repeat)
                ks.append(k)
                os_.append(o)
                ratios.append(k / o)
            k, o, r = statistics.median(ks), statistics.median(os_), statistics.median(ratios)
            gf = flops / k / 1e9
            best = min(ks) / min(os_)
            print(f"{name:24s} {threads:3d} {k * 1e3:9.3f} {o * 1e3:9.3f} {r:9.2f} "
                  f"{best:6.2f} {gf:8.1f} {err:9.2e}", flush=True)
            results.setdefault(name, {})[f"{threads}T"] = {
                "kiln_ms": round(k * 1e3, 4), "ort_ms": round(o * 1e3, 4),
                "kiln_over_ort": round(r, 3), "best_rounds": round(best, 3), "gflops": round(gf, 2), "max_err": err}
    print(json.dumps({"cpu": target.cpu, "cases": results}))


if __name__ == "__main__":
    main()

"""Tuned ResNet-18 conv layers vs onnxruntime (single Conv op) and numpy im2col + BLAS.

The layers are the distinct conv kernels of graph/models.py's resnet18_like at 224x224, taken
from the model's own tuning tasks, so records tuned here also serve `kiln.compile` of the whole
model. Each Kiln kernel is the fused group the compiler builds: the conv with its weight packed
at compile time plus its epilogue (bias, the residual add where the model has one, relu).
onnxruntime runs one Conv node with bias (its own prepacked weights, all graph optimisations);
numpy runs im2col + one BLAS GEMM + bias. Kiln's kernel does at least the same work.

Tunes each layer until the database holds --trials records of it (records already there count,
so a rerun resumes); `--from-db` only rebuilds the best schedules and times them. With the
default --layout nchwc, Kiln's kernels read and write channel-blocked activations, as they do
inside the compiled model; onnxruntime's single Conv reads and writes NCHW.

    python benchmarks/resnet_convs.py [--trials 64] [--from-db] [--db PATH] [--layers 0,3]
                                      [--layout nchwc|nchw] [--winograd] [--threads 1,2]

--winograd adds, for every 3x3 stride-1 layer, the Winograd kernels kiln.compile builds for it
(input transform, batched GEMM, output transform + epilogue; best records, else defaults),
timed back to back on shared buffers and interleaved with the direct kernel: "direct/wino" > 1
means Winograd is faster.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, median_seconds, numpy_threads, print_table  # noqa

from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.measure import MeasureOptions  # noqa: E402
from kiln.autotune.tuner import build_best, canonical_target, tune_task  # noqa: E402
from kiln.graph.compile.model import prepare_graph  # noqa: E402
from kiln.graph.models import resnet18_like  # noqa: E402
from kiln.graph.compile.tasks import extract_tasks  # noqa: E402
from kiln.te.ops import (unpack_conv_weight, unpack_conv_weight_blocked,  # noqa: E402
                         )

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DB = os.path.join(ROOT, "tuning_logs", "kiln.db")


def conv_layers(target: str, layout: str = "nchwc"):
    """(model task, conv node, group) for every distinct conv kernel of resnet18_like, all
    direct convs (Winograd off)."""
    graph, groups = prepare_graph(resnet18_like(), layout=layout, winograd=False)
    tasks, _ = extract_tasks(graph, groups, target)
    by_name = {g.name: g for g in groups}
    layers = []
    for mt in tasks:
        group = by_name[mt.groups[0]]
        if group.anchor is not None and group.anchor.op.startswith("conv2d"):
            layers.append((mt, group.anchor, group))
    return graph, layers


def winograd_chains(target: str):
    """The Winograd model's graph and conv node name -> its three model tasks (input
    transform, batched GEMM, output transform with the epilogue) in run order."""
    graph, groups = prepare_graph(resnet18_like(), winograd=True)
    tasks, _ = extract_tasks(graph, groups, target)
    task_of = {g: mt for mt in tasks for g in mt.groups}
    producer = {v.name: g.name for g in groups for v in g.outputs}
    by_name = {g.name: g for g in groups}
    chains = {}
    for g in groups:
        if g.anchor is None or g.anchor.op != "winograd_output_transform":
            continue
        gemm = by_name[producer[g.anchor.inputs[0].name]]
        first = producer[gemm.nodes[0].inputs[0].name]
        chains[g.anchor.name] = [task_of[first], task_of[gemm.name], task_of[g.name]]
    return graph, chains


def chain_runner(chain, graph, rng, target: str, db):
    """One call running the chain's kernels back to back on shared buffers (the input
    transform's V feeds the GEMM, its M the output transform), and its tile size."""
    arrays: dict[str, np.ndarray] = {}
    calls = []
    for mt in chain:
        kernel = build_best(mt.task, target, db)
        args = []
        for value in mt.dag.arg_values:
            if value.name not in arrays:
                arrays[value.name] = (np.ascontiguousarray(graph.constants[value.name])
                                      if value.name in graph.constants else
                                      rng.standard_normal(value.shape).astype(value.dtype))
            args.append(arrays[value.name])
        calls.append((kernel, args))

    def run():
        for kernel, args in calls:
            kernel(*args)
    return run


def nchw_shape(shape) -> tuple[int, ...]:
    """The NCHW shape of an activation, plain or channel-blocked [N, C/b, H, W, b]."""
    return tuple(shape) if len(shape) == 4 else (shape[0], shape[1] * shape[4], shape[2], shape[3])


def nchw_array(x: np.ndarray) -> np.ndarray:
    if x.ndim == 4:
        return x
    n, co, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, co * b, h, w))


def describe(conv) -> str:
    x, w = nchw_shape(conv.inputs[0].shape), nchw_shape(conv.outputs[0].shape)
    kh = conv.inputs[1].shape[2]
    stride = conv.attrs["strides"][0]
    return f"{kh}x{kh}/{stride} {x[1]}->{w[1]} @{x[2]}"


def conv_flops(conv) -> float:
    out = nchw_shape(conv.outputs[0].shape)
    c, kh, kw = nchw_shape(conv.inputs[0].shape)[1], *conv.inputs[1].shape[2:4]
    return 2.0 * np.prod(out) * c * kh * kw


def dense_weight(graph, conv) -> np.ndarray:
    w = graph.constants[conv.inputs[1].name]
    if conv.op == "conv2d_nchwc" and conv.attrs["in_block"]:
        return unpack_conv_weight_blocked(w)
    if conv.op in ("conv2d_kpacked", "conv2d_nchwc"):
        return unpack_conv_weight(w, conv.attrs["block"])
    return w


def ort_session(conv, weight: np.ndarray, bias: np.ndarray, threads: int):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    a = conv.attrs
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(a["pads"]),
                            strides=list(a["strides"]), dilations=list(a["dilations"]))
    graph = helper.make_graph([node], "conv", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(nchw_shape(
            conv.inputs[0].shape)))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weight, "w"), onnx.numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def im2col_conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, conv) -> np.ndarray:
    """numpy's best plain conv: strided windows, one BLAS GEMM, bias."""
    top, left, bottom, right = conv.attrs["pads"]
    sh, sw = conv.attrs["strides"]
    k, c, kh, kw = weight.shape
    oh, ow = conv.outputs[0].shape[2:4]
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::sh, ::sw][:, :, :oh, :ow]                   # n c oh ow kh kw
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(-1, c * kh * kw)
    out = cols @ weight.reshape(k, -1).T + bias
    return out.reshape(x.shape[0], oh, ow, k).transpose(0, 3, 1, 2)


def kernel_inputs(mt, graph, rng) -> list[np.ndarray]:
    """Arrays in the kernel's argument order: constants from the model, random activations."""
    arrays = []
    for value in mt.dag.arg_values:
        if value.name in graph.constants:
            arrays.append(np.ascontiguousarray(graph.constants[value.name]))
        else:
            arrays.append(rng.standard_normal(value.shape).astype(value.dtype))
    return arrays


def _progress(p) -> None:
    print(f"\r  {p.task_name}: trial {p.trials_done}/{p.trials_total}  best "
          f"{p.best_gflops:7.1f} GFLOPS  last {p.last_status:<14} ETA {p.eta_seconds:5.0f} s",
          end="", flush=True)


def interleaved_medians(fns, repeat: int) -> list[float]:
    """Median seconds of each of `fns`, timed in turn within every repeat, so load from
    other processes on the shared machine falls on all of them alike."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def winograd_columns(entry, chain, wgraph, rng, target, db, threads, direct, t_ort,
                     repeat) -> list:
    """Time the layer's Winograd chain (when the model makes one) interleaved with the
    direct kernel `direct` (a call); record the direct/Winograd and onnxruntime/Winograd
    time ratios in `entry`."""
    if chain is None:
        return ["-", float("nan"), float("nan"), float("nan")]
    with kiln_threads(threads):
        run = chain_runner(chain, wgraph, rng, target, db)
    t_direct, t_wino = interleaved_medians([direct, run], 3 * repeat)
    records = "/".join(str(len(db.records(mt.task.workload_key, target))) for mt in chain)
    entry["winograd_records"] = records
    entry[f"winograd_ms_{threads}t"] = round(t_wino * 1e3, 3)
    entry[f"ratio_direct_winograd_{threads}t"] = round(t_direct / t_wino, 3)
    entry[f"ratio_ort_winograd_{threads}t"] = round(t_ort / t_wino, 3)
    return [records, t_wino * 1e3, t_direct / t_wino, t_ort / t_wino]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64, help="records per layer")
    parser.add_argument("--db", default=DEFAULT_DB)
    parser.add_argument("--from-db", action="store_true", help="rebuild the best, no tuning")
    parser.add_argument("--layers", default="", help="comma-separated layer indices")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", default="1,2", help="thread counts to time at")
    parser.add_argument("--winograd", action="store_true",
                        help="also time each 3x3 stride-1 layer as the Winograd kernels "
                             "kiln.compile builds (input transform + batched GEMM + output "
                             "transform with the epilogue), best records or defaults")
    parser.add_argument("--layout", default="nchwc", choices=("nchwc", "nchw"),
                        help="the model's conv kernels in the channel-blocked layout (what "
                             "kiln.compile builds by default) or in NCHW")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    target = canonical_target("native")
    thread_counts = [int(t) for t in args.threads.split(",")]
    db = Database(args.db)
    graph, layers = conv_layers(target, args.layout)
    if args.layers:
        layers = [layers[int(i)] for i in args.layers.split(",")]
    wgraph, chains = winograd_chains(target) if args.winograd else (None, {})
    tuning = {}
    if not args.from_db:
        for mt, conv, _ in layers:
            start = time.perf_counter()
            with kiln_threads(2):
                result = tune_task(mt.task, target, trials=args.trials, db=db,
                                   callback=_progress,
                                   options=MeasureOptions(timeout=60, repeat=3,
                                                          min_repeat_seconds=0.05))
            tuning[mt.name] = (time.perf_counter() - start, result.measured)
            print(f"\n  {describe(conv)}: {result.measured} measured, best "
                  f"{result.best_gflops:.1f} GFLOPS")

    rng = np.random.default_rng(0)
    rows, figures = [], {"bench": "resnet18_conv_layers", "cpu": target.split("-mcpu=")[-1]
                         .split()[0], "layers": []}
    for mt, conv, group in layers:
        arrays = kernel_inputs(mt, graph, rng)
        x = nchw_array(arrays[[v.name for v in mt.dag.arg_values].index(conv.inputs[0].name)])
        weight = dense_weight(graph, conv)
        bias = np.zeros(weight.shape[0], np.float32)
        bias_nodes = [n for n in group.nodes if n.op == "add" and n.inputs[1].name
                      in graph.constants]
        if bias_nodes:
            bias = graph.constants[bias_nodes[0].inputs[1].name].reshape(-1).astype(np.float32)
        flops = conv_flops(conv)
        records = len(db.records(mt.task.workload_key, target))
        entry = {"layer": describe(conv), "ops": "+".join(group.ops), "records": records}
        for threads in thread_counts:
            with kiln_threads(threads):
                kernel = build_best(mt.task, target, db)
            t_kiln = median_seconds(lambda: kernel(*arrays), repeat=args.repeat)
            with numpy_threads(threads):
                t_np = median_seconds(lambda: im2col_conv(x, weight, bias, conv),
                                      repeat=args.repeat)
            sess = ort_session(conv, weight, bias, threads)
            t_ort = (median_seconds(lambda: sess.run(None, {"x": x}), repeat=args.repeat)
                     if sess is not None else float("nan"))
            entry[f"kiln_gflops_{threads}t"] = round(flops / t_kiln / 1e9, 2)
            entry[f"ratio_ort_{threads}t"] = round(t_ort / t_kiln, 3)
            entry[f"ratio_numpy_{threads}t"] = round(t_np / t_kiln, 3)
            row = [describe(conv), threads, records, flops / t_kiln / 1e9,
                   flops / t_ort / 1e9, flops / t_np / 1e9, t_ort / t_kiln, t_np / t_kiln]
            if args.winograd:
                row += winograd_columns(entry, chains.get(conv.name), wgraph, rng, target, db,
                                        threads, lambda: kernel(*arrays), t_ort, args.repeat)
            rows.append(row)
        if mt.name in tuning:
            entry["tune_seconds"], entry["measured"] = round(tuning[mt.name][0], 1), \
                tuning[mt.name][1]
        figures["layers"].append(entry)
    blocked = args.layout == "nchwc"
    print(f"ResNet-18 conv layers on {figures['cpu']} (median of {args.repeat}; ratio > 1: "
          "Kiln faster; Kiln's kernel includes its fused epilogue)")
    if blocked:
        print("not like for like: Kiln's kernels read and write channel-blocked (NCHWc) "
              "activations, as inside a compiled model; onnxruntime's single Conv reads and "
              "writes NCHW and pays its own layout reorders inside the op (--layout nchw: "
              "Kiln in NCHW too)")
    figures["layout"] = args.layout
    figures["like_for_like"] = not blocked
    print_table(["layer", "threads", "records", "kiln GFLOPS",
                 "ort GFLOPS (NCHW, own reorders)" if blocked else "ort GFLOPS", "im2col GFLOPS",
                 "kiln vs ort", "kiln vs im2col"]
                + (["wino records", "wino ms", "direct/wino", "wino vs ort"] if args.winograd
                   else []), rows)
    for threads in thread_counts:
        ort_r = [e[f"ratio_ort_{threads}t"] for e in figures["layers"]]
        np_r = [e[f"ratio_numpy_{threads}t"] for e in figures["layers"]]
        figures[f"geomean_ratio_ort_{threads}t"] = round(float(np.exp(np.mean(np.log(ort_r)))), 3)
        figures[f"geomean_ratio_numpy_{threads}t"] = round(float(np.exp(np.mean(np.log(np_r)))),
                                                           3)
    emit_json(figures)


if __name__ == "__main__":
    main()

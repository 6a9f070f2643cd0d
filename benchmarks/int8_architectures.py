"""Public exports quantized by `kiln quantize`, run by Kiln against onnxruntime int8.

    python benchmarks/int8_architectures.py --onnx DIR [--onnx DIR2 ...] [--models a,b]
        [--forms static,dynamic] [--samples 10] [--rounds 3] [--repeat 10] [--threads 1]
        [--timeout 900] [--qdir /tmp/kiln_int8_models]

Each DIR/*.onnx (the torchvision exports of export_torchvision.py, the Hugging Face ones of
export_transformers.py) is quantized in each --forms by Kiln's own CLI (`python -m kiln
quantize`, i.e. onnxruntime.quantization; the file is kept in --qdir and reused):
  static     --random 8: QDQ, per-channel int8 weights, uint8 activations (the CNN default)
  static_pt  --per-tensor
  static_s8  --activation int8 (int8 activations)
  qop        --format qoperator (QLinearConv, QLinearMatMul, QGemm, ...)
  dynamic    --mode dynamic (MatMulInteger/ConvInteger + DynamicQuantizeLinear: transformers)
and compiled by Kiln with default schedules (`db=None`, 1 thread), in a child process per
(model, form) with --timeout, so a crash or a hang is a row, not the end of the run.

Accuracy, over --samples random inputs (graph inputs as architectures.example_feeds makes
them; a dynamic dim is 1 first, --dynamic-size elsewhere): the max abs difference between
Kiln and onnxruntime int8 of the first output, in quantization steps of that output where
it comes out of a DequantizeLinear (its largest scale), and relative to the fp32 output's
largest magnitude for Kiln vs ort int8, ort int8 vs fp32 and Kiln vs fp32; the same against
"spec": onnxruntime running the int8 model as written (graph optimizations off: DQ -> float
op -> Q, the ONNX semantics, no fused int8 kernels); top-1 agreement (Kiln vs ort int8 /
vs spec) where the output is a [1, C] classification head. onnxruntime's AVX2 u8 x
s8 kernels saturate pairs of products, so a few steps apart is expected where Kiln's exact
kernels are as close to fp32 as onnxruntime is (compare the two fp32 columns).

Latency: Kiln int8 / onnxruntime int8 at each --threads, --rounds interleaved rounds of a
--repeat-run median; at 1 thread by the calling thread's CPU time (both run there; other
processes' time slices drop out), at more by the wall clock. Shared machine: read the ratios.
Prints a table and, last, one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import emit_json, kiln_threads, median_seconds, ort_session, print_table  # noqa: E402

FORMS = {"static": [], "static_pt": ["--per-tensor"], "static_s8": ["--activation", "int8"],
         "qop": ["--format", "qoperator"], "dynamic": ["--mode", "dynamic"]}


def quantize(src: Path, form: str, qdir: Path) -> Path:
    """The model's `form` through `kiln quantize`, cached in qdir."""
    dst = qdir / f"{src.stem}.{form}.onnx"
    if not dst.exists():
        tmp = dst.with_suffix(".part.onnx")
        cmd = [sys.executable, "-m", "kiln", "quantize", str(src), "-o", str(tmp)]
        if form != "dynamic":
            cmd += ["--random", "8"]
        proc = subprocess.run(cmd + FORMS[form], capture_output=True, text=True)
        if proc.returncode != 0 or not tmp.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            raise RuntimeError(f"kiln quantize failed: {tail[0][:200]}")
        tmp.rename(dst)
    return dst


def output_step(model, name: str) -> float | None:
    """The largest scale of the DequantizeLinear that makes output `name`, if one does."""
    from onnx import numpy_helper
    inits = {t.name: t for t in model.graph.initializer}
    consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    for node in model.graph.node:
        if name in node.output and node.op_type == "DequantizeLinear":
            scale = node.input[1]
            if scale in inits:
                return float(np.max(numpy_helper.to_array(inits[scale])))
            if scale in consts:
                return float(np.max(numpy_helper.to_array(consts[scale].attribute[0].t)))
    return None


def spec_session(model):
    """onnxruntime running the int8 model as written, graph optimizations off: DQ -> float
    op -> Q, no fused int8 kernels (no saturating vpmaddubsw on QDQ models)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def one(path: Path, form: str, qdir: Path, samples: int, rounds: int, repeat: int,
        threads: list[int], dynamic_size: int) -> dict:
    import onnx

    import kiln
    from architectures import example_feeds
    res: dict = {}
    qpath = quantize(path, form, qdir)
    fp32, int8 = onnx.load(str(path)), onnx.load(str(qpath))
    res["qdq_nodes"] = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear")
                           for n in int8.graph.node)
    res["qlinear_nodes"] = sum(n.op_type.startswith(("QLinear", "QGemm")) or
                               n.op_type.endswith("Integer") for n in int8.graph.node)
    feeds = example_feeds(fp32, dynamic_size)
    shapes = {n: a.shape for n, a in feeds.items()}
    start = time.perf_counter()
    with kiln_threads(max(threads)):
        compiled = kiln.compile(int8, db=None, threads=max(threads), input_shapes=shapes)
    res["compile_s"] = round(time.perf_counter() - start, 1)
    res["kernels"] = len(compiled.plan.steps)
    compiled.set_num_threads(1)
    s_fp32, s_int8 = ort_session(fp32, 1), ort_session(int8, 1)
    s_spec = spec_session(int8)
    out_name = int8.graph.output[0].name
    step = output_step(int8, out_name)
    rng = np.random.default_rng(5)
    worst = {"kiln_ort": 0.0, "kiln_spec": 0.0, "ort_fp32": 0.0, "kiln_fp32": 0.0}
    top1, top1_spec, classifier = 0, 0, None
    for k in range(samples):
        x = feeds if k == 0 else {n: (rng.standard_normal(a.shape).astype(a.dtype)
                                      if np.issubdtype(a.dtype, np.floating) else a)
                                  for n, a in feeds.items()}
        ours = compiled.run(x)[0]
        theirs = s_int8.run(None, x)[0]
        ref = s_fp32.run(None, x)[0]
        spec = s_spec.run(None, x)[0]
        worst["kiln_spec"] = max(worst["kiln_spec"], float(np.abs(ours - spec).max()))
        top1_spec += int(ours.argmax() == spec.argmax())
        scale = float(np.abs(ref).max()) or 1.0
        worst["kiln_ort"] = max(worst["kiln_ort"], float(np.abs(ours - theirs).max()))
        worst["ort_fp32"] = max(worst["ort_fp32"], float(np.abs(theirs - ref).max()) / scale)
        worst["kiln_fp32"] = max(worst["kiln_fp32"], float(np.abs(ours - ref).max()) / scale)
        worst.setdefault("scale", scale)
        classifier = ours.ndim == 2 and ours.shape[0] == 1 and ours.shape[1] >= 10
        top1 += int(ours.argmax() == theirs.argmax())
    res["max_abs_kiln_ort"] = worst["kiln_ort"]
    res["steps_kiln_ort"] = None if step is None else round(worst["kiln_ort"] / step, 2)
    res["rel_kiln_ort"] = worst["kiln_ort"] / worst["scale"]
    res["max_abs_kiln_spec"] = worst["kiln_spec"]
    res["steps_kiln_spec"] = None if step is None else round(worst["kiln_spec"] / step, 2)
    res["rel_kiln_spec"] = worst["kiln_spec"] / worst["scale"]
    res["top1_agree_spec"] = top1_spec / samples if classifier else None
    res["rel_ort_fp32"], res["rel_kiln_fp32"] = worst["ort_fp32"], worst["kiln_fp32"]
    res["top1_agree"] = top1 / samples if classifier else None
    for t in threads:
        compiled.set_num_threads(t)
        sess = ort_session(int8, t)
        clock = time.thread_time if t == 1 else time.perf_counter
        ks, os_, ratios = [], [], []
        for r in range(rounds):
            a = median_seconds(lambda: compiled.run(feeds), repeat, clock=clock)
            b = median_seconds(lambda: sess.run(None, feeds), repeat, clock=clock)
            ks.append(a * 1e3)
            os_.append(b * 1e3)
            ratios.append(a / b)
        res[f"{t}t"] = {"kiln_ms": round(statistics.median(ks), 3),
                        "ort_ms": round(statistics.median(os_), 3),
                        "ratio": round(statistics.median(ratios), 3)}
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", action="append", required=True, metavar="DIR",
                        help="a folder of fp32 .onnx exports (repeatable)")
    parser.add_argument("--models", help="comma-separated file stems (default: all)")
    parser.add_argument("--forms", default="static",
                        help=f"comma-separated, of {', '.join(FORMS)}")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", default="1")
    parser.add_argument("--dynamic-size", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per (model, form), quantization and compile included")
    parser.add_argument("--qdir", default="/tmp/kiln_int8_models",
                        help="where the quantized models are written and reused")
    parser.add_argument("--one", nargs=2, metavar=("PATH", "FORM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    qdir = Path(args.qdir)
    qdir.mkdir(parents=True, exist_ok=True)
    if args.one:      # the child: one (model, form), its result as the last line
        path, form = Path(args.one[0]), args.one[1]
        try:
            res = {"status": "ok", **one(path, form, qdir, args.samples, args.rounds,
                                         args.repeat, threads, args.dynamic_size)}
        except Exception as exc:  # noqa: BLE001 - a failure is a result
            res = {"status": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(res))
        return 0
    forms = args.forms.split(",")
    bad = [f for f in forms if f not in FORMS]
    if bad:
        parser.error(f"unknown form(s) {bad}; known: {list(FORMS)}")
    paths = [p for d in args.onnx for p in sorted(Path(d).glob("*.onnx"))]
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        parser.error("no .onnx models to run")
    figures, rows = {}, []
    for path in paths:
        for form in forms:
            cmd = [sys.executable, __file__, "--onnx", str(path.parent), "--one", str(path),
                   form, "--samples", str(args.samples), "--rounds", str(args.rounds),
                   "--repeat", str(args.repeat), "--threads", args.threads,
                   "--dynamic-size", str(args.dynamic_size), "--qdir", str(qdir)]
            start = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=args.timeout)
                lines = proc.stdout.strip().splitlines()
                res = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {
                    "status": f"crashed (exit {proc.returncode}): "
                              f"{(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}"}
            except subprocess.TimeoutExpired:
                res = {"status": f"timeout after {args.timeout:.0f} s"}
            res["wall_s"] = round(time.perf_counter() - start, 1)
            figures[f"{path.stem}/{form}"] = res
            print(f"{path.stem} {form}: {res['status']} ({res['wall_s']} s)"
                  + (f" ratio {res['1t']['ratio']}" if "1t" in res else ""),
                  file=sys.stderr, flush=True)
            if res["status"] != "ok":
                rows.append([path.stem, form, res["status"][:70]] + [""] * 10)
                continue
            t1 = res.get(f"{threads[0]}t", {})
            rows.append([path.stem, form, "ok", res["compile_s"],
                         "-" if res["steps_kiln_spec"] is None else res["steps_kiln_spec"],
                         "-" if res["steps_kiln_ort"] is None else res["steps_kiln_ort"],
                         f"{res['rel_kiln_spec']:.1e}", f"{res['rel_kiln_ort']:.1e}", f"{res['rel_ort_fp32']:.1e}",
                         f"{res['rel_kiln_fp32']:.1e}",
                         "-" if res["top1_agree"] is None else
                         f"{res['top1_agree']:.2f} / {res['top1_agree_spec']:.2f}",
                         t1.get("ratio", ""),
                         " / ".join(str(res[f"{t}t"]["ratio"]) for t in threads[1:])])
    print(f"Kiln int8 (default schedules) vs onnxruntime int8; errors over {args.samples} "
          f"random inputs; latency ratio kiln/ort at {threads[0]} thread(s)"
          + (" (thread CPU time)" if threads[0] == 1 else ""))
    print_table(["model", "form", "status", "compile s", "steps vs spec", "steps vs ort",
                 "rel vs spec", "rel vs ort", "ort vs fp32", "kiln vs fp32",
                 "top-1 = ort / spec", f"ratio {threads[0]}t",
                 "ratio " + ",".join(f"{t}t" for t in threads[1:])], rows)
    ok = [r for r in figures.values() if r["status"] == "ok"]
    ratios = [r[f"{threads[0]}t"]["ratio"] for r in ok]
    geo = float(np.exp(np.mean(np.log(ratios)))) if ratios else None
    if geo is not None:
        print(f"{len(ok)} of {len(figures)} ok; geomean kiln/ort int8 at {threads[0]} "
              f"thread(s) {geo:.3f}")
    emit_json({"bench": "int8_architectures", "forms": forms, "threads": threads,
               "samples": args.samples, "ok": len(ok), "runs": len(figures),
               "geomean_ratio": None if geo is None else round(geo, 3), "results": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

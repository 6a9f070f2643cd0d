"""int8: the integer dot-product peak, the int8 GEMM, and quantized models vs onnxruntime int8.

    python benchmarks/int8.py [--parts peak,gemm,models] [--models resnet18,mobilenetv2,bert]
                              [--threads 1,2] [--samples 100] [--db PATH] [--repeat 7]
                              [--gemm-weights full,symmetric] [--clock wall|cpu]
                              [--profile N] [--vs-default]

- peak: chains of the target's u8 x s8 -> s32 dot instruction with no loads (vpdpbusd with
  AVX512-VNNI; else vpmaddubsw + vpmaddwd, onnxruntime's saturating AVX2 step, and the exact
  int16-pair step Kiln's AVX2 kernels issue, vpmaddwd + vpaddd), one and two OS threads:
  GOPS (2 ops per multiply-add) of the instructions alone.
- gemm: 1024^3 u8 x s8 -> s32 with Kiln's packed dot4 kernel (matmul_int8x4, the search
  space's default schedule or the database's best) vs onnxruntime's MatMulInteger, same run;
  Kiln in each weight form of --int8-forms: "pairs" (what the target gets: int16 weight pairs
  and vpmaddwd where it lacks VNNI, graph/passes/int8/widen.py) and "bytes" (the byte words
  and dot4_u8s8 / dot4_u8s8sym, as before that pass);
  with int8 weights over the full range and symmetric ones ([-127, 127], onnxruntime's
  quantizer's), which Kiln's AVX2 lowering does with half the split's multiplies.
- models: the builders of graph/models.py quantized by onnxruntime.quantization (ResNet-18 and
  MobileNetV2 static QDQ per-channel, calibrated on 8 random inputs, and in the QOperator
  form as resnet18-qop / mobilenetv2-qop; the BERT-like encoder dynamic), Kiln int8 (each
  of --int8-forms) vs onnxruntime int8 vs Kiln fp32 latency; accuracy (of the first form)
  on `samples` random
  inputs: max abs error and top-1 agreement of Kiln int8 against onnxruntime int8 and of
  onnxruntime int8 against fp32.
Prints tables and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import llvmlite.ir as ir
import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, kiln_threads, print_table  # noqa: E402

from kiln.autotune.space import defaults as space_defaults  # noqa: E402
from kiln.codegen import Target  # noqa: E402
from kiln.codegen import emit_expr  # noqa: E402
from kiln.codegen.dot4 import dot4_strategies, target_features  # noqa: E402
from kiln.codegen.jit import compile_module  # noqa: E402
from kiln.graph import models  # noqa: E402
from kiln.graph.compile.model import compile_model  # noqa: E402
from kiln.graph.onnx import quant as onnx_quant_ops  # noqa: E402
from kiln.graph import passes  # noqa: E402
from kiln.graph.passes.int8 import widen as int8_widen  # noqa: E402
from kiln.quantize import quantize_model, random_inputs  # noqa: E402

CHAINS = 12
ITERATIONS = 1 << 21


def build_dot_loop(target: Target, chains: int = CHAINS, pairs: bool = False,
                   perm: bool = False):
    """`void dot_loop(i64 n, i32* out)`: n rounds of `chains` independent dot steps at the
    widest width the target has; returns (module, ops per round, instruction name). With
    `pairs` (a target without VNNI): the exact int16-pair step of dot2_s16 instead, acc +=
    vpmaddwd(acc, w): 2 multiply-adds per int32 lane. With `perm` (no VNNI): the madd step
    of dot4_u8s8perm as matmul_int8x4_perm's register tile issues it, one vpshufb of the
    activation bytes per two accumulators (a row meeting a 16-column panel) before the
    vpmaddubsw + vpmaddwd + vpaddd of each."""
    lanes, how = dot4_strategies(target_features(target))[0]
    if pairs:
        how = "pairs"
    i8, i16, i32, i64 = (ir.IntType(b) for b in (8, 16, 32, 64))
    v32, v16, v8 = ir.VectorType(i32, lanes), ir.VectorType(i16, 2 * lanes), \
        ir.VectorType(i8, 4 * lanes)
    module = ir.Module(name="dot_peak")
    module.triple = target.triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, i32.as_pointer()]),
                     "dot_loop")
    if how == "vnni":
        dp = ir.Function(module, ir.FunctionType(v32, [v32, v32, v32]),
                         f"llvm.x86.avx512.vpdpbusd.{lanes * 32}")
    else:
        names = {8: ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"),
                 16: ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512"),
                 4: ("llvm.x86.ssse3.pmadd.ub.sw.128", "llvm.x86.sse2.pmadd.wd")}[lanes]
        ubsw = ir.Function(module, ir.FunctionType(v16, [v8, v8]), names[0])
        wd = ir.Function(module, ir.FunctionType(v32, [v16, v16]), names[1])
        shuffle = ir.Function(module, ir.FunctionType(v8, [v8, v8]), {
            8: "llvm.x86.avx2.pshuf.b", 16: "llvm.x86.avx512.pshuf.b.512",
            4: "llvm.x86.ssse3.pshuf.b.128"}[lanes])
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    # operands come through a volatile-free opaque value so LLVM cannot fold the chains
    a_word = b.bitcast(ir.Constant(v32, [0x01020304] * lanes), v8)
    b_word = b.bitcast(ir.Constant(v32, [0x01FF0203] * lanes), v8)
    ones = ir.Constant(v16, [1] * (2 * lanes))
    sel_word = b.bitcast(ir.Constant(v32, [0x0C080400 + 0x01010101 * (k % 4)
                                           for k in range(lanes)]), v8)
    b.branch(loop)
    b.position_at_end(loop)
    counter = b.phi(i64)
    accs = [b.phi(v32) for _ in range(chains)]
    nxt = []
    for acc in accs:
        if how == "vnni":
            nxt.append(b.call(dp, [acc, b.bitcast(a_word, v32), b.bitcast(b_word, v32)]))
        elif how == "pairs":
            nxt.append(b.add(acc, b.call(wd, [b.bitcast(acc, v16), b.bitcast(b_word, v16)])))
        elif perm:   # one vpshufb of the even chain's bytes serves it and the next one
            k = len(nxt)
            if k % 2 == 0:
                picked = b.call(shuffle, [b.bitcast(acc, v8), sel_word])
            pairs = b.call(ubsw, [picked, b_word])
            nxt.append(b.add(acc, b.call(wd, [pairs, ones])))
        else:   # acc += pmaddwd(pmaddubsw(acc bytes, b), 1): a dependent chain per register
            pairs = b.call(ubsw, [b.bitcast(acc, v8), b_word])
            nxt.append(b.add(acc, b.call(wd, [pairs, ones])))
    step = b.add(counter, ir.Constant(i64, 1))
    counter.add_incoming(ir.Constant(i64, 0), entry)
    counter.add_incoming(step, loop)
    for k, (acc, new) in enumerate(zip(accs, nxt)):
        acc.add_incoming(ir.Constant(v32, [k + 1] * lanes), entry)
        acc.add_incoming(new, loop)
    b.cbranch(b.icmp_unsigned("<", step, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = nxt[0]
    for value in nxt[1:]:
        total = b.add(total, value)
    b.store(b.extract_element(total, ir.Constant(i32, 0)), fn.args[1])
    b.ret_void()
    if how == "pairs":
        return module, 2 * 2 * lanes * chains, "vpmaddwd+vpaddd"   # 2 per int32 lane
    name = ("vpdpbusd" if how == "vnni" else
            "vpshufb/2+vpmaddubsw+vpmaddwd" if perm else "vpmaddubsw+vpmaddwd")
    return module, 2 * 4 * lanes * chains, name   # 4 multiply-adds per int32 lane


def run_threads(fn, threads: int, iterations: int) -> float:
    """Seconds for `threads` OS threads each running `iterations` rounds at once."""
    import threading
    outs = [ctypes.c_int32() for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def work(k):
        barrier.wait()
        fn(iterations, ctypes.byref(outs[k]))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def _timed_in_thread(fn, iterations: int) -> float:
    """Seconds of `fn(iterations, out)` in the calling thread, by --clock (CPU time: what
    other processes' load does not inflate)."""
    out = ctypes.c_int32()
    start = CLOCK()
    fn(iterations, ctypes.byref(out))
    return CLOCK() - start


def bench_peak(target: Target, repeat: int) -> dict:
    """The target's dot instruction chains and, without VNNI, the exact pair step's
    (vpmaddwd + vpaddd: what matmul_int16x2 / dot4_u8s16 issue) and the perm step's (a
    vpshufb per two vpmaddubsw + vpmaddwd + vpaddd: matmul_int8x4_perm), timed in turns;
    1 thread by --clock in the calling thread, 2 threads by the wall clock."""
    loops = [build_dot_loop(target)]
    if dot4_strategies(target_features(target))[0][1] != "vnni":
        loops.append(build_dot_loop(target, pairs=True))
        loops.append(build_dot_loop(target, perm=True))
    outs, rows, fns = {"instruction": loops[0][2]}, [], []
    for module, ops_per_round, name in loops:
        compiled = compile_module(module, target)
        fns.append((compiled, ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(
            ctypes.c_int32))(compiled.address("dot_loop")), ops_per_round, name))
    for threads in (1, 2):
        for k, (_, fn, ops_per_round, name) in enumerate(fns):
            run_threads(fn, threads, ITERATIONS // 8)
            times = [run_threads(fn, threads, ITERATIONS) if threads > 1 or CLOCK is
                     time.perf_counter else _timed_in_thread(fn, ITERATIONS)
                     for _ in range(repeat)]
            gops = threads * ITERATIONS * ops_per_round / 1e9
            key = ("peak", "pairs_peak", "perm_peak")[k]
            outs[f"{key}_gops_{threads}t_median"] = round(gops / statistics.median(times), 1)
            outs[f"{key}_gops_{threads}t_best"] = round(gops / min(times), 1)
            rows.append([name, threads, gops / statistics.median(times), gops / min(times)])
    print(f"int8 dot peaks ({CHAINS} chains)")
    print_table(["instructions", "threads", "GOPS (median)", "GOPS (best)"], rows)
    return outs


def _matmul_integer_model(n: int, low: int = -128) -> onnx.ModelProto:
    from onnx import TensorProto, helper
    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [n, n])],
        initializer=[onnx.numpy_helper.from_array(
            np.random.default_rng(1).integers(low, 128, (n, n)).astype(np.int8), "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@contextlib.contextmanager
def _int8_form(form: str):
    """Compile int8 kernels with weights as "pairs" (the target's choice), "bytes" (the
    widening pass off), "nchw" (pairs, but the convs in NCHW: the pixel-major pass off,
    graph/passes/int8/nhwc.py) or "dot4" (pairs, but no activation pairs: every GEMM splits
    its activation bytes in the inner loop, graph/passes/int8/pairs.py off) or "noperm"
    (pairs without the saturation-safe vpmaddubsw GEMMs of graph/passes/int8/perm.py: every
    GEMM exact through vpmaddwd, as before that pass) or "noimplicit" (pairs with every
    windowed conv through its im2col copy: graph/passes/int8/implicit.py off) or "noshortk"
    (pairs with the short-K dot4 GEMMs tiled as longer ones, autotune/space/int8.py
    short_k_columns off); on a VNNI target also "nopanels" (matmul_int8x4 weights as
    [K4, N] words, graph/passes/int8/panels.py off), "tallcache" (dot4 GEMM cache tiles of
    up to 8 register tiles of rows, space_int8.py one_row_tile_per_cache_tile off) and
    "unfused" (vpdpbusd from zero plus a vpaddd, codegen/emit_expr.py _accumulated_dot off)
    and "noviews" (uint8 rows packed by a copy kernel, int8_panels.py view_int8_rows off),
    "novnniconv" (the conv GEMMs through im2col and row-major weights:
    graph/passes/int8/vnni_conv.py off), "tallconvtile" (those convs with the prepacked
    GEMM's cache tiles: autotune/space/int8_conv.py off) and "widedw" (depthwise register
    tiles as wide as the accumulator budget: depthwise_register_rows off);
    "onereduce": DynamicQuantizeLinear's min and max each as one reduction over every axis
    (graph/onnx/quant.py _whole_reduce off);
    the model cache is off for all but the first: its key does not see the switch."""
    forms = ("pairs", "bytes", "nchw", "dot4", "noperm", "noimplicit", "noshortk",
             "nopanels", "tallcache", "unfused", "noviews", "onereduce", "novnniconv",
             "tallconvtile", "widedw")
    if "+" in form:      # several switches at once: "noimplicit+noshortk"
        with contextlib.ExitStack() as stack:
            for part in form.split("+"):
                stack.enter_context(_int8_form(part))
            yield
        return
    if form not in forms:
        raise SystemExit(f"--int8-forms: {form!r} is none of {', '.join(forms)}")
    saved, saved_dir = int8_widen.widens_int8, os.environ.get("KILN_CACHE_DIR")
    saved_short = space_defaults.short_k_columns
    saved_conv_tile = space_defaults.one_register_tile_per_cache_tile
    saved_dw_rows = space_defaults.depthwise_register_rows
    saved_pipeline = passes.PIPELINE
    saved_rows, saved_fused = space_defaults.one_row_tile_per_cache_tile, emit_expr._has_vnni
    saved_reduce = onnx_quant_ops._whole_reduce
    if form == "onereduce":
        onnx_quant_ops._whole_reduce = lambda ctx, op, x: ctx.emit(
            op, [x], {"axes": tuple(range(len(x.shape))), "keepdims": 0})
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "nopanels":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE if p[0] != "int8 weight panels")
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "noviews":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE if p[0] != "int8 activation views")
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "tallcache":
        space_defaults.one_row_tile_per_cache_tile = lambda target, op: False
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "unfused":
        emit_expr._has_vnni = lambda target: False
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "bytes":
        int8_widen.widens_int8 = lambda target: False
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "nchw":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE if p[0] != "pixel-major int8")
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "noperm":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE
                                if p[0] != "saturation-safe int8 pairs")
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "noshortk":
        space_defaults.short_k_columns = lambda target, op: False
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "noimplicit":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE if p[0] != "implicit int8 convs")
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "widedw":
        space_defaults.depthwise_register_rows = lambda target, op, extent, rows: rows
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "tallconvtile":
        space_defaults.one_register_tile_per_cache_tile = lambda target, op: False
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "novnniconv":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE
                                if p[0] != "implicit int8 convs (VNNI)")
        os.environ["KILN_CACHE_DIR"] = "off"
    if form == "dot4":
        passes.PIPELINE = tuple(p for p in passes.PIPELINE if p[0] != "int16 activation pairs")
        os.environ["KILN_CACHE_DIR"] = "off"
    try:
        yield
    finally:
        int8_widen.widens_int8 = saved
        space_defaults.short_k_columns = saved_short
        space_defaults.one_register_tile_per_cache_tile = saved_conv_tile
        space_defaults.depthwise_register_rows = saved_dw_rows
        space_defaults.one_row_tile_per_cache_tile, emit_expr._has_vnni = saved_rows, saved_fused
        onnx_quant_ops._whole_reduce = saved_reduce
        passes.PIPELINE = saved_pipeline
        if saved_dir is None:
            os.environ.pop("KILN_CACHE_DIR", None)
        else:
            os.environ["KILN_CACHE_DIR"] = saved_dir


def _session(model: onnx.ModelProto, threads: int, optimize: bool = True):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if not optimize:     # the spec: QDQ run as written (float ops between Q and DQ)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def bench_gemm(threads: list[int], db, repeat: int, n: int = 1024,
               weights: str = "full", forms: tuple[str, ...] = ("pairs",)) -> dict:
    """MatMulInteger n^3 through Kiln's frontend (-> matmul_int8x4) vs onnxruntime. weights
    "full": int8 weights in [-128, 127] (Kiln's AVX2 split lowering); "symmetric": in
    [-127, 127], what onnxruntime's quantizer makes (the sign-trick lowering)."""
    model = _matmul_integer_model(n, -127 if weights == "symmetric" else -128)
    a = np.random.default_rng(0).integers(0, 256, (n, n)).astype(np.uint8)
    ops = 2.0 * n ** 3
    rows, out = [], {}
    for t in threads:
        compiled = {}
        for form in forms:
            with kiln_threads(t), _int8_form(form):
                compiled[form] = compile_model(model, db=db, threads=t)
        sess = _session(model, t)
        theirs = sess.run(None, {"a": a})[0]
        fns = {form: (lambda c=c: c.run({"a": a})) for form, c in compiled.items()}
        timed = _interleaved({**fns, "ort": lambda: sess.run(None, {"a": a})}, repeat,
                             settle=0.3 if t > 1 else 0.0)
        o_s, o_med = timed["ort"]
        for form, c in compiled.items():
            ours = c.run({"a": a})[0]
            exact = bool(np.array_equal(ours, a.astype(np.int32) @ model_b(model)))
            k_s, k_med = timed[form]
            rows.append([t, form, ops / k_s / 1e9, ops / o_s / 1e9, o_s / k_s,
                         ops / k_med / 1e9, ops / o_med / 1e9, exact,
                         int(np.abs(ours.astype(np.int64) - theirs).max())])
            out[f"gemm_{weights}_{form}_{t}t"] = {
                "kiln_gops_best": round(ops / k_s / 1e9, 1),
                "ort_gops_best": round(ops / o_s / 1e9, 1),
                "kiln_gops_median": round(ops / k_med / 1e9, 1),
                "ort_gops_median": round(ops / o_med / 1e9, 1), "exact": exact}
    print(f"int8 GEMM {n}^3 (u8 x s8 -> s32, {weights} weights): Kiln matmul_int8x4 vs "
          "onnxruntime MatMulInteger (best of interleaved runs; medians after)")
    print_table(["threads", "kiln form", "kiln GOPS", "ort GOPS", "ort time / kiln time",
                 "kiln median", "ort median", "kiln exact", "max |kiln - ort|"], rows)
    return out


def model_b(model: onnx.ModelProto) -> np.ndarray:
    return onnx.numpy_helper.to_array(model.graph.initializer[0]).astype(np.int32)


MODELS = {   # name: (fp32 builder, quantize mode, static format)
    "resnet18": (lambda: models.resnet18_like(image_size=224), "static", "qdq"),
    "mobilenetv2": (lambda: models.mobilenetv2_like(image_size=224), "static", "qdq"),
    "bert": (lambda: models.bert_like_encoder(seq=128, hidden=256, layers=2), "dynamic",
             "qdq"),
    # the same CNNs in onnxruntime's QOperator form (QLinearConv, QLinearAdd, ...)
    "resnet18-qop": (lambda: models.resnet18_like(image_size=224), "static", "qoperator"),
    "mobilenetv2-qop": (lambda: models.mobilenetv2_like(image_size=224), "static",
                        "qoperator"),
}

# --clock: "wall" (perf_counter) or "cpu" (the calling thread's CPU time: what the other
# processes on a loaded machine do not inflate; meaningful at 1 thread only, where Kiln's and
# onnxruntime's kernels run on the calling thread)
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
CLOCK = time.perf_counter


def _top1(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1).argmax(-1)


def _accuracy(sessions: dict, compiled, model, samples: int) -> dict:
    """Max abs error and top-1 agreement over `samples` random inputs of Kiln int8 against
    onnxruntime int8, against the spec (onnxruntime running the QDQ/integer model with graph
    optimizations off: DQ -> float op -> Q, no fused int8 kernels) and against fp32."""
    pairs = {"kiln_vs_ort_int8": ("kiln", "ort_int8"), "kiln_vs_spec": ("kiln", "spec"),
             "ort_int8_vs_spec": ("ort_int8", "spec"), "kiln_vs_fp32": ("kiln", "fp32"),
             "ort_int8_vs_fp32": ("ort_int8", "fp32")}
    worst = dict.fromkeys(pairs, 0.0)
    agree = dict.fromkeys(pairs, 0)
    for feeds in random_inputs(model, samples, seed=7):
        outs = {"kiln": compiled.run(feeds)[0]}
        outs.update({k: sess.run(None, feeds)[0] for k, sess in sessions.items()})
        for key, (a, b) in pairs.items():
            worst[key] = max(worst[key], float(np.abs(outs[a] - outs[b]).max()))
            agree[key] += bool(np.array_equal(_top1(outs[a]), _top1(outs[b])))
    return {**{f"max_abs_{k}": round(v, 4) for k, v in worst.items()},
            **{f"top1_{k}": agree[k] / samples for k in pairs}}


def _interleaved(fns: dict, repeat: int, settle: float = 0.0) -> dict:
    """(best, median) seconds of each callable, timed in turns so they share the noise.
    With `settle` (runs on several threads), each turn starts after that many seconds of
    quiet and an untimed call: a runtime's pool threads spin for a while after its call
    (onnxruntime's), and on 2 cores the next runtime's second thread met that spinner
    (Kiln ResNet-18 int8 read 10.7 ms at 2 threads in turns right after onnxruntime, 5.8 ms
    alone; 2026-11-26 14:45 UTC)."""
    time.sleep(0.3)
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    clock = CLOCK
    for _ in range(repeat):
        for k, fn in fns.items():
            if settle:
                time.sleep(settle)
                fn()
            start = clock()
            fn()
            times[k].append(clock() - start)
    return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def _kind(kernel: str) -> str:
    """A kernel's kind: its name without the hash (matmul_int8x4_add_requantize)."""
    return kernel.rsplit("_", 1)[0]


def _profile(compiled, model: onnx.ModelProto, feeds: dict, top: int,
             repeat: int = 15) -> dict:
    """Per kernel at 1 thread, each kernel called alone and timed by --clock (best of
    `repeat`), summed by kind; onnxruntime int8's per-node times (its own profiler, wall
    clock, median per node) summed by op type. Prints both; returns the sums."""
    import json
    compiled.run(feeds)
    compiled._bind(feeds)
    per = [[] for _ in compiled._steps]
    clock = CLOCK
    for _ in range(repeat):
        for k, (fn, args) in enumerate(compiled._steps):
            start = clock()
            fn(*args)
            per[k].append(clock() - start)
    rows = sorted(((min(t) * 1e3, s.kernel) for s, t in zip(compiled.plan.steps, per)),
                  reverse=True)
    kinds: dict[str, float] = {}
    for ms, kernel in rows:
        kinds[_kind(kernel)] = kinds.get(_kind(kernel), 0.0) + ms
    total = sum(ms for ms, _ in rows)
    print(f"Kiln int8 kernels, 1 thread ({len(rows)} calls, {total:.2f} ms summed); the "
          f"{top} slowest:")
    print_table(["ms", "kernel"], [[ms, k] for ms, k in rows[:top]])
    print_table(["ms (summed)", "share", "kind"],
                [[ms, ms / total, k] for k, ms in sorted(kinds.items(), key=lambda x: -x[1])])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        for _ in range(repeat):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    nodes: dict[str, list] = {}
    for ev in events:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            nodes.setdefault(ev["name"], [ev["args"]["op_name"]]).append(ev["dur"] / 1e3)
    ops: dict[str, float] = {}
    for op, *times in nodes.values():
        ops[op] = ops.get(op, 0.0) + statistics.median(times)
    ort_total = sum(ops.values())
    print(f"onnxruntime int8 nodes, 1 thread ({len(nodes)} nodes, {ort_total:.2f} ms summed, "
          "wall clock):")
    print_table(["ms (summed)", "share", "op"],
                [[ms, ms / ort_total, op] for op, ms in sorted(ops.items(), key=lambda x: -x[1])])
    return {"kiln_ms": round(total, 3), "kiln_kinds_ms": {k: round(v, 3) for k, v in kinds.items()},
            "ort_ms": round(ort_total, 3), "ort_ops_ms": {k: round(v, 3) for k, v in ops.items()}}


def bench_models(names: list[str], threads: list[int], db, repeat: int, samples: int,
                 forms: tuple[str, ...] = ("pairs",), profile: int = 0,
                 vs_default: bool = False) -> dict:
    out, rows = {}, []
    for name in names:
        build, mode, quant_format = MODELS[name]
        fp32 = build()
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "q.onnx")
            onnx.save(fp32, src)
            quantize_model(src, dst, mode=mode, random=8, quant_format=quant_format)
            int8 = onnx.load(dst)
        feeds = random_inputs(fp32, 1, seed=11)[0]
        entry = {}
        start = time.perf_counter()          # compiled once, run at each thread count
        variants = {}
        with kiln_threads(max(threads)):
            for form in forms:
                with _int8_form(form):
                    variants[form] = compile_model(int8, db=db, threads=max(threads))
            compile_s = time.perf_counter() - start
            if vs_default:      # the first form with the search space's default schedules
                with _int8_form(forms[0]):
                    variants["default"] = compile_model(int8, db=None, threads=max(threads))
            ours_fp32 = compile_model(fp32, db=db, threads=max(threads))
        ours = variants[forms[0]]
        print(f"{name}: int8 compiled in {compile_s:.0f} s ({len(forms)} forms)", flush=True)
        for t in threads:
            for c in variants.values():
                c.set_num_threads(t)
            ours_fp32.set_num_threads(t)
            int8_sess, fp32_sess = _session(int8, t), _session(fp32, t)
            extra = {f"kiln_int8_{form}": (lambda c=c: c.run(feeds))
                     for form, c in variants.items() if form != forms[0]}
            timed = _interleaved({"kiln_int8": lambda: ours.run(feeds),
                                  "ort_int8": lambda: int8_sess.run(None, feeds),
                                  "kiln_fp32": lambda: ours_fp32.run(feeds),
                                  "ort_fp32": lambda: fp32_sess.run(None, feeds),
                                  **extra}, repeat, settle=0.3 if t > 1 else 0.0)
            entry[f"{t}t"] = {f"{k}_ms_{which}": round(v[i] * 1e3, 3) for k, v in timed.items()
                              for i, which in ((0, "best"), (1, "median"))}
            entry[f"{t}t"]["compile_s"] = round(compile_s, 1)
            if vs_default:
                entry[f"{t}t"]["tuned_over_default_median"] = round(
                    timed["kiln_int8"][1] / timed["kiln_int8_default"][1], 3)
            best = {k: v[0] * 1e3 for k, v in timed.items()}
            rows.append([name, t, best["kiln_int8"], best["ort_int8"],
                         best["kiln_int8"] / best["ort_int8"], best["kiln_fp32"],
                         best["ort_fp32"], timed["kiln_int8"][1] * 1e3,
                         timed["ort_int8"][1] * 1e3]
                        + [f"{best[k]:.2f} ({best[k] / best['ort_int8']:.2f}x ort)"
                           for k in extra])
            if t == 1 and profile:
                entry["profile"] = _profile(ours, int8, feeds, profile)
            if t == threads[0]:
                spec = _session(int8, t, optimize=False)
                entry["accuracy"] = _accuracy({"ort_int8": int8_sess, "spec": spec,
                                               "fp32": fp32_sess}, ours, fp32, samples)
        out[name] = entry
    print(f"quantized models: latency in ms (best of the interleaved runs; medians after); "
          f"kiln int8 = the {forms[0]} form")
    print_table(["model", "threads", "kiln int8", "ort int8", "kiln/ort int8", "kiln fp32",
                 "ort fp32", "kiln int8 median", "ort int8 median"]
                + [f"kiln int8 {form}" for form in forms[1:]]
                + (["kiln int8 default schedules"] if vs_default else []), rows)
    print("accuracy on random inputs: max abs error / top-1 agreement")
    keys = ["kiln_vs_spec", "kiln_vs_ort_int8", "ort_int8_vs_spec", "ort_int8_vs_fp32",
            "kiln_vs_fp32"]
    print_table(["model"] + keys, [[n] + [f"{e['accuracy']['max_abs_' + k]:.3f} / "
                                          f"{e['accuracy']['top1_' + k]:.2f}" for k in keys]
                                   for n, e in out.items()])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="peak,gemm,models")
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--gemm-weights", default="full,symmetric",
                        help="int8 weight ranges of the GEMM: full [-128, 127], symmetric "
                        "[-127, 127]")
    parser.add_argument("--int8-forms", default="pairs,bytes",
                        help="Kiln int8 weight forms to time side by side (the first is the "
                        "one the models' accuracy is checked for): pairs, bytes, nchw (pairs "
                        "with the convs in NCHW, as before the pixel-major pass), dot4 (pairs "
                        "without the activation pairs of graph/passes/int8/pairs.py), noperm "
                        "(pairs without the saturation-safe vpmaddubsw GEMMs of "
                        "graph/passes/int8/perm.py), noimplicit (pairs with the windowed convs "
                        "through im2col, graph/passes/int8/implicit.py off), noshortk (pairs "
                        "with the short-K GEMMs tiled as longer ones, autotune/space/int8.py "
                        "short_k_columns off), novnniconv (pairs with VNNI's conv GEMMs "
                        "through im2col and row-major weights, graph/passes/int8/vnni_conv.py "
                        "off), tallconvtile (those convs with the GEMM's cache tiles, "
                        "autotune/space/int8_conv.py off), widedw (the depthwise register "
                        "tile cap off); join switches with + "
                        "(noimplicit+noshortk)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS),
                        help="wall: perf_counter; cpu: the calling thread's CPU time "
                        "(use with --threads 1; other processes' load does not inflate it)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="per-kernel profile of each model's Kiln int8 at 1 thread (the "
                        "N slowest kernels, all summed by kind) and onnxruntime's per-node "
                        "times by op type")
    parser.add_argument("--vs-default", action="store_true",
                        help="with --db: also time the first form compiled without it (the "
                        "search space's default schedules), interleaved in the same run")
    parser.add_argument("--db", default=None, help="tuning database (default: none, the "
                        "search space's default schedules)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = CLOCKS[args.clock]
    parts = args.parts.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    forms = tuple(args.int8_forms.split(","))
    target = Target.native()
    figures = {"cpu": target.cpu, "clock": args.clock}
    if "peak" in parts:
        figures["peak"] = bench_peak(target, args.repeat)
    if "gemm" in parts:
        figures["gemm"] = {}
        for weights in args.gemm_weights.split(","):
            figures["gemm"].update(bench_gemm(threads, args.db, args.repeat, weights=weights,
                                              forms=forms))
    if "models" in parts:
        figures["models"] = bench_models(args.models.split(","), threads, args.db,
                                         args.repeat, args.samples, forms, args.profile,
                                         args.vs_default and args.db is not None)
    emit_json(figures)


if __name__ == "__main__":
    main()

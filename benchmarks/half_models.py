"""float16 models: Kiln against onnxruntime on the same float16 model, and against itself in
float32.

    python benchmarks/half_models.py [--onnx PATH ...] [--threads 1] [--rounds 5] [--repeat 10]

Each float32 model (default: the bundled ResNet-18-shaped CNN at 224x224) is converted to
float16 here (`to_float16`: initializers, Constant tensors, Cast targets and the graph's
float inputs/outputs; the ops compute in float16 as ONNX defines them). For each model: Kiln's
cold compile time of the float16 model (an empty KILN_CACHE_DIR), the largest difference
from onnxruntime's float16 output relative to its largest magnitude, whether the top-1 class
agrees, and latency as ratios measured in one process, interleaved round by round (CPU time
of the calling thread at 1 thread, wall time otherwise): Kiln float16 / onnxruntime float16
and Kiln float16 / Kiln float32. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, interleaved_medians, kiln_threads, ort_session, print_table  # noqa: E402,I001


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every float32 tensor it stores or declares as float16."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for k, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[k].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float16), t.name))
    for node in g.node:
        for a in node.attribute:
            if node.op_type == "Constant" and a.name == "value" and \
                    a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    del g.value_info[:]
    return m


def _default_model() -> tuple[str, onnx.ModelProto]:
    from kiln.graph.models import resnet18_like
    return "resnet18_like", resnet18_like(image_size=224)


def _input(model: onnx.ModelProto, dtype) -> np.ndarray:
    dims = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(0).standard_normal(dims).astype(dtype)


def measure(name: str, model32: onnx.ModelProto, threads: int, rounds: int,
            repeat: int) -> dict:
    import kiln
    model16 = to_float16(model32)
    x16, x32 = _input(model16, np.float16), _input(model32, np.float32)
    with tempfile.TemporaryDirectory() as cache, kiln_threads(threads):
        os.environ["KILN_CACHE_DIR"] = cache
        start = time.perf_counter()
        k16 = kiln.compile(model16, db=None)
        compile_s = time.perf_counter() - start
        k32 = kiln.compile(model32, db=None)
        ort16 = ort_session(model16, threads)
        feed = {model16.graph.input[0].name: x16}
        want = ort16.run(None, feed)[0].astype(np.float32)
        got = k16.run([x16])[0].astype(np.float32)
        scale = float(np.abs(want).max()) or 1.0
        clock = time.thread_time if threads == 1 else time.perf_counter
        _, _, vs_ort = interleaved_medians(lambda: k16.run([x16]), lambda: ort16.run(None, feed),
                                           rounds, repeat, clock=clock)
        t16, t32, vs_fp32 = interleaved_medians(lambda: k16.run([x16]),
                                                lambda: k32.run([x32]), rounds, repeat,
                                                clock=clock)
    return {"model": name, "compile_s": compile_s, "rel_err": float(np.abs(got - want).max())
            / scale, "top1_same": bool(got.argmax() == want.argmax()),
            "kiln16_ms": t16 * 1e3, "kiln32_ms": t32 * 1e3, "kiln16_vs_ort16": vs_ort,
            "kiln16_vs_kiln32": vs_fp32}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", action="append", default=[], help="a float32 ONNX model "
                    "(repeatable; default: the bundled ResNet-18-shaped CNN)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(argv)
    models = [(Path(p).stem, onnx.load(p)) for p in args.onnx] or [_default_model()]
    rows = [measure(name, m, args.threads, args.rounds, args.repeat) for name, m in models]
    print_table(["model", "compile s (fp16, cold)", "rel err vs ort fp16", "top-1 same",
                 "kiln fp16 ms", "kiln fp32 ms", "kiln fp16 / ort fp16",
                 "kiln fp16 / kiln fp32"],
                [[r["model"], r["compile_s"], f"{r['rel_err']:.1e}", r["top1_same"],
                  r["kiln16_ms"], r["kiln32_ms"], r["kiln16_vs_ort16"], r["kiln16_vs_kiln32"]]
                 for r in rows])
    emit_json({"bench": "half_models", "threads": args.threads, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

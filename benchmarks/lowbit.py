"""Low-bit element types (graph/ops/lowbit.py): Kiln's compiled conversions against onnxruntime and
ml_dtypes (numpy), one thread.

    python -m benchmarks.lowbit [--n 1048576]

Models over N float32 elements: Cast float32 -> float8 E4M3FN (saturating) -> float32 (two
kernels fused into one); QuantizeLinear/DequantizeLinear through int4 with block_size 32 on a
runtime input; DequantizeLinear of a float8 input. The "numpy" column is ml_dtypes' astype
(the conversions only). Kiln's time includes the model boundary (the copies of inputs and
outputs). The machine is shared: the ratios are per-round medians (interleaved_medians).
"""
from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import kiln

from .common import emit_json, interleaved_medians, kiln_threads, ort_session, print_table


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "lowbit",
                          [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
                          [helper.make_tensor_value_info(n, e, s) for n, e, s in outputs],
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def cases(n: int):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    cast = _model([helper.make_node("Cast", ["x"], ["q"], to=T.FLOAT8E4M3FN),
                   helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT)],
                  [("x", T.FLOAT, [n])], [("y", T.FLOAT, [n])])
    yield "cast f32->e4m3fn->f32", cast, {"x": x}, lambda: np.clip(x, -448, 448).astype(
        ml_dtypes.float8_e4m3fn).astype(np.float32)           # saturate=1: clip, then round
    rows = n // 256
    xb = x[:rows * 256].reshape(rows, 256)
    scale = rng.uniform(0.5, 2, (rows, 8)).astype(np.float32)
    qdq = _model([helper.make_node("QuantizeLinear", ["x", "s"], ["q"], axis=1, block_size=32,
                                   output_dtype=T.INT4),
                  helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1,
                                   block_size=32)],
                 [("x", T.FLOAT, [rows, 256])], [("y", T.FLOAT, [rows, 256])], [("s", scale)])
    full = np.repeat(scale, 32, axis=1)
    yield "int4 blocked QDQ", qdq, {"x": xb}, lambda: (np.clip(np.rint(
        xb / full), -8, 7).astype(ml_dtypes.int4).astype(np.float32) * full)
    codes = x.astype(ml_dtypes.float8_e5m2)
    dq = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"])],
                [("x", T.FLOAT8E5M2, [n])], [("y", T.FLOAT, [n])],
                [("s", np.array(0.5, np.float32))])
    yield "dequantize e5m2", dq, {"x": codes}, lambda: codes.astype(np.float32) * 0.5


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    rows, figures = [], {}
    for name, model, feeds, numpy_fn in cases(args.n):
        with kiln_threads(1):
            compiled = kiln.compile(model, db=None, jobs=1, threads=1)
        want = numpy_fn()
        got = compiled.run(feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        try:
            sess = ort_session(model, 1)
            ort_fn = (lambda s=sess: s.run(None, feeds))
            ort_fn()
        except Exception as exc:  # noqa: BLE001 - onnxruntime lacks some of these kernels
            ort_fn, ort_note = None, type(exc).__name__
        k, npy, r_np = interleaved_medians(lambda: compiled.run(feeds), numpy_fn, rounds=3)
        r_ort = None
        if ort_fn is not None:
            _, o, r_ort = interleaved_medians(lambda: compiled.run(feeds), ort_fn, rounds=3)
        rows.append([name, k * 1e3, npy * 1e3, r_np,
                     "n/a (" + ort_note + ")" if ort_fn is None else r_ort])
        figures[name] = {"kiln_ms": k * 1e3, "numpy_ms": npy * 1e3, "kiln_over_numpy": r_np,
                         "kiln_over_ort": r_ort}
    print_table(["case", "kiln ms", "numpy ms", "kiln/numpy", "kiln/ort"], rows)
    emit_json(figures)


if __name__ == "__main__":
    main()

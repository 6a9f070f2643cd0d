"""conv2d 3x3, 56x56, 64->64, batch 1, stride 1, pad 1: hand-written schedule vs numpy im2col
+ matmul and onnxruntime's Conv (when installed).

Schedule: weights packed so output channels are contiguous (blocks of two vector widths); the
padded input is computed per output row; an accumulator tile of XT output pixels x one channel
block is computed at the output tile with the reduction (c, ry, rx) outside the tile, tile
pixels unrolled and channels vectorized; output rows run in parallel, each computing its padded input rows once.

    python benchmarks/conv2d.py [--repeat 7]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, median_seconds, numpy_threads, print_table  # noqa

import kiln  # noqa: E402
from kiln import te  # noqa: E402


def conv_schedule(n, c, h, w, k, r, pad, target, x_tile=None):
    lanes = target.vector_lanes("float32")
    # accumulators: x_tile pixels x 2 vectors; 8 fit AVX2's 16 registers, 14 fit AVX-512's 32
    x_tile = x_tile or (7 if lanes >= 16 else 4)
    kb = 2 * lanes if k % (2 * lanes) == 0 else lanes
    oh, ow = h + 2 * pad - r + 1, w + 2 * pad - r + 1
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((k, c, r, r), name="W")
    P = te.compute((n, c, h + 2 * pad, w + 2 * pad), lambda b, ch, y, x: te.select(
        te.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad),
        X[b, ch, te.maximum(te.minimum(y - pad, h - 1), 0), te.maximum(te.minimum(x - pad, w - 1), 0)],
        0.0), name="pad")
    Wp = te.compute((k // kb, c, r, r, kb), lambda ko, ch, ry, rx, ki: W[ko * kb + ki, ch, ry, rx],
                    name="Wpacked")
    rc, ry, rx = te.reduce_axis((0, c), "rc"), te.reduce_axis((0, r), "ry"), \
        te.reduce_axis((0, r), "rx")
    Oc = te.compute((n, k // kb, oh, ow, kb), lambda b, ko, y, x, ki: te.sum(
        P[b, rc, y + ry, x + rx] * Wp[ko, rc, ry, rx, ki], axis=[rc, ry, rx]), name="conv")
    O = te.compute((n, k, oh, ow), lambda b, ch, y, x: Oc[b, ch // kb, y, x, ch % kb], name="O")

    s = kiln.create_schedule(O)
    b, ch, y, x = O.op.axis
    cho, chi = s[O].split(ch, factor=kb)
    xo, xi = s[O].split(x, factor=x_tile)
    s[O].reorder(b, y, cho, xo, chi, xi)
    row = s[O].fuse(b, y)
    s[O].parallel(row)
    s[Oc].compute_at(s[O], xo)
    cb, cko, cy, cx, cki = s[Oc].op.axis
    s[Oc].reorder(cb, cko, cy, rc, ry, rx, cx, cki)
    s[Oc].unroll(cx)
    s[Oc].unroll(rx)
    s[Oc].vectorize(cki)
    s[P].compute_at(s[O], row)
    s[Wp].vectorize(Wp.op.axis[4])
    return s, [X, W, O]


def im2col_conv(x, wt, pad):
    n, c, h, w = x.shape
    k, _, r, _ = wt.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - r + 1, w + 2 * pad - r + 1
    cols = np.lib.stride_tricks.sliding_window_view(xp, (r, r), axis=(2, 3))  # n c oh ow r r
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * r * r)
    out = cols @ wt.reshape(k, -1).T
    return out.reshape(n, oh, ow, k).transpose(0, 3, 1, 2)


def onnxruntime_conv(x, wt, pad):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4)
    graph = helper.make_graph([node], "conv", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(wt, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model


def run(repeat: int) -> dict:
    target = kiln.Target.from_string("native")
    n, c, h, w, k, r, pad = 1, 64, 56, 56, 64, 3, 1
    flops = 2.0 * n * k * c * r * r * h * w
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, r, r)).astype(np.float32)
    out = np.empty((n, k, h, w), np.float32)
    expected = im2col_conv(x, wt, pad)
    model = onnxruntime_conv(x, wt, pad)
    figures, table = {"bench": "conv2d_3x3_56_64", "cpu": target.cpu}, []
    for threads in (1, 2):
        with kiln_threads(threads):
            kernel = kiln.build(*conv_schedule(n, c, h, w, k, r, pad, target), target=target,
                                name="conv2d")
        kernel(x, wt, out)
        np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)
        t_kiln = median_seconds(lambda: kernel(x, wt, out), repeat=repeat)
        with numpy_threads(threads):
            t_numpy = median_seconds(lambda: im2col_conv(x, wt, pad), repeat=repeat)
        row = [threads, flops / t_kiln / 1e9, flops / t_numpy / 1e9, t_numpy / t_kiln]
        figures[f"kiln_gflops_{threads}t"] = round(flops / t_kiln / 1e9, 2)
        figures[f"ratio_numpy_{threads}t"] = round(t_numpy / t_kiln, 3)
        if model is not None:
            import onnxruntime as ort
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            sess = ort.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
            t_ort = median_seconds(lambda: sess.run(None, {"x": x}), repeat=repeat)
            row += [flops / t_ort / 1e9, t_ort / t_kiln]
            figures[f"ort_gflops_{threads}t"] = round(flops / t_ort / 1e9, 2)
            figures[f"ratio_ort_{threads}t"] = round(t_ort / t_kiln, 3)
        table.append(row)
    print(f"conv2d 3x3 56x56 64->64 on {target.cpu} (median of {repeat}; ratios > 1: Kiln faster)")
    headers = ["threads", "kiln GFLOPS", "im2col GFLOPS", "kiln vs im2col"]
    if model is not None:
        headers += ["ort GFLOPS", "kiln vs ort"]
    print_table(headers, table)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    emit_json(run(parser.parse_args().repeat))


if __name__ == "__main__":
    main()

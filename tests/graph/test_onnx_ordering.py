"""CumProd, TopK, Compress, Col2Im, MaxUnpool, MaxPool's Indices, Det, Upsample, Pad 'wrap'
(te/ops/ordering.py, graph/onnx/ordering.py) and MelWeightMatrix: Kiln-compiled code and
the numpy reference against onnxruntime on one-node models with awkward shapes (1, primes),
ties, negative axes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference
from kiln.te.errors import UnsupportedOperatorError

from .graph_helpers import one_node_model, ort_run

R = np.random.default_rng(5)


def model(op, feeds, inits=None, **kw):
    return one_node_model(op, feeds, inits, strict=False, **kw), feeds


def check(m, feeds, rtol=1e-5, atol=1e-6):
    """Kiln's compiled model and the numpy reference both agree with onnxruntime."""
    want = ort_run(m, feeds)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)
    ref = list(run_reference(load_onnx(m, values=feeds), feeds).values())
    assert len(got) == len(want)
    for g, r, w in zip(got, ref, want):
        for ours in (g, r):
            assert ours.shape == w.shape and ours.dtype == w.dtype, (ours.shape, w.shape)
            np.testing.assert_allclose(ours, w, rtol=rtol, atol=atol)


def f32(*shape):
    return R.uniform(-1.5, 1.5, size=shape).astype(np.float32)


TIES = np.array([[3, 1, 3, 2, 1, 3, 0], [5, 5, 5, 5, 5, 5, 5], [0, 2, 2, 1, 2, 9, 2]],
                np.float32)

CASES = {
    "cumprod-exclusive-reverse": model("CumProd", {"x": f32(3, 5, 2)},
                                       {"axis": np.array(-2, np.int64)}, opset=26,
                                       exclusive=1, reverse=1),
    "cumprod-int32": model("CumProd", {"x": R.integers(-3, 4, (1, 7)).astype(np.int32)},
                           {"axis": np.array(1, np.int32)}, opset=26),
    "topk-ties-largest": model("TopK", {"x": TIES}, {"k": np.array([4], np.int64)},
                               n_out=2, opset=11),
    "topk-ties-smallest-axis0": model("TopK", {"x": TIES.T.copy()},
                                      {"k": np.array([3], np.int64)}, n_out=2, opset=11,
                                      axis=-2, largest=0),
    "topk-int64": model("TopK", {"x": R.integers(0, 4, (2, 11)).astype(np.int64)},
                        {"k": np.array([11], np.int64)}, n_out=2, opset=11),
    "compress-axis": model("Compress", {"x": f32(3, 5)},
                           {"c": np.array([1, 0, 1, 1], bool)}, axis=-1),
    "compress-flat": model("Compress", {"x": f32(2, 3)},
                           {"c": np.array([0, 1, 0, 0, 1], bool)}),
    "col2im": model("Col2Im", {"x": f32(2, 3 * 6, 12)},
                    {"image": np.array([5, 7], np.int64), "block": np.array([2, 3], np.int64)},
                    strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 1]),
    "det": model("Det", {"x": f32(2, 3, 3, 3)}),
    "det-1x1": model("Det", {"x": f32(5, 1, 1)}),
    "maxpool-indices": model("MaxPool", {"x": f32(2, 3, 7, 5)}, n_out=2, kernel_shape=[3, 2],
                             strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2]),
    "maxpool-indices-column-major": model("MaxPool", {"x": f32(1, 2, 5, 6)}, n_out=2,
                                          kernel_shape=[2, 2], storage_order=1),
    "wrap-pad": model("Pad", {"x": f32(3, 2, 5)},
                      {"pads": np.array([1, 0, 7, 0, 2, -1], np.int64)}, mode="wrap",
                      opset=19),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_onnxruntime(case):
    check(*CASES[case])


def test_max_unpool_puts_values_back_at_maxpool_indices():
    x = f32(2, 3, 4, 6)
    pool, _ = model("MaxPool", {"x": x}, n_out=2, kernel_shape=[2, 2], strides=[2, 2])
    pooled, idx = ort_run(pool, {"x": x})
    check(*model("MaxUnpool", {"p": pooled, "i": idx}, kernel_shape=[2, 2], strides=[2, 2]))
    # a larger output_shape: the indices address the inferred 4x6, zeros follow (onnx's
    # reference; onnxruntime reads them in the given shape instead)
    m, feeds = model("MaxUnpool", {"p": pooled, "i": idx},
                     {"shape": np.array([2, 3, 5, 7], np.int64)}, kernel_shape=[2, 2],
                     strides=[2, 2])
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y0", TensorProto.FLOAT,
                                                             [2, 3, 5, 7]))
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    want = np.zeros(x.size, np.float32)
    want[idx.reshape(-1)] = pooled.reshape(-1)
    np.testing.assert_array_equal(got, np.pad(want.reshape(x.shape), [(0, 0)] * 2 + [(0, 1)] * 2))


def test_upsample_nearest_matches_numpy():
    x = f32(1, 2, 3, 5)
    m, feeds = model("Upsample", {"x": x}, {"scales": np.array([1, 1, 2, 3], np.float32)},
                     opset=9)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(3, axis=3))


def test_det_of_large_matrices_is_refused_by_name():
    m, _ = model("Det", {"x": f32(6, 6)})
    with pytest.raises(UnsupportedOperatorError, match=r"Det_0.*6x6"):
        load_onnx(m)


def test_mel_weight_matrix_with_run_time_rates_and_edges():
    feeds = {"mels": np.array(5, np.int64), "dft": np.array(31, np.int64),
             "rate": np.array(16000, np.int64), "low": np.array(20.0, np.float32),
             "high": np.array(7000.0, np.float32)}
    m, _ = model("MelWeightMatrix", feeds, opset=17)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y0", TensorProto.FLOAT, [16, 5]))
    check(m, feeds)

"""RNN, GRU and LSTM unrolled into graph ops (graph/onnx/recurrent.py): Kiln-compiled code
against onnxruntime, with run-time sequence_lens shorter than the sequence, both directions,
initial states, peepholes, clip and non-default activations (layout=1, which onnxruntime
lacks, is covered by onnx's node tests)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln

from .graph_helpers import ort_run

R = np.random.default_rng(3)
ELEM = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32}


def f32(*shape):
    return R.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def recurrent_model(op, feeds, out_shapes, **attrs):
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    node = helper.make_node(op, [n if n in feeds else "" for n in names[:max(
        names.index(n) for n in feeds) + 1]], list(out_shapes), name=f"{op}_0", **attrs)
    ins = [helper.make_tensor_value_info(n, ELEM[a.dtype.name], list(a.shape))
           for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
            for n, s in out_shapes.items()]
    g = helper.make_graph([node], "t", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def check(m, feeds):
    want = ort_run(m, feeds)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_lstm_reverse_short_sequences_peepholes_initial_states():
    t, b, i, h = 3, 3, 2, 7
    feeds = {"X": f32(t, b, i), "W": f32(1, 4 * h, i), "R": f32(1, 4 * h, h),
             "B": f32(1, 8 * h), "sequence_lens": np.array([3, 1, 2], np.int32),
             "initial_h": f32(1, b, h), "initial_c": f32(1, b, h), "P": f32(1, 3 * h)}
    m = recurrent_model("LSTM", feeds, {"Y": (t, 1, b, h), "Y_h": (1, b, h),
                                        "Y_c": (1, b, h)},
                        hidden_size=h, direction="reverse")
    check(m, feeds)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_bidirectional_clip_short_sequences(linear_before_reset):
    t, b, i, h = 3, 2, 3, 5
    feeds = {"X": f32(t, b, i), "W": f32(2, 3 * h, i), "R": f32(2, 3 * h, h),
             "B": f32(2, 6 * h), "sequence_lens": np.array([1, 3], np.int32),
             "initial_h": f32(2, b, h)}
    m = recurrent_model("GRU", feeds, {"Y": (t, 2, b, h), "Y_h": (2, b, h)}, hidden_size=h,
                        direction="bidirectional", clip=0.7,
                        linear_before_reset=linear_before_reset)
    check(m, feeds)


def test_rnn_with_parameterised_activations():
    t, b, i, h = 3, 1, 2, 3
    feeds = {"X": f32(t, b, i), "W": f32(2, h, i), "R": f32(2, h, h)}
    m = recurrent_model("RNN", feeds, {"Y": (t, 2, b, h), "Y_h": (2, b, h)}, hidden_size=h,
                        direction="bidirectional", activations=["LeakyRelu", "ScaledTanh"],
                        activation_alpha=[0.3, 1.5], activation_beta=[0.8])
    check(m, feeds)

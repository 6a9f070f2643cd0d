"""Quantized elementwise chains as byte tables (graph/passes/int8/tables.py): a Sigmoid,
SiLU (through an inner Q -> DQ, as onnxruntime's quantizer writes EfficientNet's, or in
float), HardSwish, HardSigmoid, Tanh or a GELU of erf between a DQ and a Q, uint8 and int8
(also mixed in/out), zero points across the range, awkward shapes (primes, 1). Every one of
the 256 input bytes is fed; Kiln's compiled model must equal the table the pass built, be at
most one step from onnxruntime int8, and be at least as close as onnxruntime to the QDQ spec
evaluated in float64. Chains that are not a function of one byte keep the float path."""
from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes.int8.tables import to_lookup_tables
from kiln.graph.passes.int8.quantize import fuse_quantized_kernels

from .graph_helpers import make_model

_ERF = np.vectorize(math.erf)
# the float function of each chain, in float64: (x) -> y, or with the inner Q (s_mid, z_mid)
_F64 = {
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "hardswish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "hardsigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),
    "tanh": np.tanh,
    "silu_float": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + _ERF(x / np.sqrt(2))),
}


def _chain_nodes(kind: str):
    """ONNX nodes from xd (float) to yf (float, quantized after)."""
    n = helper.make_node
    if kind == "sigmoid":
        return [n("Sigmoid", ["xd"], ["yf"])]
    if kind == "hardswish":
        return [n("HardSwish", ["xd"], ["yf"])]
    if kind == "hardsigmoid":
        return [n("HardSigmoid", ["xd"], ["yf"], alpha=0.2, beta=0.5)]
    if kind == "tanh":
        return [n("Tanh", ["xd"], ["yf"])]
    if kind == "silu_float":
        return [n("Sigmoid", ["xd"], ["sg"]), n("Mul", ["xd", "sg"], ["yf"])]
    if kind == "gelu":
        return [n("Div", ["xd", "sqrt2"], ["h"]), n("Erf", ["h"], ["e"]),
                n("Add", ["e", "one"], ["e1"]), n("Mul", ["xd", "e1"], ["m"]),
                n("Mul", ["m", "half"], ["yf"])]
    if kind == "silu":      # EfficientNet's: sigmoid -> Q -> DQ, then Mul(x, s)
        return [n("Sigmoid", ["xd"], ["sg"]),
                n("QuantizeLinear", ["sg", "s_mid", "z_mid"], ["sq"]),
                n("DequantizeLinear", ["sq", "s_mid", "z_mid"], ["sd"]),
                n("Mul", ["xd", "sd"], ["yf"])]
    raise ValueError(kind)


def _model(kind, in_dtype, out_dtype, s_in, z_in, s_out, z_out, shape):
    inits = {"s_in": np.float32(s_in), "z_in": np.array(z_in, in_dtype),
             "s_out": np.float32(s_out), "z_out": np.array(z_out, out_dtype),
             "s_mid": np.float32(1 / 255), "z_mid": np.array(0, "uint8"),
             "sqrt2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = ([helper.make_node("DequantizeLinear", ["x", "s_in", "z_in"], ["xd"])]
             + _chain_nodes(kind)
             + [helper.make_node("QuantizeLinear", ["yf", "s_out", "z_out"], ["y"])])
    used = {i for nd in nodes for i in nd.input}
    return make_model(nodes, {"x": (shape, in_dtype)}, [("y", out_dtype)],
                      {k: v for k, v in inits.items() if k in used}, opset=19)


def _every_byte(shape, dtype, seed=0):
    n = int(np.prod(shape))
    order = np.random.default_rng(seed).permutation(256).astype(np.uint8)
    return np.resize(order, n).view(dtype).reshape(shape)


def _spec64(kind, x, in_dtype, out_dtype, s_in, z_in, s_out, z_out):
    """The QDQ chain with every float op in float64 (rounding half to even at each Q)."""
    def q(v, s, z, dtype):
        info = np.iinfo(dtype)
        return np.clip(np.round(v / np.float64(np.float32(s))) + z, info.min, info.max)
    v = (x.astype(np.float64) - z_in) * np.float64(np.float32(s_in))
    if kind == "silu":
        sd = q(_F64["sigmoid"](v), 1 / 255, 0, "uint8") * np.float64(np.float32(1 / 255))
        y = v * sd
    else:
        y = _F64[kind](v)
    return q(y, s_out, z_out, out_dtype).astype(np.int64)


def _ort(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _check(kind, in_dtype, out_dtype, s_in, z_in, s_out, z_out, shape, compile_=True):
    model = _model(kind, in_dtype, out_dtype, s_in, z_in, s_out, z_out, shape)
    graph = to_lookup_tables(fuse_quantized_kernels(load_onnx(model)))
    assert [n.op for n in graph.nodes] == ["lookup_table"], [n.op for n in graph.nodes]
    table = np.asarray(graph.nodes[0].attrs["table"], np.int64)
    x = _every_byte(shape, in_dtype)
    spec = _spec64(kind, x, in_dtype, out_dtype, s_in, z_in, s_out, z_out)
    theirs = _ort(model, {"x": x}).astype(np.int64)
    ours = table[x.view(np.uint8)]
    if compile_:
        got = kiln.compile(model, db=None, jobs=1).run({"x": x})[0]
        assert got.dtype == np.dtype(out_dtype)
        np.testing.assert_array_equal(got.astype(np.int64), ours)
    assert np.abs(ours - theirs).max() <= 1, (kind, np.abs(ours - theirs).max())
    # at least as close to the spec as onnxruntime, entry by entry of the 256
    first = np.unique(x.view(np.uint8).reshape(-1), return_index=True)[1]
    o, t, s = ours.reshape(-1)[first], theirs.reshape(-1)[first], spec.reshape(-1)[first]
    assert np.count_nonzero(o != s) <= np.count_nonzero(t != s), (
        kind, np.flatnonzero(o != s), np.flatnonzero(t != s))
    return ours, theirs


@pytest.mark.parametrize("kind", ["sigmoid", "silu", "hardswish", "hardsigmoid", "tanh",
                                  "silu_float", "gelu"])
@pytest.mark.parametrize("in_dtype,out_dtype,shape", [
    ("uint8", "uint8", (1, 7, 5, 8)), ("int8", "int8", (2, 17, 3, 3)),
    ("uint8", "int8", (1, 1, 1, 257)), ("int8", "uint8", (1, 19, 1, 14))])
def test_a_chain_between_dq_and_q_is_one_table(kind, in_dtype, out_dtype, shape):
    info_in, info_out = np.iinfo(in_dtype), np.iinfo(out_dtype)
    z_in = int(info_in.min) + 101
    z_out = int(info_out.min) + (3 if kind in ("sigmoid", "hardsigmoid", "silu") else 77)
    s_out = 1 / 255 if kind in ("sigmoid", "hardsigmoid") else 0.0417
    _check(kind, in_dtype, out_dtype, 0.0523, z_in, s_out, z_out, shape)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["sigmoid", "silu", "hardswish", "tanh"]),
       in_dtype=st.sampled_from(["uint8", "int8"]), out_dtype=st.sampled_from(["uint8", "int8"]),
       s_in=st.floats(0.001, 0.5), s_out=st.floats(0.001, 0.5),
       z_in=st.integers(0, 255), z_out=st.integers(0, 255))
def test_tables_against_onnxruntime_and_the_spec(kind, in_dtype, out_dtype, s_in, s_out,
                                                 z_in, z_out):
    z_in += int(np.iinfo(in_dtype).min)
    z_out += int(np.iinfo(out_dtype).min)
    _check(kind, in_dtype, out_dtype, s_in, z_in, s_out, z_out, (1, 256), compile_=False)


def test_chains_that_are_not_one_byte_keep_the_float_path():
    n = helper.make_node
    inits = {"s": np.float32(0.05), "z": np.array(128, "uint8"),
             "per_channel": np.linspace(0.5, 2, 3, dtype=np.float32).reshape(1, 3, 1, 1)}
    q = [n("QuantizeLinear", ["yf", "s", "z"], ["y"])]
    cases = {
        # a per-channel constant: one table per channel, not taken
        "per-channel": [n("DequantizeLinear", ["x", "s", "z"], ["xd"]),
                        n("Mul", ["xd", "per_channel"], ["yf"])],
        # two runtime inputs
        "two inputs": [n("DequantizeLinear", ["x", "s", "z"], ["xd"]),
                       n("DequantizeLinear", ["x2", "s", "z"], ["x2d"]),
                       n("Mul", ["xd", "x2d"], ["m"]), n("Sigmoid", ["m"], ["yf"])],
        # a float input
        "float input": [n("DequantizeLinear", ["x", "s", "z"], ["xd"]),
                        n("Add", ["xd", "f"], ["yf"])],
    }
    for name, nodes in cases.items():
        ins = {"x": ((1, 3, 2, 2), "uint8"), "x2": ((1, 3, 2, 2), "uint8"),
               "f": ((1, 3, 2, 2), "float32")}
        used = {i for nd in nodes for i in nd.input}
        model = make_model(nodes + q, {k: v for k, v in ins.items() if k in used},
                           [("y", "uint8")], inits, opset=19)
        graph = to_lookup_tables(fuse_quantized_kernels(load_onnx(model)))
        assert "lookup_table" not in [nd.op for nd in graph.nodes], name


def test_an_inner_value_read_outside_keeps_its_chain():
    """The sigmoid's float output is also a graph output: only a table for a chain whose
    inner values nobody else reads."""
    n = helper.make_node
    inits = {"s": np.float32(0.05), "z": np.array(128, "uint8")}
    nodes = [n("DequantizeLinear", ["x", "s", "z"], ["xd"]), n("Sigmoid", ["xd"], ["sg"]),
             n("Mul", ["xd", "sg"], ["yf"]), n("QuantizeLinear", ["yf", "s", "z"], ["y"])]
    model = make_model(nodes, {"x": ((1, 5), "uint8")}, [("y", "uint8"), "sg"], inits,
                       opset=19)
    graph = to_lookup_tables(fuse_quantized_kernels(load_onnx(model)))
    assert "lookup_table" not in [nd.op for nd in graph.nodes]
    x = _every_byte((1, 5), "uint8")
    got = kiln.compile(model, db=None, jobs=1).run({"x": x})
    np.testing.assert_array_equal(got[0], _ort(model, {"x": x}))

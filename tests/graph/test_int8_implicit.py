"""Saturation-safe int8 convs read from padded NHWC words (graph/passes/int8/implicit.py,
te/ops/int8/perm_conv.py): on AVX2 without VNNI, an im2col + matmul_int8x4_perm with C4
a multiple of 4 becomes [pad ->] conv_int8x4_perm. The kernel equals numpy's integer conv
(batch 2, prime spatial sizes, strides, dilations, uneven windows, 8- and
16-column panels); the compiled models equal, bit for bit, the reference of the graph
without the pass: uint8 and int8 activations, zero points other than 0 in the padding,
per-channel scales, a residual. Narrow channels, a column tail, VNNI and no target keep
the im2col."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import codegen
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.implicit import to_implicit_int8_convs
from kiln.graph.reference import run_reference
from kiln.schedule.lower import lower
from kiln.te.errors import TEError
from kiln.te.ops.int8.perm import pair_weight_groups
from kiln.te.ops.int8.perm_conv import conv_int8x4_perm
from kiln.te.tensor import placeholder

from .test_int8_perm import AVX2, _gaussian, _ops, _with_weight
from .test_int8_pointwise import _pointwise_model, pointwise_feeds

R = np.random.default_rng(59)
SKIP = ("implicit int8 convs",)


@pytest.mark.parametrize("nb,h,w,c,f,kernel,stride,dilation,block", [
    (2, 5, 7, 16, 16, (3, 3), (2, 1), (1, 1), 8),     # batch 2, prime sizes
    (1, 7, 6, 32, 24, (3, 2), (1, 1), (2, 1), 8),     # uneven window, dilation
    (1, 3, 3, 16, 32, (1, 1), (2, 2), (1, 1), 16),    # strided 1x1: 2 x 2 pixels, 16-wide panels
])
def test_conv_int8x4_perm_kernel_is_exact(nb, h, w, c, f, kernel, stride, dilation, block):
    kh, kw = kernel
    oh = (h - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (w - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    w8 = _gaussian((kh * kw * c, f))
    sel_np, words_np = pair_weight_groups(w8, block)
    xb = R.integers(0, 256, (nb, h, w, c)).astype(np.uint8)
    xb.flat[0] = 255
    x = placeholder((nb, h, w, c // 4), "int32", "x")
    sel = placeholder(sel_np.shape, "int32", "sel")
    wt = placeholder(words_np.shape, "int32", "w")
    out = conv_int8x4_perm(x, sel, wt, f, kernel, (oh, ow), stride, dilation)
    task = Task("conv", (out,), (x, sel, wt, out), AVX2)
    space = SearchSpace(task)
    sch, args = space.apply(space.default_config())
    fn = codegen.build(lower(sch, args, name="conv"), target=AVX2, cache_kernel=False)
    got = np.empty((nb * oh * ow, f), np.int32)
    fn(xb.view(np.int32), sel_np, words_np, got)
    taps = [xb[:, ry * dilation[0]:ry * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
               rx * dilation[1]:rx * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
            for ry in range(kh) for rx in range(kw)]
    cols = np.stack(taps, axis=3).reshape(nb * oh * ow, kh * kw * c).astype(np.int64)
    np.testing.assert_array_equal(got, cols @ w8.astype(np.int64))


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads,residual", [
    ("uint8", 16, 24, 5, 4, (1, 1), (3, 3), (1, 1, 1, 1), True),   # zero point in the pads
    ("int8", 32, 40, 7, 5, (2, 2), (3, 3), (1, 0, 0, 1), False),   # int8 x, stride, uneven
    ("uint8", 16, 16, 6, 3, (2, 1), (3, 1), (0, 0, 0, 0), False),  # no padding: no pad node
])
def test_model_convs_read_padded_words_exactly(xdtype, c, f, h, w, strides, kernel, pads,
                                               residual):
    model = _pointwise_model(xdtype, c, f, h, w, residual, strides, kernel, pads)
    model = _with_weight(model, "wq", _gaussian((f, c) + kernel))
    graph = load_onnx(model)
    plain = optimize(graph, target=AVX2, skip=SKIP)
    implicit = optimize(graph, target=AVX2)
    ops = _ops(implicit)
    assert "conv_int8x4_perm" in ops and "im2col_nhwc_int8x4" not in ops, ops
    assert ("pad" in ops) == any(pads), ops
    feeds = pointwise_feeds(R, c, f, h, w, residual, strides, kernel, pads)
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(implicit, feeds)["y"], want)
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_narrow_channels_vnni_and_no_target_keep_the_columns():
    narrow = _pointwise_model("uint8", 8, 16, 5, 5, False, (1, 1), (3, 3), (1, 1, 1, 1))
    narrow = _with_weight(narrow, "wq", _gaussian((16, 8, 3, 3)))
    ops = _ops(optimize(load_onnx(narrow), target=AVX2))     # 2 words a pixel: groups straddle
    assert "conv_int8x4_perm" not in ops and "im2col_nhwc_int8x4" in ops, ops
    tail = _pointwise_model("uint8", 16, 13, 5, 5, False, (1, 1), (3, 3), (1, 1, 1, 1))
    tail = _with_weight(tail, "wq", _gaussian((13, 16, 3, 3)))
    ops = _ops(optimize(load_onnx(tail), target=AVX2))      # 13 columns: a panel tail
    assert "conv_int8x4_perm" not in ops and "matmul_int8x4_perm" in ops, ops
    model = _pointwise_model("uint8", 16, 16, 5, 5, False, (1, 1), (3, 3), (1, 1, 1, 1))
    model = _with_weight(model, "wq", _gaussian((16, 16, 3, 3)))
    for target in (None, "llvm -mcpu=znver4"):
        assert "conv_int8x4_perm" not in _ops(optimize(load_onnx(model), target=target))
    graph = optimize(load_onnx(model), target=AVX2, skip=SKIP)
    done = to_implicit_int8_convs(graph, AVX2)
    assert to_implicit_int8_convs(done, AVX2) is done       # nothing left to rewrite


def test_conv_int8x4_perm_rejects_bad_operands():
    sel_np, words_np = pair_weight_groups(_gaussian((9 * 16, 16)), 8)
    sel = placeholder(sel_np.shape, "int32", "sel")
    wt = placeholder(words_np.shape, "int32", "w")
    with pytest.raises(TEError, match=r"conv_int8x4_perm.*C4 a multiple of 4.*'x'\[1, 5, 5, 2\]"):
        conv_int8x4_perm(placeholder((1, 5, 5, 2), "int32", "x"), sel, wt, 16, (3, 3), (3, 3))
    with pytest.raises(TEError, match=r"output 4x3 .* reads past the padded input 'x'"):
        conv_int8x4_perm(placeholder((1, 5, 5, 4), "int32", "x"), sel, wt, 16, (3, 3), (4, 3))

"""int8 convs on VNNI targets as implicit GEMMs with column-panel weights
(graph/passes/int8/vnni_conv.py, te/ops/int8/vnni_conv.py): an im2col + matmul_int8x4,
or a 1x1 conv's matmul_int8x4 over the words, becomes [pad ->] conv_int8x4_panels. The kernel
equals numpy's integer conv on the host (any dot4 lowering: batch 2, prime sizes, strides,
dilations, uneven windows, a zero-padded last panel); the rewritten graphs equal, bit for
bit, the reference of the graph without the pass (uint8 and int8 activations, zero points
other than 0 in the padding, per-channel scales, a residual, 1x1, a 3-channel stem, 24
output channels and widths no panel divides: 58, 19),
and compiled for the host when it has VNNI. AVX2 and no target keep the im2col. Grouped
convs (16-, 8-, 4-channel groups, 34 groups, int8 and uint8) take one grouped
conv_int8x4_panels, exact against the NCHW conv's reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import codegen
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import Target
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.vnni_conv import (grouped_panel_block, grouped_weight_panels,
                                              panel_block, takes_vnni, to_vnni_int8_convs,
                                              weight_panels)
from kiln.graph.reference import run_reference
from kiln.schedule.lower import lower
from kiln.te.errors import TEError
from kiln.te.ops.int8.vnni_conv import conv_int8x4_panels, group_words
from kiln.te.tensor import placeholder

from .test_int8_perm import AVX2, _gaussian, _ops, _with_weight
from .test_int8_pointwise import _pointwise_model, pointwise_feeds

R = np.random.default_rng(67)
VNNI = "llvm -mcpu=znver4"
SKIP = ("implicit int8 convs (VNNI)",)
HOST = Target.from_string("native")
HOST_VNNI = takes_vnni(HOST)


@pytest.mark.parametrize("nb,h,w,c4,f,kernel,stride,dilation,block", [
    (2, 5, 7, 3, 16, (3, 3), (2, 1), (1, 1), 8),      # batch 2, prime sizes, 3 words
    (1, 7, 6, 8, 24, (3, 2), (1, 1), (2, 1), 16),     # uneven window, dilation, padded panel
    (1, 3, 5, 1, 8, (1, 1), (1, 1), (1, 1), 8),       # a 1x1 over one word a pixel
])
def test_conv_int8x4_panels_kernel_is_exact(nb, h, w, c4, f, kernel, stride, dilation, block):
    kh, kw = kernel
    oh = (h - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (w - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    w8 = R.integers(-128, 128, (kh * kw * c4 * 4, f)).astype(np.int8)
    words = np.ascontiguousarray(w8.reshape(-1, 4, f).transpose(0, 2, 1)).view(np.int32)[..., 0]
    panels = weight_panels(words, block)
    xb = R.integers(0, 256, (nb, h, w, 4 * c4)).astype(np.uint8)
    xb.flat[0] = 255
    x = placeholder((nb, h, w, c4), "int32", "x")
    wt = placeholder(panels.shape, "int32", "w")
    out = conv_int8x4_panels(x, wt, f, kernel, (oh, ow), stride, dilation)
    task = Task("conv", (out,), (x, wt, out), HOST)
    space = SearchSpace(task)
    sch, args = space.apply(space.default_config())
    fn = codegen.build(lower(sch, args, name="conv"), target=HOST, cache_kernel=False)
    got = np.empty((nb * oh * ow, f), np.int32)
    fn(xb.view(np.int32), panels, got)
    taps = [xb[:, ry * dilation[0]:ry * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
               rx * dilation[1]:rx * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
            for ry in range(kh) for rx in range(kw)]
    cols = np.stack(taps, axis=3).reshape(nb * oh * ow, -1).astype(np.int64)
    np.testing.assert_array_equal(got, cols @ w8.astype(np.int64))


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads,residual", [
    ("uint8", 16, 24, 5, 4, (1, 1), (3, 3), (1, 1, 1, 1), True),   # zero point in the pads
    ("int8", 12, 40, 7, 5, (2, 2), (3, 3), (1, 0, 0, 1), False),   # int8 x, stride, uneven
    ("uint8", 8, 16, 6, 3, (2, 1), (3, 1), (0, 0, 0, 0), False),   # no padding: no pad node
    ("uint8", 96, 24, 3, 5, (1, 1), (1, 1), (0, 0, 0, 0), True),   # a 1x1, 8-wide panels
    ("int8", 20, 48, 4, 3, (2, 2), (1, 1), (0, 0, 0, 0), False),   # a strided 1x1
    ("uint8", 3, 16, 9, 11, (2, 2), (3, 3), (1, 0, 1, 1), False),  # a 3x3 stem: C4 = 1
    ("uint8", 58, 58, 5, 3, (1, 1), (1, 1), (0, 0, 0, 0), True),   # 58: padded 8-wide panel
    ("int8", 13, 19, 5, 7, (1, 2), (3, 3), (1, 1, 0, 1), False),   # 19: 3 of 24 padding
])
def test_model_convs_take_panels_exactly(xdtype, c, f, h, w, strides, kernel, pads, residual):
    model = _pointwise_model(xdtype, c, f, h, w, residual, strides, kernel, pads)
    model = _with_weight(model, "wq", _gaussian((f, c) + kernel))
    graph = load_onnx(model)
    plain = optimize(graph, target=VNNI, skip=SKIP)
    panels = optimize(graph, target=VNNI)
    ops = _ops(panels)
    assert "conv_int8x4_panels" in ops and "im2col_nhwc_int8x4" not in ops, ops
    assert "matmul_int8x4" not in ops, ops
    assert ("pad" in ops) == any(pads), ops
    feeds = pointwise_feeds(R, c, f, h, w, residual, strides, kernel, pads)
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(panels, feeds)["y"], want)
    if HOST_VNNI:       # compiled for (and run on) a VNNI host
        got = kiln.compile(model, target=HOST, db=None, jobs=1).run(feeds)[0]
        np.testing.assert_array_equal(got, want)


def test_avx2_no_target_and_odd_columns_keep_the_gemm():
    model = _pointwise_model("uint8", 16, 16, 5, 5, False, (1, 1), (3, 3), (1, 1, 1, 1))
    model = _with_weight(model, "wq", _gaussian((16, 16, 3, 3)))
    for target in (None, AVX2, "llvm -mcpu=skylake-avx512"):
        assert "conv_int8x4_panels" not in _ops(optimize(load_onnx(model), target=target))
    odd = _pointwise_model("uint8", 16, 13, 5, 5, False, (1, 1), (3, 3), (1, 1, 1, 1))
    odd = _with_weight(odd, "wq", _gaussian((13, 16, 3, 3)))
    ops = _ops(optimize(load_onnx(odd), target=VNNI))       # 13 columns: no panel width
    assert "conv_int8x4_panels" not in ops and "im2col_nhwc_int8x4" in ops, ops
    graph = optimize(load_onnx(model), target=VNNI, skip=SKIP)
    done = to_vnni_int8_convs(graph, Target.from_string(VNNI))
    assert "conv_int8x4_panels" in _ops(done)
    assert to_vnni_int8_convs(done, Target.from_string(VNNI)) is done   # nothing left to do
    assert to_vnni_int8_convs(graph, Target.from_string(AVX2)) is graph


def test_panel_block_and_weight_panels():
    assert [panel_block(n, 16) for n in (64, 144, 48, 16, 24, 8, 13, 1000, 58, 116, 17)] == \
        [32, 16, 16, 16, 8, 8, None, 8, 8, 8, 8]
    assert panel_block(24, 8) == 8 and panel_block(12, 8) == 4 and panel_block(13, 8) == 4
    words = np.arange(3 * 20, dtype=np.int32).reshape(3, 20)
    p = weight_panels(words, 8)
    assert p.shape == (3, 3, 8) and p.dtype == np.int32
    np.testing.assert_array_equal(p.transpose(1, 0, 2).reshape(3, 24)[:, :20], words)
    assert not p[2, :, 4:].any()
    assert takes_vnni(VNNI) and not takes_vnni(AVX2) and not takes_vnni(None)


def test_a_wide_stem_keeps_its_columns():
    model = _pointwise_model("uint8", 3, 16, 9, 11, False, (2, 2), (7, 7), (3, 3, 3, 3))
    ops = _ops(optimize(load_onnx(model), target=VNNI))
    assert "conv_int8x4_panels" not in ops and "im2col_nhwc_int8x4" in ops, ops


def test_conv_int8x4_panels_rejects_bad_operands():
    wt = placeholder((2, 9 * 4, 16), "int32", "w")
    with pytest.raises(TEError, match=r"conv_int8x4_panels.*w\[P, KH \* KW \* C4, block\]"):
        conv_int8x4_panels(placeholder((1, 5, 5, 3), "int32", "x"), wt, 32, (3, 3), (3, 3))
    with pytest.raises(TEError, match=r"output 4x3 .* does not fit the padded input 'x'"):
        conv_int8x4_panels(placeholder((1, 5, 5, 4), "int32", "x"), wt, 32, (3, 3), (4, 3))
    with pytest.raises(TEError, match=r"weight words 'w' must be int32"):
        conv_int8x4_panels(placeholder((1, 5, 5, 4), "int32", "x"),
                           placeholder((2, 36, 16), "int8", "w"), 32, (3, 3), (3, 3))
    with pytest.raises(TEError, match=r"panels"):
        conv_int8x4_panels(placeholder((1, 5, 5, 4), "int32", "x"), wt, 40, (3, 3), (3, 3))


@pytest.mark.parametrize("xdtype,c,groups,h,w,kernel,strides,pads,residual,block", [
    ("uint8", 32, 2, 5, 7, (3, 3), (1, 1), (1, 1, 1, 1), False, 16),  # 16-channel groups
    ("int8", 16, 4, 7, 5, (3, 3), (2, 2), (1, 0, 1, 1), True, 8),     # 4: two groups a panel
    ("uint8", 24, 3, 3, 3, (1, 1), (1, 1), (0, 0, 0, 0), False, 8),   # 1x1, 8-channel groups
    ("uint8", 48, 2, 4, 3, (3, 3), (1, 1), (1, 1, 1, 1), True, 8),    # 24 a group: 8-panels
    ("int8", 136, 34, 3, 5, (3, 3), (1, 2), (0, 1, 1, 0), False, 8),  # 34 groups, > 16
])
def test_grouped_convs_take_grouped_panels_exactly(xdtype, c, groups, h, w, kernel, strides,
                                                   pads, residual, block):
    """A grouped int8 conv on VNNI: one conv_int8x4_panels(groups=...) over the padded
    words (no im2col, no per-group GEMMs, no concat), bit-identical to the graph reference
    of the NCHW conv2d_integer (uint8 / int8 x, zero points in the pads, per-channel scales,
    a residual); compiled for a VNNI host too."""
    model = _pointwise_model(xdtype, c, c, h, w, residual, strides, kernel, pads, groups)
    graph = load_onnx(model)
    plain = optimize(graph, target=AVX2) if groups <= 16 else optimize(graph)
    assert "conv_int8x4_panels" not in _ops(plain)            # AVX2: per-group GEMMs
    panels = optimize(graph, target=VNNI)
    ops = _ops(panels)
    assert "conv_int8x4_panels" in ops and "conv2d_integer" not in ops, ops
    assert not {"im2col_nhwc_int8x4", "matmul_int8x4", "concat"} & set(ops), ops
    conv = next(n for n in panels.nodes if n.op == "conv_int8x4_panels")
    assert conv.attrs["groups"] == groups and conv.inputs[1].shape[2] == block
    feeds = pointwise_feeds(R, c, c, h, w, residual, strides, kernel, pads)
    want = run_reference(load_onnx(model), feeds)["y"]
    np.testing.assert_array_equal(run_reference(plain, feeds)["y"], want)
    np.testing.assert_array_equal(run_reference(panels, feeds)["y"], want)
    if HOST_VNNI:
        got = kiln.compile(model, target=HOST, db=None, jobs=1).run(feeds)[0]
        np.testing.assert_array_equal(got, want)


def test_grouped_panel_blocks_and_weights():
    assert [grouped_panel_block(fg, 4 * fg, 16) for fg in (64, 16, 24, 8, 4, 2, 3, 12)] == \
        [32, 16, 8, 8, 8, 8, None, None]
    assert grouped_panel_block(4, 100, 16) is None          # 8-wide panels split no 4 x 25
    # 2 groups of 4 columns, 2 taps, 1 word a group: an 8-column panel, block-diagonal
    words = np.arange(1, 2 * 1 * 8 + 1, dtype=np.int32).reshape(2, 1, 8)
    p = grouped_weight_panels(words, 2, 8)
    assert p.shape == (1, 4, 8)
    np.testing.assert_array_equal(p[0].reshape(2, 2, 8)[:, 0, :4], words[:, 0, :4])
    np.testing.assert_array_equal(p[0].reshape(2, 2, 8)[:, 1, 4:], words[:, 0, 4:])
    assert not p[0].reshape(2, 2, 8)[:, 0, 4:].any() and not p[0].reshape(2, 2, 8)[:, 1, :4].any()
    with pytest.raises(TEError, match="neither lie in one group"):
        group_words(12, 12, 4, 8)


def _grouped_case(nb, h, w, groups, cg4, fg, kernel, stride, block, seed):
    """Random bytes of a grouped conv: x [nb, h, w, 4 * groups * cg4] uint8, w8 [F, 4 * cg4,
    KH, KW] int8, the weight panels, and numpy's grouped conv [rows, F] in int64."""
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    f, c = groups * fg, 4 * groups * cg4
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    xb = rng.integers(0, 256, (nb, h, w, c)).astype(np.uint8)
    w8 = rng.integers(-128, 128, (f, 4 * cg4, kh, kw)).astype(np.int8)
    words = np.ascontiguousarray(w8.transpose(2, 3, 0, 1).reshape(kh * kw, f, cg4, 4)).view(
        np.int32)[..., 0].transpose(0, 2, 1)                    # [T, Cg4, F]
    panels = grouped_weight_panels(np.ascontiguousarray(words), groups, block)
    want = np.zeros((nb, oh, ow, f), np.int64)
    for g in range(groups):
        xs = xb[..., g * 4 * cg4:(g + 1) * 4 * cg4].astype(np.int64)
        for ry in range(kh):
            for rx in range(kw):
                tap = xs[:, ry:ry + stride * (oh - 1) + 1:stride,
                         rx:rx + stride * (ow - 1) + 1:stride]
                want[..., g * fg:(g + 1) * fg] += tap @ w8[g * fg:(g + 1) * fg, :, ry, rx].T
    return xb, panels, want.reshape(-1, f), (oh, ow)


@pytest.mark.parametrize("nb,h,w,groups,cg4,fg,kernel,stride,block", [
    (2, 5, 7, 3, 2, 8, (3, 3), 2, 8),        # batch 2, primes, one group a panel
    (1, 6, 5, 6, 1, 4, (3, 1), 1, 8),        # two 4-column groups a panel
    (1, 3, 3, 2, 3, 16, (1, 1), 1, 16),      # 1x1, 3 words a group
])
def test_grouped_conv_int8x4_panels_kernel_is_exact(nb, h, w, groups, cg4, fg, kernel, stride,
                                                    block):
    xb, panels, want, out_hw = _grouped_case(nb, h, w, groups, cg4, fg, kernel, stride, block, 3)
    x = placeholder(xb.shape[:3] + (xb.shape[3] // 4,), "int32", "x")
    wt = placeholder(panels.shape, "int32", "w")
    out = conv_int8x4_panels(x, wt, groups * fg, kernel, out_hw, stride, groups=groups)
    task = Task("conv", (out,), (x, wt, out), HOST)
    space = SearchSpace(task)
    sch, args = space.apply(space.default_config())
    fn = codegen.build(lower(sch, args, name="conv"), target=HOST, cache_kernel=False)
    got = np.empty(want.shape, np.int32)
    fn(np.ascontiguousarray(xb).view(np.int32), panels, got)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(2, 7), cg4=st.integers(1, 3), fg=st.sampled_from([4, 8, 16, 24]),
       kh=st.integers(1, 3), kw=st.integers(1, 3), stride=st.integers(1, 2),
       h=st.integers(3, 6), w=st.integers(3, 6), seed=st.integers(0, 99))
def test_grouped_panels_reference_equals_a_grouped_conv(groups, cg4, fg, kh, kw, stride, h, w,
                                                       seed):
    """The graph op's numpy reference on grouped_weight_panels, against numpy's grouped conv
    (the reference the model tests above compare the compiled kernels with)."""
    from kiln.graph.ir import FrozenDict, Node, Value
    from kiln.graph.ops.int8.vnni_conv import _conv_int8x4_panels_reference
    block = grouped_panel_block(fg, groups * fg, 16)
    if block is None or (groups * fg) % block:
        return
    xb, panels, want, out_hw = _grouped_case(1, h, w, groups, cg4, fg, (kh, kw), stride,
                                             block, seed)
    node = Node("conv_int8x4_panels", (Value("x", (1,), "int32"), Value("w", (1,), "int32")),
                (Value("y", want.shape, "int32"),),
                FrozenDict({"n": groups * fg, "kernel": (kh, kw), "strides": (stride, stride),
                            "dilations": (1, 1), "out_hw": out_hw, "groups": groups}), "conv")
    got = _conv_int8x4_panels_reference(node, np.ascontiguousarray(xb).view(np.int32), panels)
    np.testing.assert_array_equal(got, want)

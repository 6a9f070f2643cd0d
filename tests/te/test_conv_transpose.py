"""conv2d_transpose_nchw (ONNX ConvTranspose) against its definition, the phase geometry,
the compile-time weight layout and the errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops import tags
from kiln.te.ops.conv_transpose import phase_axis


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_transpose_ref(x, w, stride, padding, dilation, output_padding, groups):
    """The definition, one input pixel at a time: x[n, c, iy, ix] * w[c, m, ky, kx] goes to
    output (iy * s_h + ky * d_h - top, ix * s_w + kx * d_w - left) of filter m of c's group."""
    (sh, sw), (dh, dw), (oph, opw) = _pair(stride), _pair(dilation), _pair(output_padding)
    top, left, bottom, right = (padding,) * 4 if isinstance(padding, int) else padding
    n, c, h, wd = x.shape
    _, per_group, kh, kw = w.shape
    oh = sh * (h - 1) + oph + (kh - 1) * dh + 1 - top - bottom
    ow = sw * (wd - 1) + opw + (kw - 1) * dw + 1 - left - right
    out = np.zeros((n, per_group * groups, oh, ow))
    cg = c // groups
    for ch in range(c):
        filters = slice(ch // cg * per_group, (ch // cg + 1) * per_group)
        for iy in range(h):
            for ix in range(wd):
                for ky in range(kh):
                    for kx in range(kw):
                        oy, ox = iy * sh + ky * dh - top, ix * sw + kx * dw - left
                        if 0 <= oy < oh and 0 <= ox < ow:
                            out[:, filters, oy, ox] += np.outer(x[:, ch, iy, ix],
                                                                w[ch, :, ky, kx])
    return out


CASES = [  # x shape, w shape [C, F/groups, KH, KW], stride, padding, dilation, out pad, groups
    ((1, 3, 5, 4), (3, 2, 3, 3), 1, 0, 1, 0, 1),
    ((2, 3, 5, 4), (3, 2, 3, 3), 2, 1, 1, 1, 1),
    ((1, 4, 5, 7), (4, 3, 4, 4), 2, 1, 1, 0, 2),                       # groups
    ((1, 4, 5, 7), (4, 1, 3, 3), (3, 2), (0, 2, 1, 0), 1, (2, 1), 4),  # depthwise, asym pads
    ((1, 6, 5, 5), (6, 3, 2, 3), (3, 2), (0, 1, 1, 0), (2, 1), 0, 3),
    ((1, 3, 5, 4), (3, 2, 3, 2), (2, 3), (2, 0, 1, 3), (2, 3), (1, 2), 1),  # dilation
    ((1, 2, 3, 3), (2, 2, 3, 3), 2, 0, 2, 0, 1),           # every tap on even rows
    ((1, 2, 3, 3), (2, 2, 2, 2), 3, (5, 4, 0, 0), 1, 0, 1),  # pads past the kernel: crop x
    ((1, 2, 1, 1), (2, 1, 1, 1), 1, 0, 1, 0, 1),
    ((1, 7, 11, 13), (7, 5, 5, 3), (3, 2), (2, 1, 1, 2), 1, 1, 1),  # primes
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,out_pad,groups", CASES)
def test_conv2d_transpose(run, rng, x_shape, w_shape, stride, padding, dilation, out_pad,
                          groups):
    X = te.placeholder(x_shape, name="X")
    W = te.placeholder(w_shape, name="W")
    Y = ops.conv2d_transpose_nchw(X, W, stride, padding, dilation, out_pad, groups)
    x = rng.standard_normal(x_shape).astype("float32")
    w = rng.standard_normal(w_shape).astype("float32")
    want = conv_transpose_ref(x, w, stride, padding, dilation, out_pad, groups)
    assert Y.shape == want.shape
    np.testing.assert_allclose(run(Y, {X: x, W: w})[0], want, rtol=1e-4, atol=1e-4)


def _phase_filters(case) -> int:
    (sh, sw), per_group, groups = _pair(case[2]), case[1][1], case[-1]
    return sh * sw * per_group * groups


PACKED = [case + (block,) for case in CASES if case[-1] == 1 for block in (None, 2, 4)
          if block is None or _phase_filters(case) % block == 0]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,out_pad,groups,block",
                         PACKED)
def test_conv2d_transpose_packed(run, rng, x_shape, w_shape, stride, padding, dilation,
                                 out_pad, groups, block):
    x = rng.standard_normal(x_shape).astype("float32")
    w = rng.standard_normal(w_shape).astype("float32")
    packed = ops.pack_conv_transpose_weight(w, stride, dilation, groups, block)
    X = te.placeholder(x_shape, name="X")
    W = te.placeholder(packed.shape, name="W")
    Y = ops.conv2d_transpose_nchw_packed(X, W, w_shape[2:], stride, padding, dilation,
                                         out_pad, groups)
    want = conv_transpose_ref(x, w, stride, padding, dilation, out_pad, groups)
    np.testing.assert_allclose(run(Y, {X: x, W: packed})[0], want, rtol=1e-4, atol=1e-4)


def test_the_stages_are_pad_conv_and_interleave():
    X = te.placeholder((1, 8, 6, 6), name="X")
    Y = ops.conv2d_transpose_nchw_packed(X, te.placeholder((32, 8, 2, 2), name="W"), (4, 4),
                                         2, 1)
    assert Y.op.tag == tags.INJECTIVE and Y.shape == (1, 8, 12, 12)
    conv = Y.op.input_tensors[0]
    assert conv.op.tag == tags.CONV2D_NCHW and conv.shape == (1, 32, 7, 7)
    padded = conv.op.input_tensors[0]
    assert padded.op.tag == tags.PAD and padded.shape == (1, 8, 8, 8)
    # stride 1: the conv is the output, no interleave
    one = ops.conv2d_transpose_nchw_packed(X, te.placeholder((8, 8, 3, 3), name="W1"), (3, 3))
    assert one.op.tag == tags.CONV2D_NCHW and one.shape == (1, 8, 8, 8)


@pytest.mark.parametrize("kernel,stride,dilation,taps,conv_dilation", [
    (4, 2, 1, 2, 1),    # K / s taps per phase: no multiply-add on an inserted zero
    (3, 2, 1, 2, 1),    # one phase has a zero tap
    (3, 1, 2, 3, 2),    # stride 1: the kernel itself, dilated
    (3, 2, 2, 3, 1),    # d == s: every tap in phase 0
    (3, 2, 3, 4, 1),    # phases on different grids: dense taps
    (2, 3, 1, 1, 1),    # kernel shorter than the stride: a phase without taps
])
def test_phase_geometry(kernel, stride, dilation, taps, conv_dilation):
    axis = phase_axis("t", 5, kernel, stride, dilation, 0, 0, 0)
    assert (axis.taps, axis.conv_dilation) == (taps, conv_dilation)
    spots = {axis.tap(k) for k in range(kernel)}
    assert len(spots) == kernel                  # each tap has its own sub-kernel slot
    assert all(0 <= j < taps and 0 <= r < stride for r, j in spots)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 5), st.integers(1, 5),
       st.tuples(st.integers(1, 4), st.integers(1, 4)), st.tuples(st.integers(1, 3),
                                                                    st.integers(1, 3)),
       st.sampled_from([1, 2]), st.sampled_from([None, 2]))
def test_packing_round_trips(c, per_group, kh, kw, stride, dilation, groups, block):
    w = np.arange(c * groups * per_group * kh * kw, dtype=np.float32).reshape(
        c * groups, per_group, kh, kw)
    if block is not None and (groups > 1 or (stride[0] * stride[1] * per_group) % block):
        block = None
    packed = ops.pack_conv_transpose_weight(w, stride, dilation, groups, block)
    # every weight appears once; the other slots are zero taps
    assert np.count_nonzero(packed) == w.size - 1 and packed.sum() == w.sum()
    back = ops.unpack_conv_transpose_weight(packed, (kh, kw), stride, dilation, groups)
    np.testing.assert_array_equal(back, w)


def test_the_runtime_relayout_stage_matches_the_numpy_packing(run, rng):
    w = rng.standard_normal((4, 3, 3, 4)).astype("float32")
    W = te.placeholder(w.shape, name="W")
    for groups, block in ((1, None), (1, 6), (2, None)):
        packed = ops.conv_transpose_weight(W, (2, 3), (1, 2), groups, block)
        want = ops.pack_conv_transpose_weight(w, (2, 3), (1, 2), groups, block)
        np.testing.assert_array_equal(run(packed, {W: w})[0], want)


def test_phase_weight_block():
    assert ops.phase_weight_block(128) == 16 and ops.phase_weight_block(24) == 8
    assert ops.phase_weight_block(12) is None and ops.phase_weight_block(128, groups=2) is None


def test_conv2d_transpose_errors():
    X = te.placeholder((1, 6, 4, 4), name="X")
    with pytest.raises(TEError, match=r"groups=4, the 6 input channels must divide"):
        ops.conv2d_transpose_nchw(X, te.placeholder((6, 2, 3, 3), name="W"), groups=4)
    with pytest.raises(TEError, match=r"weight\[C, F/groups, KH, KW\] must have C = 6"):
        ops.conv2d_transpose_nchw(X, te.placeholder((4, 2, 3, 3), name="W"))
    with pytest.raises(TEError, match=r"pads \(4, 4\) crop the whole output.*gives -2 rows"):
        ops.conv2d_transpose_nchw(X, te.placeholder((6, 2, 3, 3), name="W"), padding=4)
    with pytest.raises(TEError, match=r"stride 0.*must be positive"):
        ops.conv2d_transpose_nchw(X, te.placeholder((6, 2, 3, 3), name="W"), stride=(0, 1))
    with pytest.raises(TEError, match=r"packed weight 'P'\[8, 6, 2, 2\] does not match.*"
                                      r"expected \[8, 6, 3, 3\]"):
        ops.conv2d_transpose_nchw_packed(X, te.placeholder((8, 6, 2, 2), name="P"), (5, 5), 2)
    with pytest.raises(TEError, match=r"'X' is float32 but the weight 'P' is float64"):
        ops.conv2d_transpose_nchw_packed(X, te.placeholder((6, 6, 3, 3), "float64", "P"),
                                         (3, 3))
    with pytest.raises(TEError, match=r"block=4 packs a dense weight only.*groups=2"):
        ops.pack_conv_transpose_weight(np.zeros((6, 2, 3, 3)), 2, 1, 2, block=4)

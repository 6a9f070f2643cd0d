"""conv2d (stride, padding, dilation, groups, depthwise) and pooling against numpy."""
import numpy as np
import pytest

from kiln import te
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops import tags


def _pad4(padding):
    if isinstance(padding, int):
        return (padding,) * 4
    return tuple(padding) * 2 if len(padding) == 2 else tuple(padding)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_ref(x, w, stride, padding, dilation, groups):
    top, left, bottom, right = _pad4(padding)
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    f, c_group, kh, kw = w.shape
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], f, oh, ow))
    per_group = f // groups
    for g in range(groups):
        xs = xp[:, g * c_group:(g + 1) * c_group]
        ws = w[g * per_group:(g + 1) * per_group]
        for ry in range(kh):
            for rx in range(kw):
                patch = xs[:, :, ry * dh:ry * dh + sh * (oh - 1) + 1:sh,
                           rx * dw:rx * dw + sw * (ow - 1) + 1:sw]
                out[:, g * per_group:(g + 1) * per_group] += np.einsum(
                    "nchw,fc->nfhw", patch, ws[:, :, ry, rx])
    return out


CONVS = [  # x shape, w shape, stride, padding, dilation, groups
    ((1, 3, 7, 7), (5, 3, 3, 3), 1, 0, 1, 1),
    ((2, 3, 11, 13), (4, 3, 3, 3), 2, 1, 1, 1),
    ((1, 4, 10, 9), (6, 4, 3, 2), (2, 1), (1, 2), (2, 1), 1),
    ((1, 2, 9, 8), (3, 2, 2, 3), 1, (0, 1, 2, 0), 1, 1),           # asymmetric pads
    ((2, 6, 9, 11), (4, 3, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 2),  # groups
    ((1, 5, 8, 8), (5, 1, 3, 3), 1, 1, 1, 5),                       # depthwise
    ((1, 3, 7, 6), (6, 1, 3, 3), 2, 1, 1, 3),                       # depthwise, multiplier 2
    ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0, 1, 1),
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups", CONVS)
def test_conv2d(run, rng, x_shape, w_shape, stride, padding, dilation, groups):
    X = te.placeholder(x_shape, name="X")
    W = te.placeholder(w_shape, name="W")
    Y = ops.conv2d_nchw(X, W, stride, padding, dilation, groups)
    assert Y.op.tag == tags.CONV2D_NCHW
    x = rng.standard_normal(x_shape).astype("float32")
    w = rng.standard_normal(w_shape).astype("float32")
    want = conv_ref(x, w, stride, padding, dilation, groups)
    assert Y.shape == want.shape
    np.testing.assert_allclose(run(Y, {X: x, W: w})[0], want, rtol=1e-4, atol=1e-4)


def test_conv_pad_is_a_separate_injective_stage():
    X = te.placeholder((1, 3, 8, 8), name="X")
    W = te.placeholder((4, 3, 3, 3), name="W")
    Y = ops.conv2d_nchw(X, W, padding=1)
    padded = Y.op.input_tensors[0]
    assert padded.name == "conv2d_nchw_pad" and tags.is_injective(padded.op.tag)
    assert padded.shape == (1, 3, 10, 10)
    assert ops.conv2d_nchw(X, W).op.input_tensors[0] is X  # no pad stage without padding


def test_depthwise_convenience(run, rng):
    X = te.placeholder((1, 4, 6, 7), name="X")
    W = te.placeholder((8, 1, 3, 3), name="W")
    Y = ops.depthwise_conv2d_nchw(X, W, stride=(1, 2), padding=(1, 1, 0, 2))
    assert Y.name == "depthwise_conv2d_nchw"
    x = rng.standard_normal(X.shape).astype("float32")
    w = rng.standard_normal(W.shape).astype("float32")
    want = conv_ref(x, w, (1, 2), (1, 1, 0, 2), 1, 4)
    np.testing.assert_allclose(run(Y, {X: x, W: w})[0], want, rtol=1e-4, atol=1e-4)


def test_conv2d_errors():
    X = te.placeholder((1, 6, 8, 8), name="X")
    with pytest.raises(TEError, match="groups=4, the 6 input channels of 'X'"):
        ops.conv2d_nchw(X, te.placeholder((4, 2, 3, 3), name="W"), groups=4)
    with pytest.raises(TEError, match="window of 9 .* does not fit an input extent of 8"):
        ops.conv2d_nchw(X, te.placeholder((2, 6, 9, 9), name="W"))
    with pytest.raises(TEError, match="padding must be an int, \\(vertical, horizontal\\)"):
        ops.conv2d_nchw(X, te.placeholder((2, 6, 3, 3), name="W"), padding=(1, 2, 3))
    with pytest.raises(TEError, match="expects x\\[N, C, H, W\\]"):
        ops.conv2d_nchw(te.placeholder((6, 8, 8), name="X3"), te.placeholder((2, 6, 3, 3)))


def _pool_out(extent, k, s, d, lo, hi, ceil_mode):
    span = extent + lo + hi - d * (k - 1) - 1
    out = -(-span // s) + 1 if ceil_mode else span // s + 1
    if ceil_mode and (out - 1) * s >= extent + lo:
        out -= 1
    return out


def pool_ref(x, kind, kernel, stride, padding, dilation, ceil_mode, include_pad):
    (kh, kw), (dh, dw) = _pair(kernel), _pair(dilation)
    sh, sw = _pair(kernel if stride is None else stride)
    top, left, bottom, right = _pad4(padding)
    oh = _pool_out(x.shape[2], kh, sh, dh, top, bottom, ceil_mode)
    ow = _pool_out(x.shape[3], kw, sw, dw, left, right, ceil_mode)
    extra_h = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - x.shape[2] - top - bottom)
    extra_w = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - x.shape[3] - left - right)
    widths = ((0, 0), (0, 0), (top, bottom + extra_h), (left, right + extra_w))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype(np.float64), widths, constant_values=fill)
    inside = np.pad(np.ones(x.shape[2:]), widths[2:])
    if include_pad:
        inside = np.pad(np.ones((x.shape[2] + top + bottom, x.shape[3] + left + right)),
                        ((0, extra_h), (0, extra_w)))
    taps, counts = [], np.zeros((oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            window = (slice(ry * dh, ry * dh + sh * (oh - 1) + 1, sh),
                      slice(rx * dw, rx * dw + sw * (ow - 1) + 1, sw))
            taps.append(xp[(slice(None), slice(None)) + window])
            counts += inside[window]
    if kind == "max":
        return np.max(taps, axis=0)
    return np.sum(taps, axis=0) / counts


POOLS = [  # x shape, kernel, stride, padding, dilation, ceil_mode, count_include_pad
    ((1, 2, 7, 7), 2, None, 0, 1, False, False),
    ((2, 3, 9, 8), 3, 2, 1, 1, False, False),
    ((1, 2, 9, 8), 3, 2, 1, 1, False, True),
    ((1, 2, 10, 11), (3, 2), (2, 3), (1, 0, 0, 1), 1, True, False),
    ((1, 2, 10, 11), (3, 2), (2, 3), (1, 0, 0, 1), 1, True, True),
    ((1, 1, 8, 9), 2, 2, 0, 1, True, False),
    ((1, 3, 11, 10), 3, 1, (1, 2), 2, False, False),
    ((1, 1, 5, 5), 5, 1, 0, 1, False, False),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("x_shape,kernel,stride,padding,dilation,ceil_mode,include_pad", POOLS)
def test_pool2d(run, rng, kind, x_shape, kernel, stride, padding, dilation, ceil_mode,
                include_pad):
    X = te.placeholder(x_shape, name="X")
    if kind == "max":
        Y = ops.max_pool2d(X, kernel, stride, padding, dilation, ceil_mode)
    else:
        Y = ops.avg_pool2d(X, kernel, stride, padding, dilation, ceil_mode, include_pad)
    x = rng.standard_normal(x_shape).astype("float32")
    want = pool_ref(x, kind, kernel, stride, padding, dilation, ceil_mode, include_pad)
    assert Y.shape == want.shape
    np.testing.assert_allclose(run(Y, {X: x})[0], want, rtol=1e-5, atol=1e-6)


def test_max_pool_tags():
    X = te.placeholder((1, 1, 6, 6), name="X")
    Y = ops.max_pool2d(X, 3, 2, 1)
    assert tags.kind_of(Y.op.tag) == tags.POOL
    assert Y.op.input_tensors[0].op.tag == tags.PAD


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_avg_pool_matches_onnxruntime(rng, ceil_mode, include_pad):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    x = rng.standard_normal((1, 2, 10, 11)).astype("float32")
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 0, 1, 1], ceil_mode=int(ceil_mode),
                            count_include_pad=include_pad)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    X = te.placeholder(x.shape, name="X")
    Y = ops.avg_pool2d(X, 3, 2, (1, 0, 1, 1), 1, ceil_mode, bool(include_pad))
    from kiln.te.reference import evaluate
    got, = evaluate(Y, {X: x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_global_pools(run, rng):
    X = te.placeholder((2, 3, 5, 7), name="X")
    x = rng.standard_normal(X.shape).astype("float32")
    avg, mx = run([ops.global_avg_pool2d(X), ops.global_max_pool2d(X)], {X: x})
    np.testing.assert_allclose(avg, x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mx, x.max(axis=(2, 3), keepdims=True))


def test_pool_errors():
    X = te.placeholder((1, 1, 4, 4), name="X")
    with pytest.raises(TEError, match="max_pool2d\\(\\): a window of 5"):
        ops.max_pool2d(X, 5)
    with pytest.raises(TEError, match="kernel must be an int or 2 ints"):
        ops.max_pool2d(X, (2, 2, 2))
    with pytest.raises(TEError, match="avg_pool2d\\(\\): tensor 'I' has dtype int32"):
        ops.avg_pool2d(te.placeholder((1, 1, 4, 4), "int32", name="I"), 2)


KPACKED = [  # x shape, filters, kernel, stride, padding, dilation, block
    ((1, 3, 7, 7), 16, (3, 3), 1, 1, 1, 16),
    ((2, 5, 11, 13), 16, (3, 2), 2, (1, 0, 2, 1), (1, 2), 8),   # asymmetric, dilated
    ((1, 7, 9, 9), 24, (1, 1), 2, 0, 1, 8),                     # 1x1 stride-2 projection
    ((1, 1, 1, 1), 3, (1, 1), 1, 0, 1, 3),                      # odd block, one pixel
    ((1, 4, 5, 5), 2, (3, 3), 1, 1, 1, 1),
]


@pytest.mark.parametrize("x_shape,filters,kernel,stride,padding,dilation,block", KPACKED)
def test_conv2d_kpacked_matches_the_unpacked_conv(run, rng, x_shape, filters, kernel, stride,
                                                  padding, dilation, block):
    w_shape = (filters, x_shape[1]) + kernel
    X = te.placeholder(x_shape, name="X")
    Wp = te.placeholder((filters // block, x_shape[1]) + kernel + (block,), name="Wp")
    Y = ops.conv2d_nchw_kpacked(X, Wp, stride, padding, dilation)
    x = rng.standard_normal(x_shape).astype("float32")
    w = rng.standard_normal(w_shape).astype("float32")
    want = conv_ref(x, w, stride, padding, dilation, 1)
    assert Y.shape == want.shape and tags.is_injective(Y.op.tag)
    got = run(Y, {X: x, Wp: ops.pack_conv_weight(w, block)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_pack_conv_weight_round_trips_and_puts_the_block_innermost(rng):
    w = rng.standard_normal((32, 3, 3, 2)).astype("float32")
    packed = ops.pack_conv_weight(w, 16)
    assert packed.shape == (2, 3, 3, 2, 16) and packed.flags.c_contiguous
    assert packed[1, 2, 0, 1, 5] == w[16 + 5, 2, 0, 1]
    np.testing.assert_array_equal(ops.unpack_conv_weight(packed, 16), w)


def test_conv2d_kpacked_errors_name_the_problem():
    X = te.placeholder((1, 4, 8, 8), name="X")
    with pytest.raises(TEError, match=r"'X' has 4 channels but the packed weight 'Wp'"):
        ops.conv2d_nchw_kpacked(X, te.placeholder((1, 3, 3, 3, 8), name="Wp"))
    with pytest.raises(TEError, match=r"weight\[F / kb, C, KH, KW, kb\]"):
        ops.conv2d_nchw_kpacked(X, te.placeholder((8, 4, 3, 3), name="W"))
    with pytest.raises(TEError, match=r"F divisible by block=16"):
        ops.pack_conv_weight(np.zeros((24, 4, 3, 3), "float32"), 16)

"""The blocks of window-attention, large-kernel depthwise and transposed-attention vision
models (issue 33 item 2), compiled with default schedules and checked against onnxruntime at
awkward sizes: masked softmax (denormal flush), cyclic shifts exported as Slice + Concat with
shifts of 0 and negative, window partition with and without padding, 5x5 / 7x7 / 9x9
depthwise convs with both channel LayerNorm forms, XCiT's cross-covariance attention, and
MatMuls whose column count is not a whole number of vectors (masked tails)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

import kiln
from kiln.graph.models import _Builder, _layer_norm
from tests.models_zoo import _dwconv, _layer_norm_2d, _roll, _swin_block, _xca


def _check(b: _Builder, out: str, inputs: dict, rtol=2e-4, atol=2e-5) -> np.ndarray:
    model = b.model("t", [(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()], out)
    got = kiln.compile(model, db=None, threads=1).run(list(inputs.values()))[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale)
    return got


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("fill", [-100.0, -1e4, -np.inf])
def test_masked_attention_probabilities_have_no_denormals(fill):
    """Scores + a mask of `fill` -> Softmax -> MatMul (Swin's shifted windows, BERT's
    padding): the probabilities match onnxruntime and hold no denormal (they would slow
    the MatMul 10x); 37 keys, a prime."""
    n, d = 37, 13
    mask = np.where(np.random.default_rng(1).random((1, 1, n, n)) < 0.4, fill, 0.0)
    b = _Builder(seed=2)
    s = b.op("Add", ["scores", b.const(mask.astype(np.float32), "mask")])
    p = b.op("Softmax", [s], axis=-1)
    _check(b, b.op("MatMul", [p, "v"]), {"scores": _x(1, 3, n, n) * 4, "v": _x(1, 3, n, d, seed=1)})
    b = _Builder(seed=2)
    probs = _check(b, b.op("Softmax", [b.op("Add", ["scores", b.const(mask.astype(np.float32),
                                                                       "mask")])], axis=-1),
                   {"scores": _x(1, 3, n, n) * 4})
    tiny = np.finfo(np.float32).tiny
    assert not ((probs != 0) & (np.abs(probs) < tiny)).any()


@pytest.mark.parametrize("size,shift", [(7, 0), (7, 3), (11, -3), (13, -12), (1, 5), (14, 17)])
def test_cyclic_shift_as_slices_and_concat(size, shift):
    """torch.roll over H then W as the exporters write it (Slice + Concat), fused with a
    following window-partition Reshape/Transpose when the window divides the size."""
    b = _Builder(seed=3)
    y = _roll(b, _roll(b, "x", shift, 1, size), shift, 2, size)
    if size % 7 == 0 and size > 7:
        w = 7
        y = b.op("Reshape", [y, b.ints(1, size // w, w, size // w, w, 5)])
        y = b.op("Reshape", [b.op("Transpose", [y], perm=[0, 1, 3, 2, 4, 5]), b.ints(-1, w * w, 5)])
    if y == "x":                      # a shift of 0 (mod size) exports no node
        y = b.op("Neg", [b.op("Neg", ["x"])])
    got = _check(b, y, {"x": _x(1, size, size, 5)}, rtol=0, atol=0)
    if size % 7:
        want = np.roll(_x(1, size, size, 5), (shift, shift), axis=(1, 2))
        np.testing.assert_array_equal(got, want)


def test_swin_blocks_with_and_without_shift_and_a_padded_window():
    """Two Swin blocks (shift 0, then window // 2) on a 14 x 14 map, window 7, 3 heads of 8;
    then a 13 x 13 map padded to 14 (timm pads the map to a multiple of the window) and
    cropped back."""
    b = _Builder(seed=5)
    y = _swin_block(b, "x", 14, 24, 3, 7, 0)
    y = _swin_block(b, y, 14, 24, 3, 7, 3)
    _check(b, y, {"x": _x(1, 14, 14, 24)})
    b = _Builder(seed=6)
    y = b.op("Pad", ["x", b.ints(0, 0, 0, 0, 0, 1, 1, 0)])
    y = _swin_block(b, y, 14, 24, 3, 7, 3)
    y = b.op("Slice", [y, b.ints(0, 0), b.ints(13, 13), b.ints(1, 2)])
    _check(b, y, {"x": _x(1, 13, 13, 24)})


@pytest.mark.parametrize("channels,size,kernel,stride,decomposed", [
    (13, 11, 7, 1, False), (40, 16, 7, 1, True), (24, 9, 9, 1, False),
    (19, 12, 5, 2, True), (16, 15, 7, 2, False)])
def test_large_kernel_depthwise_with_channel_layer_norm(channels, size, kernel, stride,
                                                       decomposed):
    """ConvNeXt's / EdgeNeXt's block head: a k x k depthwise conv (7x7, 9x9, 5x5; prime
    channel counts and sizes, strides 1 and 2), then LayerNorm over channels in either
    export form, a pointwise conv and GELU-free residual."""
    b = _Builder(seed=7)
    y = b.op("Conv", ["x", b.weight(channels, 1, kernel, kernel),
                      b.const(b.rng.uniform(-0.1, 0.1, channels).astype(np.float32), "b")],
             kernel_shape=[kernel, kernel], strides=[stride, stride],
             pads=[kernel // 2] * 4, group=channels)
    y = _layer_norm_2d(b, y, channels, decomposed)
    y = b.conv(y, channels, channels, 1, bias=True)
    y = b.op("Add", [y, _dwconv(b, y, channels, 3)])
    _check(b, y, {"x": _x(1, channels, size, size)})


def test_convnext_block_channels_last_mlp():
    """dwconv 7x7 -> Transpose to NHWC -> LayerNorm -> Linear 4C -> GELU -> Linear C ->
    layer scale -> Transpose back -> residual, at 40 channels (not whole 16-lane vectors)."""
    from tests.models_zoo import convnext_like
    model = convnext_like(image_size=32, dims=(40, 48), depths=(1, 1), num_classes=11)
    x = _x(1, 3, 32, 32)
    got = kiln.compile(model, db=None, threads=1).run([x])[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("tokens,dim,heads", [(37, 24, 3), (16, 40, 5)])
def test_cross_covariance_attention(tokens, dim, heads):
    """XCiT's XCA: q, k L2-normalised along tokens, softmax(q k^T * temperature) over
    channels (head dims 8), times v; then LayerNorm."""
    b = _Builder(seed=9)
    y = _layer_norm(b, _xca(b, "x", tokens, dim, heads), dim, False)
    _check(b, y, {"x": _x(1, tokens, dim)})


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.sampled_from([1, 7, 13, 64]), k=st.sampled_from([5, 24, 33]),
       n=st.sampled_from([1, 3, 17, 24, 40, 88]))
def test_matmul_columns_not_whole_vectors(m, k, n):
    """x[1, m, k] @ w[k, n] + b, * gamma: the last panel's columns run as masked vectors."""
    b = _Builder(seed=m * 100 + n)
    y = b.op("Mul", [b.linear("x", k, n), b.const(b.rng.uniform(0.5, 1, n).astype(np.float32))])
    _check(b, y, {"x": _x(1, m, k)})

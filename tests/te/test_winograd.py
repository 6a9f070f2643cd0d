"""Winograd F(m x m, 3 x 3) in the blocked layout: the transform matrices compute a
correlation exactly, and the TE stages match a float64 direct convolution.

Tolerance: Winograd reassociates the conv's sums through the transforms, whose coefficients
reach 8 (A^T of F(4, 3)) and 1/24 (G), so its fp32 rounding error grows with the magnitude of
the transformed values, not of each output. Errors are bounded relative to the output's
largest magnitude: measured 1e-7..1e-6 for m = 2 and 2e-6..1.3e-5 for m = 4 up to 512
channels (fp32 direct conv: ~1e-7..1e-6); the bounds below leave a 5-10x margin.
"""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.te.errors import TEError
from kiln.te.ops import winograd as W

TOLERANCE = {2: 1e-5, 4: 1e-4}


def conv3x3_ref(x, w, pads):
    """float64 direct 3x3, stride 1 correlation of x[N, C, H, W] padded (top, left, bottom,
    right)."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,fc->nfhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


def blocked(a, b):
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def assert_close_to_conv(y, ref, m):
    scale = max(np.abs(ref).max(), 1e-30)
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOLERANCE[m] * scale)


@pytest.mark.parametrize("m", W.TILE_SIZES)
def test_matrices_compute_correlation_exactly(m):
    a_t, g, b_t = W.winograd_matrices(m)
    alpha = m + 2
    assert (len(a_t), len(a_t[0]), len(g), len(g[0]), len(b_t)) == (m, alpha, alpha, 3, alpha)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        d = [Fraction(int(v)) for v in rng.integers(-50, 50, alpha)]
        w = [Fraction(int(v), int(q)) for v, q in zip(rng.integers(-50, 50, 3),
                                                      rng.integers(1, 9, 3))]
        gw = [sum(g[i][j] * w[j] for j in range(3)) for i in range(alpha)]
        bd = [sum(b_t[i][j] * d[j] for j in range(alpha)) for i in range(alpha)]
        y = [sum(a_t[k][i] * gw[i] * bd[i] for i in range(alpha)) for k in range(m)]
        assert y == [sum(d[k + j] * w[j] for j in range(3)) for k in range(m)]


def test_f43_matches_lavins_input_transform():
    # the points 0, +-1, +-2 (+ infinity) give Lavin & Gray's B^T for F(4, 3)
    _, _, b_t = W.winograd_matrices(4)
    assert [[int(v) for v in row] for row in b_t] == [
        [4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]


@pytest.mark.parametrize("m", W.TILE_SIZES)
def test_pack_weight_is_g_g_gt(m, rng):
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    u = W.pack_winograd_weight(w, m, 16)
    _, g, _ = W.winograd_matrices_f64(m)
    assert u.shape == (m + 2, m + 2, 2, 16, 16)
    f, c = 21, 5
    expect = g @ w[f, c].astype(np.float64) @ g.T
    np.testing.assert_allclose(u[:, :, f // 16, c, f % 16], expect, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("m", W.TILE_SIZES)
@pytest.mark.parametrize("f, c, b", [(3, 1, 1), (21, 7, 3), (16, 13, 8)])
def test_pack_weight_every_entry_awkward_shapes(m, f, c, b, rng):
    """Every (f, c) of an odd-sized weight against G g G^T computed one pair at a time."""
    w = rng.standard_normal((f, c, 3, 3)).astype(np.float32)
    u = W.pack_winograd_weight(w, m, b)
    _, g, _ = W.winograd_matrices_f64(m)
    assert u.shape == (m + 2, m + 2, f // b, c, b) and u.dtype == np.float32
    assert u.flags.c_contiguous
    for fi in range(f):
        for ci in range(c):
            expect = (g @ w[fi, ci].astype(np.float64) @ g.T).astype(np.float32)
            np.testing.assert_allclose(u[:, :, fi // b, ci, fi % b], expect, rtol=1e-6,
                                       atol=1e-6)


@pytest.mark.parametrize("m", W.TILE_SIZES)
@pytest.mark.parametrize("f, c, b", [(1, 1, 1), (21, 7, 3), (48, 37, 16)])
def test_pack_weight_has_the_bits_of_the_einsum_form(m, f, c, b, rng):
    """The plane-at-a-time transform sums the same products in the same order as the
    three-operand einsum it replaced: equal bits, so a model's outputs do not move."""
    w = (rng.standard_normal((f, c, 3, 3)) * 10.0 ** rng.integers(-3, 4, (f, c, 3, 3))
         ).astype(np.float32)
    _, g, _ = W.winograd_matrices_f64(m)
    taps = w.transpose(2, 3, 1, 0).astype(np.float64)
    ref = np.einsum("ai,ijcf,bj->abcf", g, taps, g)
    ref = ref.reshape(*ref.shape[:3], f // b, b).transpose(0, 1, 3, 2, 4).astype(np.float32)
    assert np.array_equal(W.pack_winograd_weight(w, m, b), ref)


def _run_conv(run, x, w, m, pads, b):
    X = te.placeholder((x.shape[0], x.shape[1] // b) + x.shape[2:] + (b,), name="X")
    Ut = te.placeholder((m + 2, m + 2, w.shape[0] // b, w.shape[1], b), name="U")
    Y = W.conv2d_winograd_nchwc(X, Ut, m, pads)
    (y,) = run(Y, {X: blocked(x, b), Ut: W.pack_winograd_weight(w, m, b)})
    return y


SHAPES = [  # N, C, F, H, W, pads, block
    (1, 16, 16, 7, 7, (1, 1, 1, 1), 16),
    (1, 16, 32, 9, 11, (1, 1, 1, 1), 16),
    (2, 32, 16, 13, 13, (1, 1, 1, 1), 16),
    (1, 48, 16, 1, 1, (1, 1, 1, 1), 16),       # one output pixel: a cropped tile
    (1, 16, 16, 5, 3, (0, 0, 0, 0), 16),       # no padding
    (1, 8, 8, 6, 7, (2, 0, 1, 1), 8),          # asymmetric pads, block 8
]


@pytest.mark.parametrize("m", W.TILE_SIZES)
@pytest.mark.parametrize("n,c,f,h,w,pads,b", SHAPES)
def test_stages_match_direct_conv(run, rng, m, n, c, f, h, w, pads, b):
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((f, c, 3, 3)).astype(np.float32)
    y = _run_conv(run, x, wt, m, pads, b)
    assert_close_to_conv(y, blocked(conv3x3_ref(x, wt, pads), b), m)


@settings(max_examples=12, deadline=None)
@given(m=st.sampled_from(W.TILE_SIZES), h=st.integers(1, 12), w=st.integers(1, 12),
       cb=st.integers(1, 2), fb=st.integers(1, 2), pad=st.integers(0, 1),
       seed=st.integers(0, 1000))
def test_random_shapes_match_direct_conv(m, h, w, cb, fb, pad, seed):
    from tests.te.conftest import run_native
    if h + 2 * pad < 3 or w + 2 * pad < 3:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 8 * cb, h, w)).astype(np.float32)
    wt = rng.standard_normal((8 * fb, 8 * cb, 3, 3)).astype(np.float32)
    y = _run_conv(run_native, x, wt, m, (pad,) * 4, 8)
    assert_close_to_conv(y, blocked(conv3x3_ref(x, wt, (pad,) * 4), 8), m)


def test_errors_name_the_problem():
    X = te.placeholder((1, 1, 8, 8, 16), name="X")
    with pytest.raises(TEError, match=r"tile size m=3.*\(2, 4\)"):
        W.winograd_input_transform(X, 3)
    with pytest.raises(TEError, match=r"expects weight\[F, C, 3, 3\].*\[16, 16, 5, 5\]"):
        W.pack_winograd_weight(np.zeros((16, 16, 5, 5), np.float32), 2, 16)
    V = W.winograd_input_transform(X, 2)
    U = te.placeholder((4, 4, 1, 32, 16), name="U")
    with pytest.raises(TEError, match=r"'U'\[4, 4, 1, 32, 16\]"):
        W.winograd_batch_matmul(V, U)
    with pytest.raises(TEError, match=r"does not fit"):
        W.winograd_input_transform(te.placeholder((1, 1, 1, 1, 16), name="Z"), 2, 0)

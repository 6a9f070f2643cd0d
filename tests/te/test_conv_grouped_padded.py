"""Grouped convs in the channel-blocked layout (te.ops.grouped_conv2d_nchwc) and blocked
layouts with a padded last block: the TE ops against a numpy conv, weight packing round trips,
and default plus sampled schedules compiled and checked (awkward shapes: primes, 1x1 spatial,
channel counts that are not multiples of 8)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from kiln import te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.reference import evaluate

from ..util import run_config

R = np.random.default_rng(11)


def _conv_grouped(x, w, stride, pad, groups):
    """out[n, f] = sum over f's group's channels and the window (numpy einsum per group)."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(np.float64)
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, oh, ow))
    per = f // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for ry in range(kh):
            for rx in range(kw):
                win = xs[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
                out[:, g * per:(g + 1) * per] += np.einsum("nchw,fc->nfhw", win,
                                                           w[g * per:(g + 1) * per, :, ry, rx])
    return out


def _blocked(x, b):
    n, c, h, w = x.shape
    cb = -(-c // b)
    x = np.concatenate([x, np.zeros((n, cb * b - c, h, w), x.dtype)], axis=1)
    return np.ascontiguousarray(x.reshape(n, cb, b, h, w).transpose(0, 1, 3, 4, 2))


# (channels, filters, groups, block): whole blocks per group (8/16-wide groups), whole
# groups per block (RegNet's width-8 groups in blocks of 16, width-4 in blocks of 8), a
# group wider in filters than in channels
CASES = [(24, 24, 3, 8), (32, 32, 4, 16), (48, 48, 3, 16), (16, 32, 2, 8), (40, 40, 10, 8),
         (48, 48, 6, 16)]


@pytest.mark.parametrize("c,f,groups,block", CASES)
def test_grouped_weight_packing_round_trips_and_keeps_only_in_group_taps(c, f, groups, block):
    w = R.standard_normal((f, c // groups, 3, 1)).astype(np.float32) + 3.0   # no zeros
    packed, per_group = ops.pack_grouped_conv_weight(w, groups, block)
    assert packed.shape[0] == f // block and packed.shape[4:] == (block, block)
    assert np.count_nonzero(packed) == w.size        # cross-group taps are zero
    np.testing.assert_array_equal(ops.unpack_grouped_conv_weight(packed, groups, c, per_group),
                                  w)


def test_grouped_blocking_rules():
    assert ops.grouped_conv_blocking(24, 24, 3, 8) == (1, 1)      # one block per group
    assert ops.grouped_conv_blocking(64, 64, 2, 16) == (2, 2)     # two blocks per group
    assert ops.grouped_conv_blocking(368, 368, 46, 16) == (1, 1)  # two groups per block
    assert ops.grouped_conv_blocking(24, 24, 2, 8) is None        # 12-wide groups straddle
    assert ops.grouped_conv_blocking(32, 32, 16, 16) is None      # 8x the multiply-adds
    assert ops.grouped_conv_blocking(24, 48, 6, 8) is None        # 4 -> 8 per group
    with pytest.raises(TEError, match="does not run on blocks of 8"):
        ops.pack_grouped_conv_weight(np.zeros((24, 12, 3, 3), np.float32), 2, 8)


@pytest.mark.parametrize("c,f,groups,block,hw,stride", [
    (24, 24, 3, 8, (7, 5), 1), (32, 32, 4, 16, (5, 3), 2), (16, 32, 2, 8, (1, 1), 1)])
def test_grouped_conv_nchwc_default_and_sampled_schedules_match_numpy(c, f, groups, block, hw,
                                                                      stride):
    h, w_ = hw
    x = R.standard_normal((1, c, h, w_)).astype(np.float32)
    w = R.standard_normal((f, c // groups, 3, 3)).astype(np.float32)
    packed, per_group = ops.pack_grouped_conv_weight(w, groups, block)
    X = te.placeholder((1, c // block, h, w_, block), name="X")
    W = te.placeholder(packed.shape, name="W")
    out = ops.grouped_conv2d_nchwc(X, W, per_group, stride, 1)
    want = _blocked(_conv_grouped(x, w, stride, 1, groups).astype(np.float32), block)
    inputs = {X: _blocked(x, block), W: packed}
    (got,) = evaluate([out], inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    task = Task("grouped", (out,), (X, W, out))
    space = SearchSpace(task)
    rng = random.Random(c + f + h)
    for config in [space.default_config()] + [space.sample(rng)]:
        (got,) = run_config(task, space, config, inputs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_grouped_conv_nchwc_refuses_mismatched_shapes():
    X = te.placeholder((1, 3, 5, 5, 8), name="X")
    with pytest.raises(TEError, match="do not fit the 3 input blocks"):
        ops.grouped_conv2d_nchwc(X, te.placeholder((4, 1, 3, 3, 8, 8), name="W"), 1)
    with pytest.raises(TEError, match="grouped_conv2d_nchwc"):
        ops.grouped_conv2d_nchwc(X, te.placeholder((3, 1, 3, 3, 16, 8), name="W"), 1)


@pytest.mark.parametrize("c,block", [(13, 8), (27, 8), (9, 16), (1, 8)])
def test_to_blocked_pads_and_from_blocked_crops_a_partial_block(c, block):
    x = R.standard_normal((1, c, 3, 1)).astype(np.float32)
    X = te.placeholder(x.shape, name="X")
    blocked = ops.to_blocked(X, block)
    assert blocked.shape == (1, -(-c // block), 3, 1, block)
    back = ops.from_blocked(blocked, c)
    assert back.shape == x.shape
    got_blocked, got = evaluate([blocked, back], {X: x})
    np.testing.assert_array_equal(got_blocked, _blocked(x, block))
    np.testing.assert_array_equal(got, x)

"""Channel-blocked (NCHWc) convs and layout stages: the TE ops against numpy, weight packing
round trips, and the search space's sampled schedules compiled and checked (awkward shapes:
primes, 1, a block of 8 on an odd width)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.reference import evaluate

from ..util import run_config, task_inputs

R = np.random.default_rng(3)


def _blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _conv_nchw(x, w, stride, pad, groups=1):
    """Direct numpy conv (slow loops over taps; fine for the small test shapes)."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, oh, ow), np.float64)
    per = f // groups
    for k in range(f):
        g = k // per
        for ry in range(kh):
            for rx in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, ry:ry + stride * oh:stride,
                           rx:rx + stride * ow:stride]
                out[:, k] += np.einsum("nchw,c->nhw", patch, w[k, :, ry, rx])
    return out.astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.sampled_from([8, 16]), st.sampled_from([8, 16]),
       st.integers(1, 9), st.integers(1, 3), st.integers(1, 2), st.integers(0, 1))
def test_packed_weights_round_trip_and_the_blocked_conv_is_the_plain_conv(ci, bi, bo, hw, k,
                                                                          stride, pad):
    c, f = ci * bi, 2 * bo
    if hw + 2 * pad < k:
        return
    x = R.standard_normal((1, c, hw, hw + 2)).astype(np.float32)
    w = R.standard_normal((f, c, k, k)).astype(np.float32)
    packed = ops.pack_conv_weight_blocked(w, bi, bo)
    np.testing.assert_array_equal(ops.unpack_conv_weight_blocked(packed), w)
    X = te.placeholder((1, c // bi, hw, hw + 2, bi), name="X")
    W = te.placeholder(packed.shape, name="W")
    out = ops.conv2d_nchwc(X, W, stride, pad)
    (got,) = evaluate([out], {X: _blocked(x, bi), W: packed})
    want = _blocked(_conv_nchw(x, w, stride, pad), bo)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_depthwise_and_layout_stages_match_numpy():
    x = R.standard_normal((1, 16, 7, 5)).astype(np.float32)
    w = R.standard_normal((16, 1, 3, 3)).astype(np.float32)
    packed = ops.pack_depthwise_weight(w, 8)
    np.testing.assert_array_equal(ops.unpack_depthwise_weight(packed), w)
    X = te.placeholder((1, 16, 7, 5), name="X")
    W = te.placeholder(packed.shape, name="W")
    blocked = ops.to_blocked(X, 8)
    out = ops.depthwise_conv2d_nchwc(blocked, W, 2, 1)
    back = ops.from_blocked(out)
    got_blocked, got = evaluate([blocked, back], {X: x, W: packed})
    np.testing.assert_array_equal(got_blocked, _blocked(x, 8))
    np.testing.assert_allclose(got, _conv_nchw(x, w, 2, 1, groups=16), rtol=1e-4, atol=1e-4)


def test_bad_shapes_name_the_tensor_and_the_layout():
    X = te.placeholder((1, 12, 5, 5), name="X")
    with pytest.raises(TEError, match=r"to_blocked\(\).*'X'\[1, 12, 5, 5\] with block=0"):
        ops.to_blocked(X, 0)
    with pytest.raises(TEError, match=r"from_blocked\(\): 7 channels do not fit"):
        ops.from_blocked(ops.to_blocked(X, 8), 7)
    Xb = te.placeholder((1, 2, 5, 5, 8), name="Xb")
    with pytest.raises(TEError, match="do not match the packed weight 'W'"):
        ops.conv2d_nchwc(Xb, te.placeholder((1, 3, 1, 1, 8, 8), name="W"))
    with pytest.raises(TEError, match="depthwise_conv2d_nchwc"):
        ops.depthwise_conv2d_nchwc(Xb, te.placeholder((2, 3, 3, 16), name="W"))
    with pytest.raises(TEError, match="F divisible by out_block=16"):
        ops.pack_conv_weight_blocked(np.zeros((24, 8, 1, 1)), 8, 16)


TASKS = [("conv2d_nchwc", (1, 16, 7, 5, 16, 3, 3, 1, 1, 8, 16)),
         ("conv2d_nchwc", (1, 8, 11, 13, 8, 1, 1, 2, 0, 8, 8)),
         ("conv2d_nchwc", (1, 16, 1, 1, 32, 1, 1, 1, 0, 16, 16)),
         ("depthwise_conv2d_nchwc", (1, 16, 9, 7, 3, 3, 2, 1, 8)),
         ("depthwise_conv2d_nchwc", (1, 16, 5, 5, 3, 3, 1, 1, 16))]


@pytest.mark.parametrize("op_name,shape", TASKS)
def test_sampled_schedules_of_blocked_convs_compile_to_correct_kernels(op_name, shape):
    task = Task.from_op(op_name, shape)
    space = SearchSpace(task)
    inputs = task_inputs(task, seed=2)
    (want,) = evaluate(list(task.outputs), inputs)
    rng = random.Random(len(shape) + shape[2])
    for config in [space.default_config()] + [space.sample(rng) for _ in range(4)]:
        (got,) = run_config(task, space, config, inputs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))

"""te.ops.frames.frame_taps (a 3-D conv's depth window as channels of a batch of frames)
against a loop-by-loop numpy oracle: plain and channel-blocked inputs, groups, stride,
dilation and padding, one frame, prime sizes."""
import numpy as np
import pytest

from kiln import te
from kiln.te.errors import TEError
from kiln.te.ops import tags
from kiln.te.ops.frames import frame_taps


def oracle(x, frames, taps, stride, dilation, begin, end, groups):
    """Element by element, straight from the definition."""
    n, c = x.shape[0] // frames, x.shape[1]
    cg = c // groups
    d_out = (frames + begin + end - dilation * (taps - 1) - 1) // stride + 1
    out = np.zeros((n * d_out, c * taps) + x.shape[2:], x.dtype)
    for clip in range(n):
        for o in range(d_out):
            for g in range(groups):
                for k in range(taps):
                    f = o * stride + k * dilation - begin
                    if 0 <= f < frames:
                        dst = (g * taps + k) * cg
                        out[clip * d_out + o, dst:dst + cg] = \
                            x[clip * frames + f, g * cg:(g + 1) * cg]
    return out


CASES = [
    # (x shape, frames, taps, stride, dilation, begin, end, groups)
    ((8, 6, 5, 7), 4, 3, 1, 1, 1, 1, 1),         # R(2+1)D's temporal conv, small
    ((7, 3, 2, 3), 7, 3, 2, 1, 1, 1, 1),         # prime frames, stride 2
    ((10, 4, 3, 1), 5, 2, 1, 2, 0, 3, 2),        # dilation, asymmetric pad, groups
    ((1, 5, 3, 3), 1, 3, 1, 1, 1, 1, 1),         # one frame: two taps read padding
    ((6, 9, 1, 11), 3, 1, 2, 1, 0, 0, 3),        # one tap, stride 2 (a 1x1x1/2 conv)
    ((4, 3, 2, 2, 8), 2, 3, 1, 1, 1, 1, 1),      # channel-blocked (axis 1 counts blocks)
    ((6, 4, 3, 5, 8), 3, 3, 2, 1, 2, 1, 2),      # blocked, grouped, stride 2
]


@pytest.mark.parametrize("case", CASES, ids=[str(c[0]) for c in CASES])
def test_frame_taps_matches_oracle(run, rng, case):
    shape, *attrs = case
    X = te.placeholder(shape, name="X")
    Y = frame_taps(X, *attrs)
    assert Y.op.tag == tags.INJECTIVE
    x = rng.standard_normal(shape).astype(np.float32)
    want = oracle(x, *attrs)
    got = run(Y, {X: x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_frame_taps_errors_name_the_problem():
    X = te.placeholder((6, 4, 3, 3), name="X")
    with pytest.raises(TEError, match=r"frame_taps\(\): 'X'\[6, 4, 3, 3\].*clips of 4 frames"):
        frame_taps(X, 4, 3)
    with pytest.raises(TEError, match=r"'X'.*4 channels not 3 groups"):
        frame_taps(X, 3, 3, groups=3)
    with pytest.raises(TEError, match=r"window of 5 taps.*longer than the 3 padded frames"):
        frame_taps(X, 3, 5)
    with pytest.raises(TEError, match=r"must be >= 1"):
        frame_taps(X, 3, 0)

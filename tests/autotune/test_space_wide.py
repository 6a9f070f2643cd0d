"""Default schedules for 16-lane, 32-register targets (AVX-512): one-vector blocked tiles
ranked by loads per multiply-add with at most WIDE_MAX_BLOCKS blocks, at most WIDE_MAX_ROWS
rows over overlapping broadcast windows (NCHW-input stems), partial-vector column tiles that
divide the axis. Each rule keyed on the target's vector width, checked against numpy on
awkward shapes, and shown not to touch an AVX2 target's choices. The kernels run on the
host whatever the target string says (the tiles, not the instructions, are under test)."""
import numpy as np
import pytest

from kiln import te
from kiln.autotune.space import defaults as sd
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.defaults import (WIDE_MAX_BLOCKS, WIDE_MAX_ROWS, _blocks_rows_tile,
                                          _blocks_rows_tile_wide, _partial_vector_tile,
                                          _vector_tile)
from kiln.autotune.task import Task
from kiln.te import ops
from tests.util import knob, numpy_conv_nchwc, run_config

AVX512 = "llvm -mcpu=znver4"
AVX2 = "llvm -mcpu=znver3"


def _blocked_task(c, h, w, k, r, stride, pad, target):
    return Task.from_op("conv2d_nchwc", (1, c, h, w, k, r, r, stride, pad, 16, 16),
                        target=target)


def _inner(space, config, stage, positions):
    return [config[knob(space, stage, f"tile/{p}")][1] for p in positions]


def _check_conv(task, space, config, stride, pad, seed=3):
    rng = np.random.default_rng(seed)
    inputs = {t: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args[:-1]}
    x, wt = (inputs[t] for t in task.args[:-1])
    (got,) = run_config(task, space, config, inputs)
    np.testing.assert_allclose(got, numpy_conv_nchwc(x, wt, stride, pad), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks,rows,want", [
    (16, 49, (2, 7)),     # ResNet-18's Winograd GEMM at 7 x 7 (49 tiles): was 16 x 1
    (32, 7, (2, 7)),      # 512 channels at 7 x 7: was 16 blocks x 1 pixel
    (32, 16, (4, 4)),     # unchanged where the old rule found a square tile
    (57, 3, (3, 3)),      # RegNet's 912 channels at 3 x 3: was 19 x 1
    (2, 13, (1, 13)),     # prime rows kept whole
    (128, 1, (4, 1)),     # one pixel: at most WIDE_MAX_BLOCKS blocks
    (3, 1, (3, 1)),
    (1, 1, (1, 1)),
    (4, 31, (4, 6)),      # prime rows, divisors reach 4 accumulators: 5 x 6 rows + 1 tail
    (4, 62, (4, 6)),      # 62 = 2 x 31
    (1, 29, (1, 24)),     # one block of prime rows: was 1 x 1
    (8, 17, (1, 17)),     # a prime that fills half the budget stays whole
])
def test_wide_blocks_rows_tile_ranks_by_loads(blocks, rows, want):
    c, r = _blocks_rows_tile_wide(blocks, rows, 24)
    assert (c, r) == want
    assert blocks % c == 0 and c * r <= 24 and c <= WIDE_MAX_BLOCKS
    if rows % r:            # a tail only where no divisor tile reaches half the budget
        assert max(cc * rr for cc in range(1, WIDE_MAX_BLOCKS + 1) if blocks % cc == 0
                   for rr in range(1, rows + 1) if rows % rr == 0 and cc * rr <= 24) < 12


@pytest.mark.parametrize("c,h,w,k,r,stride,pad", [
    (32, 7, 7, 256, 3, 1, 1),    # 16 output blocks at 7 x 7: 2 blocks x 7 pixels
    (48, 5, 5, 48, 1, 1, 0),     # 3 blocks, prime 5-pixel rows
    (16, 13, 13, 64, 3, 2, 1),   # a 3x3/2 conv to 7 x 7, odd input
    (16, 1, 1, 32, 1, 1, 0),     # one pixel
    (16, 31, 31, 64, 3, 1, 1),   # SqueezeNet-1.1's expand at 31 x 31: 4 blocks x 6 rows + tail
    (32, 29, 29, 32, 3, 1, 1),   # two output blocks, prime rows: 2 x 12 rows + a 5-row tail
    (16, 61, 61, 32, 3, 2, 0),   # stride 2 to 30 x 30
])
def test_wide_one_vector_blocks_pick_the_wide_rule_and_compute_the_conv(c, h, w, k, r, stride,
                                                                        pad):
    task = _blocked_task(c, h, w, k, r, stride, pad, AVX512)
    space = SearchSpace(task)
    config = space.default_config()
    ow = (w + 2 * pad - r) // stride + 1
    tile = _inner(space, config, "conv", range(5))
    assert (tile[1], tile[3], tile[4]) == (*_blocks_rows_tile_wide(k // 16, ow, 24), 16)
    _check_conv(task, space, config, stride, pad)


def test_avx2_blocked_convs_never_consult_the_wide_rules(monkeypatch):
    """An AVX2 target's defaults are what they were: the 16-lane rules are not called."""
    def boom(*args):
        raise AssertionError("a 16-lane rule ran for an AVX2 target")
    monkeypatch.setattr(sd, "_blocks_rows_tile_wide", boom)
    monkeypatch.setattr(sd, "_partial_vector_tile", boom)
    for task in (Task.from_op("conv2d_nchwc", (1, 16, 7, 7, 64, 1, 1, 1, 0, 8, 8), target=AVX2),
                 _blocked_task(32, 7, 7, 256, 3, 1, 1, AVX2),
                 Task.from_op("batch_matmul", (6, 50, 64, 50), target=AVX2)):
        SearchSpace(task).default_config()
    task = Task.from_op("conv2d_nchwc", (1, 16, 7, 7, 64, 1, 1, 1, 0, 8, 8), target=AVX2)
    space = SearchSpace(task)
    assert _inner(space, space.default_config(), "conv", (1, 3)) == \
        list(_blocks_rows_tile(8, 7, 12))


@pytest.mark.parametrize("extent,lanes,want", [
    (50, 16, 10), (100, 16, 10), (90, 16, 15), (49, 16, 7), (37, 16, None), (74, 16, None),
    (50, 8, None),            # 8-lane vectors keep their guarded tail
])
def test_partial_vector_tile(extent, lanes, want):
    assert _partial_vector_tile(extent, lanes) == want
    if want:
        assert _vector_tile(extent, lanes) == want and extent % want == 0


@pytest.mark.parametrize("batch,m,k,n", [
    (6, 50, 64, 50),      # ViT-S's attention scores: 10-lane tiles
    (1, 7, 13, 90),       # 15 lanes, prime K
    (2, 1, 5, 37),        # prime columns: one vector and a guarded tail
    (1, 11, 17, 100),
])
def test_partial_vector_matmul_matches_numpy(batch, m, k, n):
    task = Task.from_op("batch_matmul", (batch, m, k, n), target=AVX512)
    space = SearchSpace(task)
    config = space.default_config()
    vec = config[knob(space, task.outputs[0].op.name, "tile/2")][1]
    assert vec == (_partial_vector_tile(n, 16) or (16 if n > 32 else n))
    rng = np.random.default_rng(11)
    a, b = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in task.args[:2])
    (got,) = run_config(task, space, config, {task.args[0]: a, task.args[1]: b})
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-4, atol=1e-4)


def _stem_task(h, w, filters, stride, target, channels=3):
    x = te.placeholder((1, channels, h, w), name="X")
    wt = te.placeholder((filters // 16, channels, 3, 3, 16), name="W")
    out = ops.conv2d_nchwc(x, wt, stride=stride, padding=1, name="conv")
    return Task("stem", (out,), (x, wt, out), target)


@pytest.mark.parametrize("h,w,stride", [
    (8, 96, 2),       # RegNet's stem at 96: 48-wide rows, 16 -> 12
    (29, 29, 1),      # prime rows
    (9, 26, 2),       # 13 columns (one past the cap)
    (5, 3, 1),
])
def test_stem_rows_at_most_wide_max_rows_and_compute_the_conv(h, w, stride):
    task = _stem_task(h, w, 32, stride, AVX512)
    space = SearchSpace(task)
    config = space.default_config()
    assert config[knob(space, "conv", "tile/3")][1] <= WIDE_MAX_ROWS
    _check_conv(task, space, config, stride, 1)
    avx2 = SearchSpace(_stem_task(h, w, 32, stride, AVX2))
    old = avx2.default_config()
    assert old[knob(avx2, "conv", "tile/3")][1] <= 12      # the AVX2 budget's own bound


def test_the_row_cap_is_keyed_on_the_vector_width():
    op = SearchSpace(_stem_task(96, 96, 32, 2, AVX512)).anchors[0].op
    assert sd._max_rows(SearchSpace(_stem_task(96, 96, 32, 2, AVX512)).target, op, 3) == \
        WIDE_MAX_ROWS
    assert sd._max_rows(SearchSpace(_stem_task(96, 96, 32, 2, AVX2)).target, op, 3) is None
    blocked = SearchSpace(_blocked_task(16, 8, 8, 32, 3, 1, 1, AVX512))
    assert sd._max_rows(blocked.target, blocked.anchors[0].op, 3) is None   # no window taps


@pytest.mark.parametrize("k,n,want", [
    (9216, 4096, (64, 64)),   # AlexNet's classifier: one block of 64-lane runs (was 32 x 8 steps)
    (960, 1280, (20, 64)),    # MobileNetV3's head
])
def test_wide_gemv_streams_whole_rows_on_one_thread(k, n, want):
    space = SearchSpace(Task.from_op("matmul", (1, k, n), target=AVX512), 1)
    config = space.default_config()
    assert tuple(config[knob(space, space.anchors[0].op.name, "tile/1")]) == want
    assert sd._stream_run_cap(((1, 16), (1, 64)), 16, 24) == 64
    assert sd._stream_run_cap(((1, 8), (1, 32)), 8, 12) == 48     # AVX2: the budget's bound


@pytest.mark.parametrize("k,n", [(37, 1000), (13, 4096), (5, 200), (1, 48)])
def test_wide_gemv_matches_numpy(k, n):
    task = Task.from_op("matmul", (1, k, n), target=AVX512)
    space = SearchSpace(task, 1)
    rng = np.random.default_rng(13)
    a, b = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in task.args[:2])
    (got,) = run_config(task, space, space.default_config(), {task.args[0]: a, task.args[1]: b})
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)

"""The packing rule: an anchor's operand copied panel-major, generated from the DAG."""
import random

import numpy as np
import pytest

from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import build
from kiln.schedule.lower import lower

from .test_space_defaults import blocked_conv


def _conv_nchw(x, w, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    oh, ow = (h - r) // stride + 1, (wd - s) // stride + 1
    out = np.zeros((n, k, oh, ow), np.float64)
    for ry in range(r):
        for rx in range(s):
            window = x[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
            out += np.einsum("nchw,kc->nkhw", window, w[:, :, ry, rx])
    return out


NUMPY = {
    "matmul": lambda a, b: a @ b,
    "dense": lambda x, w, bias: np.maximum(x @ w.T + bias, 0),
    "batch_matmul": lambda a, b: a @ b,
    "conv2d": None,     # needs stride/pad: see _expected
}


def _expected(op_name, shape, arrays):
    if op_name == "conv2d":
        stride, pad = shape[7], shape[8]
        return _conv_nchw(*[a.astype(np.float64) for a in arrays], stride, pad)
    return NUMPY[op_name](*[a.astype(np.float64) for a in arrays])


def test_pack_knobs_come_from_the_access_pattern():
    def packs(task):
        return [k.name for k in SearchSpace(task).knobs if "/pack/" in k.name]
    assert packs(Task.from_op("matmul", (64, 64, 64))) == ["s0/pack/in0", "s0/pack/in1"]
    # B[k, j] with j at most two vectors wide is already a contiguous panel
    assert packs(Task.from_op("matmul", (7, 5, 11))) == ["s0/pack/in0"]
    assert packs(Task.from_op("dense", (8, 8, 40))) == ["s0/pack/in0", "s0/pack/in1"]  # X, W
    assert packs(Task.from_op("conv2d", (1, 4, 8, 8, 8, 3, 3, 1, 1))) == ["s1/pack/in1"]  # W
    # the input is read through the pad stage and the packed weight's ki is a narrow panel
    assert packs(blocked_conv(1, 3, 6, 6, 8, 4)) == []


def test_pack_is_off_by_default_and_for_stored_configs_lacking_it(monkeypatch):
    space = SearchSpace(Task.from_op("matmul", (64, 64, 64)))
    assert space.default_config()["s0/pack/in1"] == 0
    stored = {k: v for k, v in space.default_config().items() if "/pack/" not in k}
    real_default = space.default_config
    monkeypatch.setattr(space, "default_config",
                        lambda: dict(real_default(), **{"s0/pack/in0": 1, "s0/pack/in1": 1}))
    full = space.validate(stored)
    assert full["s0/pack/in0"] == 0 and full["s0/pack/in1"] == 0      # legacy: the old schedule


def test_packed_matmul_reads_panels_and_keeps_argument_order():
    task = Task.from_op("matmul", (32, 16, 40))
    space = SearchSpace(task, threads=1)    # at 2 threads this small GEMM runs serially
    config = dict(space.default_config(), **{"s0/pack/in1": 1, "s0/tile/1": [1, 16]})
    sch, args = space.apply(config)
    assert [t.name for t in args] == ["A", "B", "C"]
    assert args[:2] == list(task.args[:2]) and args[2].shape == (32, 40)
    text = str(lower(sch, args, name="mm"))
    assert "allocate B_pack: float32[3, 16, 16]" in text     # ceil(40 / 16) panels of 16
    assert "B_pack[" in text and "parallel" in text


OPERATORS = [
    ("matmul", (7, 5, 37)),
    ("matmul", (1, 1, 37)),        # 37 > two 16-lane vectors: B is packable
    ("matmul", (13, 3, 29)),
    ("dense", (5, 6, 19)),
    ("dense", (1, 7, 23)),
    ("batch_matmul", (2, 3, 5, 19)),
    ("batch_matmul", (1, 1, 2, 41)),
    ("conv2d", (1, 2, 5, 5, 3, 3, 3, 1, 1)),
    ("conv2d", (1, 3, 7, 7, 5, 3, 3, 2, 0)),
]


@pytest.mark.parametrize("op_name,shape", OPERATORS)
def test_packed_configs_match_numpy(op_name, shape):
    task = Task.from_op(op_name, shape)
    space = SearchSpace(task)
    pack = {k.name: 1 for k in space.knobs if "/pack/" in k.name}
    assert pack, f"{op_name}{shape} offers no pack knob"
    rng = np.random.default_rng(len(shape))
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args[:-1]]
    want = _expected(op_name, shape, inputs)
    picker = random.Random(sum(shape))
    configs = [dict(space.default_config(), **pack)]
    configs += [dict(space.sample(picker), **pack) for _ in range(3)]
    for config in configs:
        sch, args = space.apply(config)
        kernel = build(lower(sch, args, name=task.name), target="native")
        out = np.full(task.args[-1].shape, np.nan, np.float32)
        kernel(*[a.copy() for a in inputs], out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=str(config))


def test_gemm_sized_anchors_pack_by_default_small_ones_do_not():
    # the vector operand's panel is packed; A is read as K-long row streams (blocks of K
    # up to 256, or about 128) and stays in place
    for shape, k_tile in [((256, 512, 256), 128), ((256, 128, 256), 128), ((64, 1024, 128), 128)]:
        config = SearchSpace(Task.from_op("matmul", shape)).default_config()
        assert config["s0/reduce/0"] == k_tile, shape
        assert config["s0/pack/in0"] == 0 and config["s0/pack/in1"] == 1, shape
    small = SearchSpace(Task.from_op("matmul", (16, 8, 24)))
    assert not any(v for k, v in small.default_config().items() if "/pack/" in k)

@pytest.mark.parametrize("frames,channels,size", [(8, 64, 14), (7, 80, 11), (3, 64, 13),
                                                  (2, 32, 1)])
def test_blocked_conv_over_a_batch_of_frames_copies_no_one_wide_panel(frames, channels, size):
    """A blocked 1x1 conv over a batch of images (a 3-D conv's frames): the batch axis
    indexes the input alone, so it is a pack candidate, but the register tile takes one
    image: a panel one wide would be a copy of the input in its own layout, and the default
    leaves it off. The default schedule still matches numpy."""
    from kiln import te
    from kiln.te.ops import conv2d_nchwc, pack_conv_weight_blocked

    x = te.placeholder((frames, channels // 16, size, size, 16), name="x")
    w = te.placeholder((2, channels // 16, 1, 1, 16, 16), name="w")
    y = conv2d_nchwc(x, w)
    task = Task("frames_conv", (y,), (x, w, y), "native")
    space = SearchSpace(task)
    config = space.default_config()
    packs = [a for a in space.anchors for p in a.packs if p.tensor.name == "x"]
    assert packs, "the batch axis should make the input a pack candidate"
    for anchor in space.anchors:
        label = space._stage_label(anchor.op)
        for pack in anchor.packs:
            if config[f"{label}/tile/{pack.axis_pos}"][1] == 1:
                assert config[pack.knob] == 0, pack.knob
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((frames, channels, size, size)).astype(np.float32)
    wn = rng.standard_normal((32, channels, 1, 1)).astype(np.float32)
    xb = np.ascontiguousarray(xn.reshape(frames, channels // 16, 16, size, size)
                              .transpose(0, 1, 3, 4, 2))
    wb = pack_conv_weight_blocked(wn, 16, 16)
    sch, args = space.apply(config)
    kernel = build(lower(sch, args, name=task.name), target="native")
    out = np.zeros(y.shape, np.float32)
    kernel(xb, wb, out)
    want = np.einsum("nchw,kc->nkhw", xn.astype(np.float64), wn[:, :, 0, 0].astype(np.float64))
    want = want.reshape(frames, 2, 16, size, size).transpose(0, 1, 3, 4, 2)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

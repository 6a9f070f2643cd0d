"""Search-space rules for channel-blocked (NCHWc) convs: the pad copy of a blocked input is
vectorised over its channel block (its NCHW counterpart is not: the padded axis is innermost),
and nested reduce axes get inner tiles within one register-tile step budget."""
from kiln import te
from kiln.autotune.space import (AT_ANCHOR, REDUCE_STEPS, ROOT_ROWS, SearchSpace, _is_copy_axis,
                                 _nested_reduce_tiles)
from kiln.autotune.task import Task
from kiln.schedule.lower import lower
from kiln.te import ops


def _pad_op(out):
    return next(t.op for t in out.op.input_tensors if t.op.name.endswith("_pad"))


def test_only_an_unpadded_innermost_axis_is_a_copy_axis():
    blocked = ops.depthwise_conv2d_nchwc(te.placeholder((1, 2, 9, 7, 8), name="X"),
                                         te.placeholder((2, 3, 3, 8), name="W"), 1, 1)
    plain = ops.depthwise_conv2d_nchw(te.placeholder((1, 16, 9, 7), name="X"),
                                      te.placeholder((16, 1, 3, 3), name="W"), 1, 1)
    assert _is_copy_axis(_pad_op(blocked))
    assert not _is_copy_axis(_pad_op(plain))


def test_the_blocked_pad_copy_is_vectorised_as_rows_and_at_the_anchor():
    task = Task.from_op("depthwise_conv2d_nchwc", (1, 16, 9, 7, 3, 3, 2, 1, 8))
    space = SearchSpace(task)
    knob = next(k for k in space.knobs if k.name.endswith("_pad/inline"))
    for mode in (ROOT_ROWS, AT_ANCHOR):
        config = dict(space.default_config(), **{knob.name: mode})
        sch, args = space.apply(config)
        text = str(lower(sch, args, name="k"))
        pad_loops = [line for line in text.splitlines() if "for i4 in" in line]
        assert pad_loops and all("vectorized" in line for line in pad_loops), (mode, text)


def test_nested_reduce_tiles_fill_the_step_budget_from_the_innermost_axis():
    x = te.placeholder((1, 32, 7, 7, 16), name="X")
    w3 = te.placeholder((2, 32, 3, 3, 16, 16), name="W")
    w1 = te.placeholder((2, 32, 1, 1, 16, 16), name="W1")
    conv3 = ops.conv2d_nchwc(x, w3, 1, 1)
    conv1 = ops.conv2d_nchwc(x, w1)
    assert _nested_reduce_tiles(conv3.op) == [1, 3, 3, 16]     # 144 steps
    assert _nested_reduce_tiles(conv1.op) == [16, 1, 1, 16]    # 256 steps
    plain = ops.conv2d_nchw(te.placeholder((1, 256, 14, 14), name="X"),
                            te.placeholder((64, 256, 3, 3), name="W"), 1, 1)
    tiles = _nested_reduce_tiles(plain.op)
    assert tiles[1:] == [3, 3] and 256 % tiles[0] == 0
    assert tiles[0] * 9 <= REDUCE_STEPS < 2 * tiles[0] * 9 * 2

"""Layout and indexing operators against numpy."""
import numpy as np
import pytest

from kiln import te
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops import tags


def _x(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape,newshape", [((2, 3, 4), (6, 4)), ((2, 3, 4), (4, -1)),
                                            ((5,), (1, 5, 1)), ((7, 1, 3), (3, 7)),
                                            ((2, 3, 5), (-1,))])
def test_reshape(run, rng, shape, newshape):
    X = te.placeholder(shape, name="X")
    Y = ops.reshape(X, newshape)
    assert Y.op.tag == tags.INJECTIVE
    x = _x(rng, shape)
    np.testing.assert_array_equal(run(Y, {X: x})[0], x.reshape(newshape))


def test_reshape_errors():
    X = te.placeholder((2, 3), name="X")
    with pytest.raises(TEError, match="tensor 'X'\\[2, 3\\] has 6 elements, the new shape "
                       "\\[4, 2\\] has 8"):
        ops.reshape(X, (4, 2))
    with pytest.raises(TEError, match="at most one -1"):
        ops.reshape(X, (-1, -1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 3])
def test_flatten(run, rng, axis):
    X = te.placeholder((2, 3, 5), name="X")
    x = _x(rng, (2, 3, 5))
    a = axis + 3 if axis < 0 else axis
    want = x.reshape(int(np.prod(x.shape[:a])), -1)
    np.testing.assert_array_equal(run(ops.flatten(X, axis), {X: x})[0], want)


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (0, -1, 1)])
def test_transpose(run, rng, axes):
    X = te.placeholder((2, 3, 5), name="X")
    x = _x(rng, (2, 3, 5))
    np.testing.assert_array_equal(run(ops.transpose(X, axes), {X: x})[0],
                                  np.transpose(x, axes))
    with pytest.raises(TEError, match="not a permutation"):
        ops.transpose(X, (0, 0, 1))


def test_squeeze_and_expand_dims(run, rng):
    X = te.placeholder((1, 3, 1, 2), name="X")
    x = _x(rng, X.shape)
    a, b, c, d = run([ops.squeeze(X), ops.squeeze(X, 2), ops.expand_dims(X, 1, 2),
                      ops.expand_dims(X, -1)], {X: x})
    np.testing.assert_array_equal(a, np.squeeze(x))
    np.testing.assert_array_equal(b, np.squeeze(x, 2))
    np.testing.assert_array_equal(c, x[:, None, None])
    np.testing.assert_array_equal(d, x[..., None])
    with pytest.raises(TEError, match="axes \\[1\\] of 'X'\\[1, 3, 1, 2\\] do not have size 1"):
        ops.squeeze(X, 1)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(run, rng, axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(e + i if d == axis % 3 else e for d, e in enumerate(s))
              for i, s in enumerate(shapes)]
    tensors = [te.placeholder(s, name=f"T{i}") for i, s in enumerate(shapes)]
    values = [_x(rng, s) for s in shapes]
    Y = ops.concatenate(tensors, axis)
    np.testing.assert_array_equal(run(Y, dict(zip(tensors, values)))[0],
                                  np.concatenate(values, axis))


def test_concatenate_errors():
    A = te.placeholder((2, 3), name="A")
    with pytest.raises(TEError, match="'B' float32\\[3, 3\\] does not match 'A' "
                       "float32\\[2, 3\\] outside axis 1"):
        ops.concatenate([A, te.placeholder((3, 3), name="B")], axis=1)


@pytest.mark.parametrize("begin,end,strides,axes", [
    ([1], [4], None, None),
    ([0, 1], [3, 6], [2, 2], None),
    ([-1], [-8], [-1], [1]),              # negative step walks back
    ([5], [None], [-2], [1]),
    ([None, 2], [None, 100], [-1, 3], [0, 1]),   # end clamps
    ([2], [1], [1], [0]),                 # empty
])
def test_strided_slice(run, rng, begin, end, strides, axes):
    X = te.placeholder((4, 7), name="X")
    x = _x(rng, (4, 7))
    key = [slice(None)] * 2
    for a, b, e, s in zip(axes or range(len(begin)), begin, end, strides or [1] * len(begin)):
        key[a] = slice(b, e, s)
    Y = ops.slice(X, begin, end, strides, axes)
    want = x[tuple(key)]
    assert Y.shape == want.shape
    if want.size:
        np.testing.assert_array_equal(run(Y, {X: x})[0], want)


def test_split(run, rng):
    X = te.placeholder((6, 5), name="X")
    x = _x(rng, (6, 5))
    parts = ops.split(X, 3, axis=0) + ops.split(X, [1, 3], axis=1)
    got = run(parts, {X: x})
    for value, want in zip(got, np.split(x, 3, axis=0) + np.split(x, [1, 3], axis=1)):
        np.testing.assert_array_equal(value, want)
    with pytest.raises(TEError, match="cannot be cut into 4 equal parts"):
        ops.split(X, 4)


def test_take_with_negative_indices(run, rng):
    X = te.placeholder((5, 4), name="X")
    I = te.placeholder((2, 3), "int64", name="I")
    x = _x(rng, (5, 4))
    i = np.array([[0, -1, 2], [4, -5, 1]], np.int64)
    rows, column = run([ops.take(X, I, axis=0), ops.take(X, -2, axis=1)], {X: x, I: i})
    np.testing.assert_array_equal(rows, np.take(x, i, axis=0))
    np.testing.assert_array_equal(column, x[:, -2])


def test_take_axis1_and_flat(run, rng):
    X = te.placeholder((3, 4), name="X")
    I = te.placeholder((5,), "int32", name="I")
    x = _x(rng, (3, 4))
    i = np.array([3, -4, 0, 1, -1], np.int32)
    by_axis, flat = run([ops.take(X, I, axis=1), ops.take(X, I)], {X: x, I: i})
    np.testing.assert_array_equal(by_axis, np.take(x, i, axis=1))
    np.testing.assert_array_equal(flat, np.take(x, i))


def test_gather_elements(run, rng):
    X = te.placeholder((3, 4), name="X")
    I = te.placeholder((2, 4), "int64", name="I")
    x = _x(rng, (3, 4))
    i = np.array([[0, 2, -1, 1], [2, 0, 1, -3]], np.int64)
    got, = run(ops.gather(X, I, axis=0), {X: x, I: i})
    np.testing.assert_array_equal(got, np.take_along_axis(x, np.where(i < 0, i + 3, i), 0))


def test_gather_nd(run, rng):
    X = te.placeholder((3, 4, 2), name="X")
    I = te.placeholder((5, 2), "int32", name="I")
    x = _x(rng, (3, 4, 2))
    i = np.array([[0, 0], [2, 3], [-1, 1], [1, -2], [0, 3]], np.int32)
    got, = run(ops.gather_nd(X, I), {X: x, I: i})
    np.testing.assert_array_equal(got, x[i[:, 0], i[:, 1]])
    with pytest.raises(TEError, match="must be in \\[1, 3\\]"):
        ops.gather_nd(X, te.placeholder((2, 4), "int32", name="J"))


def test_take_rejects_float_indices():
    X = te.placeholder((3,), name="X")
    with pytest.raises(TEError, match="take\\(\\): indices 'F' must be an integer tensor"):
        ops.take(X, te.placeholder((2,), name="F"))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad(run, rng, mode):
    X = te.placeholder((3, 4), name="X")
    x = _x(rng, (3, 4))
    Y = ops.pad(X, (2, 0), (1, 3), value=-7.0, mode=mode)
    assert Y.op.tag == tags.PAD and tags.is_injective(Y.op.tag)
    kwargs = {"constant_values": -7.0} if mode == "constant" else {}
    want = np.pad(x, ((2, 1), (0, 3)), mode=mode, **kwargs)
    np.testing.assert_array_equal(run(Y, {X: x})[0], want)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_pad_with_a_runtime_fill_tensor(run, rng, dtype):
    """The fill is a 0-d tensor read at run time (ONNX Pad's value from a graph input)."""
    X, V = te.placeholder((3, 5), dtype, name="X"), te.placeholder((), dtype, name="V")
    x = (_x(rng, (3, 5)) * 10).astype(dtype)
    Y = ops.pad(X, (1, 2), (2, 0), value=V)
    for fill in (-7, 3):
        v = np.array(fill, dtype)
        np.testing.assert_array_equal(run(Y, {X: x, V: v})[0],
                                      np.pad(x, ((1, 2), (2, 0)), constant_values=fill))


def test_pad_negative_crops(run, rng):
    X = te.placeholder((5, 4), name="X")
    x = _x(rng, (5, 4))
    np.testing.assert_array_equal(run(ops.pad(X, (-1, 1), (-2, 0)), {X: x})[0],
                                  np.pad(x[1:3], ((0, 0), (1, 0))))


def test_pad_errors():
    X = te.placeholder((3, 4), name="X")
    with pytest.raises(TEError, match="unknown mode 'wrap'; use one of constant, edge, reflect"):
        ops.pad(X, (1, 1), mode="wrap")
    with pytest.raises(TEError, match="reflect padding of 'X'\\[3, 4\\] needs every pad smaller"):
        ops.pad(X, (3, 0), mode="reflect")
    with pytest.raises(TEError, match="pad_before must list one int per dimension"):
        ops.pad(X, (1,))
    with pytest.raises(TEError, match=r"a tensor fill value must be 0-d float32, got 'V' "
                                      r"float32\[1\]"):
        ops.pad(X, (1, 1), value=te.placeholder((1,), name="V"))

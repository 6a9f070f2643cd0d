"""Reductions, softmax, layer norm and batch norm against numpy."""
import numpy as np
import pytest

from kiln import te
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops import tags

REDUCTIONS = {
    "sum": (ops.sum, np.sum),
    "mean": (ops.mean, np.mean),
    "max": (ops.max, np.max),
    "min": (ops.min, np.min),
    "prod": (ops.prod, np.prod),
    "l2_norm": (ops.l2_norm, lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis,
                                                                      keepdims=keepdims))),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ((0, 2), False),
                                           (-1, False), ((), False)])
def test_reductions(run, rng, name, axis, keepdims):
    build, expected = REDUCTIONS[name]
    X = te.placeholder((3, 5, 7), name="X")
    Y = build(X, axis=axis, keepdims=keepdims)
    x = rng.uniform(0.5, 1.5, X.shape).astype("float32")
    want = expected(x.astype(np.float64), axis=axis, keepdims=keepdims)
    assert Y.shape == np.shape(want)
    np.testing.assert_allclose(run(Y, {X: x})[0], want, rtol=1e-5)


def test_reduction_tag_and_int_max(run):
    X = te.placeholder((4, 3), "int32", name="X")
    Y = ops.max(X, axis=0)
    assert Y.op.tag == tags.REDUCTION
    x = np.array([[-5, 2, 9], [-7, 3, 1], [-9, -1, 0], [-6, 0, 2]], np.int32)
    np.testing.assert_array_equal(run(Y, {X: x})[0], x.max(axis=0))


def test_reduction_axis_errors():
    X = te.placeholder((3, 4), name="X")
    with pytest.raises(TEError, match="sum\\(\\): axis 2 is out of range for tensor 'X' with 2 "
                       "dimensions"):
        ops.sum(X, axis=2)
    with pytest.raises(TEError, match="repeat an axis"):
        ops.sum(X, axis=(1, -1))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((1,), -1), ((3, 17), -1), ((2, 5, 3), 1), ((4, 3), 0)])
def test_softmax_and_log_softmax(run, rng, shape, axis):
    X = te.placeholder(shape, name="X")
    x = (rng.standard_normal(shape) * 10).astype("float32")
    soft, log_soft = run([ops.softmax(X, axis), ops.log_softmax(X, axis)], {X: x})
    want = _softmax(x.astype(np.float64), axis)
    np.testing.assert_allclose(soft, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(log_soft, np.log(want), rtol=1e-5, atol=1e-5)


def test_softmax_is_stable_for_large_inputs():
    X = te.placeholder((3,), name="X")
    from kiln.te.reference import evaluate
    got, = evaluate(ops.softmax(X), {X: np.array([1000.0, 1000.0, -1000.0], np.float32)})
    np.testing.assert_allclose(got, [0.5, 0.5, 0.0], atol=1e-7)


def _layer_norm(x, gamma, beta, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    shape = [x.shape[d] if d in axes else 1 for d in range(x.ndim)]
    if gamma is not None:
        out = out * np.broadcast_to(gamma, [x.shape[d] for d in axes]).reshape(shape)
    if beta is not None:
        out = out + np.broadcast_to(beta, [x.shape[d] for d in axes]).reshape(shape)
    return out


@pytest.mark.parametrize("shape,axis,params", [
    ((4, 7), -1, "both"),
    ((2, 3, 5), (1, 2), "both"),
    ((2, 3, 5), (0, 2), "gamma"),
    ((3, 1), -1, "none"),
])
def test_layer_norm(run, rng, shape, axis, params):
    X = te.placeholder(shape, name="X")
    axes = tuple(a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis))
    inner = tuple(shape[d] for d in axes)
    G = te.placeholder(inner, name="gamma") if params in ("both", "gamma") else None
    B = te.placeholder(inner[-1:], name="beta") if params == "both" else None  # broadcasts
    x = (rng.standard_normal(shape) * 3 + 100).astype("float32")   # a large mean
    feeds = {X: x}
    g = b = None
    if G is not None:
        g = feeds[G] = rng.standard_normal(inner).astype("float32")
    if B is not None:
        b = feeds[B] = rng.standard_normal(inner[-1:]).astype("float32")
    Y = ops.layer_norm(X, G, B, axis=axis, eps=1e-5)
    want = _layer_norm(x.astype(np.float64), g, b, axes, 1e-5)
    np.testing.assert_allclose(run(Y, feeds)[0], want, rtol=1e-3, atol=1e-3)


def test_layer_norm_rejects_bad_gamma():
    X = te.placeholder((2, 5), name="X")
    with pytest.raises(TEError, match="layer_norm\\(\\): shapes cannot be broadcast together: "
                       "'g'\\[4\\], 'normalised dims'\\[5\\]"):
        ops.layer_norm(X, te.placeholder((4,), name="g"))


def test_batch_norm_inference(run, rng):
    X = te.placeholder((2, 3, 4, 5), name="X")
    params = [te.placeholder((3,), name=n) for n in ("mean", "var", "gamma", "beta")]
    x = rng.standard_normal(X.shape).astype("float32")
    mean, gamma, beta = (rng.standard_normal(3).astype("float32") for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype("float32")
    Y = ops.batch_norm_inference(X, *params, eps=1e-3)
    feeds = dict(zip([X] + params, [x, mean, var, gamma, beta]))
    c = (slice(None), None, None)
    want = (x - mean[c]) / np.sqrt(var[c] + 1e-3) * gamma[c] + beta[c]
    np.testing.assert_allclose(run(Y, feeds)[0], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(TEError, match="parameter 'mean'\\[3\\] must have shape \\[4\\]"):
        ops.batch_norm_inference(X, params[0], params[1], axis=2)


def test_tag_classification():
    assert tags.kind_of("injective,pad") == tags.INJECTIVE
    assert tags.is_injective(tags.PAD) and tags.is_injective(tags.BROADCAST)
    assert not tags.is_injective(tags.REDUCTION) and not tags.is_injective("pool,max")
    assert tags.is_complex(tags.CONV2D_NCHW) and tags.is_complex(tags.MATMUL)
    assert not tags.is_complex(tags.ELEMWISE) and tags.kind_of("") == ""

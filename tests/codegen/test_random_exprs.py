"""Hypothesis: random elementwise float32 expressions, vectorized vs numpy."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .cg_util import buf, elementwise
from kiln.codegen import build
from kiln.schedule.ir import ForKind
from kiln.te import expr as E

N = 13
_UNARY = {"neg": (lambda a: -a, np.negative), "abs": (E.abs, np.abs),
          "tanh": (E.tanh, np.tanh), "sig": (E.sigmoid, lambda x: 1 / (1 + np.exp(-x)))}
_BINARY = {"add": (E.add, np.add), "sub": (E.sub, np.subtract), "mul": (E.mul, np.multiply),
           "min": (E.minimum, np.minimum), "max": (E.maximum, np.maximum)}


def _tree(depth):
    leaf = st.one_of(st.sampled_from(["x", "y"]), st.floats(-2, 2, width=32).map(float))
    if depth == 0:
        return leaf
    sub = _tree(depth - 1)
    return st.one_of(leaf, st.tuples(st.sampled_from(sorted(_UNARY)), sub),
                     st.tuples(st.sampled_from(sorted(_BINARY)), sub, sub),
                     st.tuples(st.just("select"), sub, sub))


def _to_kiln(t, x, y):
    if isinstance(t, str):
        return x if t == "x" else y
    if isinstance(t, float):
        return E.const(t, "float32")
    args = [_to_kiln(a, x, y) for a in t[1:]]
    if t[0] == "select":  # the condition uses the inputs only, so rounding cannot flip it
        return E.select(x < y, args[0], args[1])
    return (_UNARY if len(args) == 1 else _BINARY)[t[0]][0](*args)


def _to_numpy(t, x, y):
    if isinstance(t, str):
        return x if t == "x" else y
    if isinstance(t, float):
        return np.float64(np.float32(t))
    args = [_to_numpy(a, x, y) for a in t[1:]]
    if t[0] == "select":
        return np.where(x < y, args[0], args[1])
    return (_UNARY if len(args) == 1 else _BINARY)[t[0]][1](*args)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_tree(3), kind=st.sampled_from([ForKind.VECTORIZED, ForKind.SERIAL]))
def test_random_expression_matches_numpy(tree, kind):
    X, Y, C = buf("X", "float32", [N]), buf("Y", "float32", [N]), buf("C", "float32", [N])
    f = elementwise("rnd", N, [X, Y], C, lambda x, y: E.cast(_to_kiln(tree, x, y), "float32")
                    if not isinstance(tree, float) else E.const(tree, "float32") + x * 0.0,
                    kind=kind)
    rng = np.random.default_rng(7)
    x, y = rng.uniform(-3, 3, N).astype(np.float32), rng.uniform(-3, 3, N).astype(np.float32)
    c = np.zeros(N, np.float32)
    build(f)(x, y, c)
    with np.errstate(all="ignore"):
        want = np.broadcast_to(_to_numpy(tree, x.astype(np.float64), y.astype(np.float64)),
                               (N,)) if not isinstance(tree, float) else np.full(N, tree)
    # float32 evaluation vs float64 reference: these ops are bounded, so errors stay small
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4, err_msg=str(tree))

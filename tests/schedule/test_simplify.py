"""The simplifier's rules, proved by evaluating before and after on every point of a range."""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.schedule.bound import const_interval, interval
from kiln.schedule.interpret import _Interp
from kiln.schedule.simplify import simplify
from kiln.te.expr import IntImm, Var, floordiv, floormod, maximum, minimum, select

x, y = Var("int32", "x"), Var("int32", "y")


def _evaluate(e, env):
    interp = _Interp({})
    interp.env = dict(env)
    return interp.ev(e)


CASES = [
    ((x * 32 + y) - x * 32, "y"),                       # cancellation
    (x * 1 + 0, "x"),                                   # x*1 + 0 -> x
    (x * 0 + y, "y"),                                   # x*0 -> 0
    (floordiv(x * 8 + 16, 8), "x + 2"),                 # floordiv(c*x + k, c)
    (floormod(x * 8 + y + 16, 8), "floormod(y, 8)"),    # floormod drops multiples of c
    (minimum(x + 1, x + 3), "x + 1"),                   # constant difference
    (maximum(x + 1, x + 3), "x + 3"),
    ((x + 2) * 3 - (x * 3 + 6), "0"),
    (select(x < x + 1, x, y), "x"),                     # provable comparison folds
    (floordiv(x * 8 + y + 17, 8), "x + floordiv(y + 1, 8) + 2"),   # multiples of c move out
    (floordiv(x, 4) * 12 + floormod(x, 4) * 3 + y, "y + x * 3"),   # a split index joined
]


@pytest.mark.parametrize("expr,expected", CASES)
def test_rule_result_and_equivalence(expr, expected):
    simplified = simplify(expr)
    assert str(simplified) == expected
    for xv, yv in itertools.product(range(-9, 10), range(-9, 10)):
        env = {x: xv, y: yv}
        assert _evaluate(simplified, env) == _evaluate(expr, env)


def test_identity_when_nothing_to_do():
    e = floordiv(x, y)
    assert simplify(e) is e


ints = st.integers(-6, 6)


@st.composite
def int_exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from([x, y, IntImm("int32", draw(ints))]))
    a, b = draw(int_exprs(depth - 1)), draw(int_exprs(depth - 1))
    op = draw(st.sampled_from(["add", "sub", "mul", "div", "mod", "min", "max"]))
    if op in ("div", "mod"):
        c = draw(st.integers(1, 5))
        return floordiv(a, c) if op == "div" else floormod(a, c)
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
            "min": lambda: minimum(a, b), "max": lambda: maximum(a, b)}[op]()


@settings(max_examples=200, deadline=None)
@given(int_exprs(), ints, ints)
def test_simplify_preserves_value(expr, xv, yv):
    env = {x: xv, y: yv}
    assert _evaluate(simplify(expr), env) == _evaluate(expr, env)


@settings(max_examples=200, deadline=None)
@given(int_exprs(), st.integers(0, 6), st.integers(0, 6))
def test_simplify_with_ranges_preserves_value(expr, xhi, yhi):
    """The range rules (a remainder known to lie in [0, c)) hold on every point."""
    simplified = simplify(expr, {x: (0, xhi), y: (0, yhi)})
    for xv in range(xhi + 1):
        for yv in range(yhi + 1):
            env = {x: xv, y: yv}
            assert _evaluate(simplified, env) == _evaluate(expr, env)


def test_reshape_of_a_reshape_reads_contiguously():
    """[4, 3136] read through a [4, 56, 56] view with a 64-wide split of the 3136 axis:
    the div/mod pairs of the two reshapes cancel to a plain linear index."""
    i1, io, ii = Var("int32", "i1"), Var("int32", "io"), Var("int32", "ii")
    flat = io * 64 + ii
    index = (i1 * 12544 + floormod(floordiv(i1 * 3136 + flat, 56), 56) * 56
             + floormod(flat, 56))
    assert str(simplify(index, {i1: (0, 3), io: (0, 48), ii: (0, 63)})) == \
        "i1 * 12544 + io * 64 + ii"


@settings(max_examples=200, deadline=None)
@given(int_exprs(), st.integers(0, 4), st.integers(0, 4))
def test_interval_contains_every_value(expr, xhi, yhi):
    bounds = const_interval(expr, {x: (0, xhi), y: (0, yhi)})
    if bounds is None:
        return
    for xv in range(xhi + 1):
        for yv in range(yhi + 1):
            assert bounds[0] <= _evaluate(expr, {x: xv, y: yv}) <= bounds[1]


def test_interval_keeps_fixed_vars_symbolic():
    lo, hi = interval(x * 32 + y, {y: (0, 31)})
    assert str(lo) == "x * 32" and str(hi) == "x * 32 + 31"

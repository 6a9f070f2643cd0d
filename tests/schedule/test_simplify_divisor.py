"""floordiv/floormod by c of g*y + r with g dividing c and r in [0, g): the rule that makes a
window partition (Reshape/Transpose chains, fused and split by a divisor of a row) read
contiguous vectors. Proved by evaluating before and after on every point of the ranges."""
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.schedule.interpret import _Interp
from kiln.schedule.simplify import simplify
from kiln.te.expr import FloorDiv, FloorMod, Var, floordiv, floormod

f, i, j = Var("int32", "f"), Var("int32", "i"), Var("int32", "j")


def _evaluate(e, env):
    interp = _Interp({})
    interp.env = dict(env)
    return interp.ev(e)


def _count(e, kind) -> int:
    n = int(type(e) is kind)
    for name in ("a", "b"):
        if hasattr(e, name):
            n += _count(getattr(e, name), kind)
    return n


def test_fused_vector_index_over_rows():
    """i + 48*f over rows of 96 (a 96-wide axis split by 48 and fused): the lane variable
    leaves every div and mod, so the vector load is contiguous."""
    flat = i + f * 48
    ranges = {i: (0, 47), f: (0, 1567)}
    assert str(simplify(floordiv(flat, 96), ranges)) == "floordiv(f, 2)"
    assert str(simplify(floormod(flat, 96), ranges)) == "floormod(f, 2) * 48 + i"
    assert str(simplify(floormod(floordiv(flat, 672), 7), ranges)) == \
        "floormod(floordiv(f, 14), 7)"


def test_no_rewrite_when_remainder_can_reach_the_divisor():
    """r in [0, 48] is not below g = 48: the expression keeps its division by 96."""
    e = floordiv(i + f * 48, 96)
    out = simplify(e, {i: (0, 48), f: (0, 9)})
    assert _count(out, FloorDiv) == 1 and "96" in str(out)
    for iv, fv in itertools.product(range(49), range(10)):
        assert _evaluate(out, {i: iv, f: fv}) == _evaluate(e, {i: iv, f: fv})


@settings(max_examples=300, deadline=None)
@given(g=st.integers(1, 12), n=st.integers(1, 7), a=st.integers(-3, 5), b=st.integers(-2, 3),
       k=st.integers(-40, 40), ihi=st.integers(0, 13), fhi=st.integers(0, 9),
       jhi=st.integers(0, 3), mod=st.booleans())
def test_divisor_split_preserves_value(g, n, a, b, k, ihi, fhi, jhi, mod):
    """floordiv/floormod(g*(a*f + b*j) + i + k, g*n) over awkward ranges (primes, 1,
    remainders that do and do not stay below g, negative coefficients and offsets)."""
    c = g * n
    x = (f * a + j * b) * g + i + k
    e = floormod(x, c) if mod else floordiv(x, c)
    ranges = {i: (0, ihi), f: (0, fhi), j: (0, jhi)}
    out = simplify(e, ranges)
    for iv, fv, jv in itertools.product(range(ihi + 1), range(fhi + 1), range(jhi + 1)):
        env = {i: iv, f: fv, j: jv}
        assert _evaluate(out, env) == _evaluate(e, env), (str(e), str(out), env)
    if 0 <= k < g and ihi + k < g and n > 1 and a > 0 and b >= 0:
        # the remainder stays in [0, g): i leaves the division
        assert not any(_uses(t, i) for t in _divisions(out))


def _divisions(e):
    if type(e) in (FloorDiv, FloorMod):
        yield e
    for name in ("a", "b"):
        if hasattr(e, name):
            yield from _divisions(getattr(e, name))


def _uses(e, var) -> bool:
    return e is var or any(_uses(getattr(e, name), var) for name in ("a", "b")
                           if hasattr(e, name))

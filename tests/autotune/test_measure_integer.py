"""The answer check of integer outputs: exact for integer-only DAGs (an int32 dot-product
accumulator off by one is wrong, however large the value), and one step at a rare near-tie for
outputs rounded from float math (a requantization), never more."""
from __future__ import annotations

import numpy as np

from kiln import te
from kiln.autotune.measure import ROUNDING_TIE_SHARE, MeasureOptions, compare_outputs
from kiln.autotune.task import Task
from kiln.te import expr as E
from kiln.te.ops.int8.core import matmul_int8x4
from kiln.te.tensor import placeholder

OPTIONS = MeasureOptions()


def _int_task():
    a, b = placeholder((7, 5), "int32", "a"), placeholder((5, 33), "int32", "b")
    return Task("matmul_int8x4", (c := matmul_int8x4(a, b),), (a, b, c))


def _requantize_task(n=4000):
    x = placeholder((n,), "float32", "x")
    y = te.compute((n,), lambda i: E.cast(te.round(x[i] * 0.5), "uint8"), name="q")
    return Task("quantize", (y,), (x, y))


def _check(task, got, want):
    arrays = [None] * len(task.args)
    arrays[task.output_positions[0]] = got
    return compare_outputs(task, arrays, [want], OPTIONS)


def test_integer_only_outputs_must_match_exactly():
    task = _int_task()
    want = np.full((7, 33), 100_000, np.int32)    # rtol 1e-3 would let 100 through
    assert _check(task, want.copy(), want) == ""
    got = want.copy()
    got[3, 4] += 1
    assert "differs from the reference at 1 of 231 points; first at (3, 4)" \
        in _check(task, got, want)


def test_rounded_outputs_may_differ_by_one_at_rare_ties_only():
    task = _requantize_task()
    want = np.arange(4000, dtype=np.int64).astype(np.uint8)
    ties = want.copy()
    allowed = int(ROUNDING_TIE_SHARE * want.size)
    ties[:allowed] += 1
    assert _check(task, ties, want) == ""
    more = want.copy()
    more[:allowed + 1] += 1                       # too many points off: a rounding bug
    assert "differs from the reference at" in _check(task, more, want)
    two = want.copy()
    two[7] += 2                                   # two steps: wrong
    assert "at 1 of 4000 points; first at (7,): got 9, expected 7" in _check(task, two, want)

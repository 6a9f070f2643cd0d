"""Node identities stay distinct across processes (te/uids.py)."""
import multiprocessing

import pytest

from kiln import te
from kiln.schedule.ir import Buffer
from kiln.te.expr import Var


def _new_uids() -> list[int]:
    a = te.placeholder((4,), "float32", name="A")
    b = te.compute((4,), lambda i: a[i] + 1.0, name="B")
    return [Var("x").uid, b.op.uid, Buffer("buf", "float32", (4,)).uid]


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork()")
def test_a_forked_worker_never_reuses_a_uid_the_parent_draws_after_the_fork():
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        pool.apply(int, (0,))                       # the worker is forked now
        parent = _new_uids() + _new_uids()
        child = pool.apply(_new_uids)
    assert not set(child) & set(parent), (child, parent)

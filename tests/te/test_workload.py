"""Workload keys: stable across processes, sensitive to shapes, dtypes and structure."""
import subprocess
import sys

import pytest

from kiln import te
from kiln.te import ops

_SCRIPT = """
from kiln import te
A = te.placeholder((64, 48), name="A")
B = te.placeholder((48, 32), name="B")
k = te.reduce_axis(48, "k")
C = te.compute((64, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
print(te.workload_key(C))
"""


def _matmul(m=64, n=32, k=48, dtype="float32", names=("A", "B", "C")):
    A = te.placeholder((m, k), dtype, name=names[0])
    B = te.placeholder((k, n), dtype, name=names[1])
    r = te.reduce_axis(k, "k")
    return te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name=names[2])


@pytest.mark.slow
def test_key_is_equal_in_two_processes():
    keys = []
    for seed in ("0", "12345"):  # different string-hash salts
        proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                              env={"PYTHONHASHSEED": seed, "PATH": ""}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        keys.append(proc.stdout.strip())
    assert keys[0] == keys[1]
    assert keys[0] == te.workload_key(_matmul())
    assert len(keys[0]) == 64


def test_separately_built_dags_share_a_key():
    assert te.workload_key(_matmul()) == te.workload_key(_matmul(names=("X", "Y", "Z")))


def test_key_changes_with_shape_dtype_and_structure():
    base = te.workload_key(_matmul())
    assert te.workload_key(_matmul(m=65)) != base
    assert te.workload_key(_matmul(k=47)) != base
    assert te.workload_key(_matmul(dtype="float64")) != base
    A = te.placeholder((64, 48), name="A")
    B = te.placeholder((48, 32), name="B")
    r = te.reduce_axis(48, "k")
    maxplus = te.compute((64, 32), lambda i, j: te.max(A[i, r] + B[r, j], axis=r))
    assert te.workload_key(maxplus) != base


def test_ops_library_keys_are_stable():
    def build():
        X = te.placeholder((1, 3, 17, 17), name="X")
        W = te.placeholder((8, 3, 3, 3), name="W")
        return ops.relu(ops.conv2d_nchw(X, W, stride=2, padding=1))
    assert te.workload_key(build()) == te.workload_key(build())


def test_shared_subexpressions_key_as_their_tree():
    # the canonical form serialises a shared node once and reuses it (te/workload._Canon):
    # the key must equal that of the same expression built as a tree of fresh nodes, and
    # still differ when one use of the shared node differs
    A = te.placeholder((16,), name="A")

    def build(share: bool, other: float = 2.0):
        def body(i):
            shared = A[i] * 2.0 + 1.0
            twin = shared if share else A[i] * 2.0 + 1.0
            third = shared if share and other == 2.0 else A[i] * other + 1.0
            return shared * twin + third
        return te.compute((16,), body, name="C")

    assert te.workload_key(build(True)) == te.workload_key(build(False))
    assert te.workload_key(build(True)) != te.workload_key(build(True, other=3.0))

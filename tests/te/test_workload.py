"""Workload keys: stable across processes, sensitive to shapes, dtypes and structure."""
import subprocess
import sys

import pytest

from kiln import te
from kiln.graph import models
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


def _json_text(outputs) -> str:
    import json
    return json.dumps(te.canonical_form(outputs), separators=(",", ":"))


def test_canonical_text_is_the_json_of_the_canonical_form_for_every_node_kind():
    """workload_key hashes text written directly (te/workload.canonical_text): it must be
    json.dumps of the canonical form byte for byte, or committed records lose their tasks."""
    from kiln.te import expr as E
    A = te.placeholder((5, 7), name="A")
    B = te.placeholder((7,), "int32", name="B")
    k = te.reduce_axis(7, "k")

    def body(i, j):
        cond = E.all_of(i > 0, E.logical_not(j.eq(3)))
        v = E.select(cond, A[i - 1, j] * -0.5, E.const(float("inf"), "float32"))
        return E.maximum(v, E.cast(B[j], "float32")) + te.exp(A[i, j])
    C = te.compute((5, 7), body, name="C")
    D = te.compute((5,), lambda i: te.sum(C[i, k] / 3.0, axis=[k], where=k < 6), name="D")
    M = te.compute((5,), lambda i: te.max(A[i, k], axis=[k]), name="M")
    E2 = te.compute((5,), lambda i: M[i] + E.cast(E.minimum(i, 2), "float32"), name="E")
    for outputs in ([C], [D], [D, E2], [E2, C]):
        assert te.canonical_text(outputs) == _json_text(outputs)


@pytest.mark.parametrize("build", [
    lambda: models.resnet50_like(image_size=32, base_width=8, num_classes=10),
    lambda: models.mobilenetv2_like(image_size=32, width_mult=0.25, num_classes=10, stages=3),
    lambda: models.bert_like_encoder(seq=8, hidden=32, heads=2, layers=1, vocab=50),
])
def test_canonical_text_matches_for_every_model_task(build):
    from kiln.graph.compile.model import model_tasks
    for mt in model_tasks(build()):
        outputs = list(mt.task.outputs)
        assert te.canonical_text(outputs) == _json_text(outputs), mt.name

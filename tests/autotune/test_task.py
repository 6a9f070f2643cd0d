"""Tasks: workload keys, FLOP counts, the operator builders and their error messages."""
import ast
import pathlib
import pickle

import pytest

from kiln import te
from kiln.autotune.task import OPERATORS, Task
from kiln.te.errors import TEError


def test_matmul_flops_count_multiply_add_as_two():
    assert Task.from_op("matmul", (4, 5, 6)).flops == 2 * 4 * 5 * 6


def test_conv_flops_are_dominated_by_the_reduction():
    task = Task.from_op("conv2d", (1, 3, 8, 8, 4, 3, 3, 1, 1))
    macs = 1 * 4 * 8 * 8 * 3 * 3 * 3
    assert 2 * macs <= task.flops < 2 * macs * 1.2   # plus the pad stage's select


def test_same_operator_same_key_different_shape_different_key():
    a, b = Task.from_op("matmul", (8, 8, 8)), Task.from_op("matmul", (8, 8, 8))
    assert a.workload_key == b.workload_key
    assert a.workload_key != Task.from_op("matmul", (8, 8, 16)).workload_key
    assert pickle.loads(pickle.dumps(a)).workload_key == a.workload_key


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_operator_builds_a_task_with_outputs_last(name):
    shapes = {"matmul": (4, 5, 6), "dense": (4, 5, 6), "batch_matmul": (2, 3, 4, 5),
              "conv2d": (1, 2, 6, 6, 3, 3, 3, 1, 1), "depthwise_conv2d": (1, 2, 6, 6, 3, 3),
              "softmax": (3, 7), "pooling": (1, 2, 6, 6, 2),
              "conv2d_nchwc": (1, 16, 6, 6, 8, 3, 3, 1, 1, 8, 8),
              "depthwise_conv2d_nchwc": (1, 16, 6, 6, 3, 3, 1, 1, 8),
              "conv2d_transpose": (1, 4, 5, 5, 4, 4, 4, 2, 1),
              "winograd_input_transform": (1, 16, 5, 5, 2),
              "winograd_batch_matmul": (1, 16, 5, 5, 16, 2),
              "winograd_output_transform": (1, 16, 5, 5, 4)}
    task = Task.from_op(name, shapes[name])
    assert task.args[-1] == task.outputs[0] and task.output_positions == (len(task.args) - 1,)
    assert task.flops > 0 and task.name.startswith(name)


def test_unknown_operator_lists_known_ones():
    with pytest.raises(TEError, match=r"unknown operator 'gemv'.*known: batch_matmul, conv2d"):
        Task.from_op("gemv", (4, 4))


def test_wrong_shape_arity_says_what_is_expected():
    with pytest.raises(TEError, match=r"operator 'matmul' got shape \(4, 4\).*\(M, K, N\)"):
        Task.from_op("matmul", (4, 4))


def test_args_must_contain_outputs_and_inputs():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(TEError, match=r"task 't': output\(s\) B are not in the kernel arguments"):
        Task("t", (B,), (A,))
    with pytest.raises(TEError, match=r"task 't': input 'A' is read but not in the kernel"):
        Task("t", (B,), (B,))


def test_autotune_imports_point_down_only():
    """autotune may import te, schedule and codegen, never graph or the top-level kiln API."""
    root = pathlib.Path(__file__).resolve().parents[2] / "autotune"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                top = (node.module or "").split(".")[0]
                assert top in ("te", "schedule", "codegen", ""), f"{path.name}: ..{node.module}"
                assert node.module or all(a.name in ("te", "schedule", "codegen")
                                          for a in node.names), f"{path.name}: upward import"

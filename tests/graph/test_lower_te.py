"""Every graph op through Kiln kernels (lower_te -> default schedule -> codegen) vs the numpy
reference executor, which the graph helper's tests hold to onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.graph.compile.model import compile_model, prepare_graph
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import Graph, Node, Value
from kiln.graph.lower_te import LOWERINGS, lower_group, lower_node
from kiln.graph.ops.core import OPS
from kiln.graph.passes.fusion import fuse_operators
from kiln.graph.reference import run_reference
from kiln.graph.compile.tasks import extract_tasks
from kiln.te.errors import UnsupportedOperatorError
from kiln.te.workload import workload_key

from .graph_helpers import make_model
from .test_onnx_ops import CASES

from onnx import helper


def _fast_cases() -> set[str]:
    """The first case of every distinct set of graph ops runs by default; the rest are slow."""
    seen, fast = set(), set()
    for name, (model, _) in CASES.items():
        ops = frozenset(n.op for n in load_onnx(model).nodes)
        if ops not in seen and not name.startswith("conv-") or name == "conv-plain":
            seen.add(ops)
            fast.add(name)
    return fast


_FAST = _fast_cases()
_PARAMS = [pytest.param(c, marks=() if c in _FAST else pytest.mark.slow) for c in CASES]


@pytest.mark.parametrize("case", _PARAMS, ids=list(CASES))
def test_op_kernels_match_reference(case):
    model, feeds = CASES[case]
    compiled = compile_model(model)
    want = run_reference(load_onnx(model), feeds)
    got = compiled.run(feeds)
    assert len(got) == len(want)
    for g, (name, w) in zip(got, want.items()):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_every_graph_op_has_a_lowering():
    assert sorted(set(OPS) - set(LOWERINGS)) == []


def _two_convs(seed_a: int, seed_b: int):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * seed_a
    w2 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * seed_b
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    return make_model(nodes, {"x": ((1, 4, 6, 6), "float32")}, ["y"], {"w1": w1, "w2": w2})


def test_groups_with_different_weights_share_one_task():
    graph, groups = prepare_graph(_two_convs(1, 2))
    keys = [workload_key(list(lower_group(g, graph.constants).outputs)) for g in groups]
    assert len(groups) == 2 and keys[0] == keys[1]
    tasks, per_group = extract_tasks(graph, groups)
    assert len(tasks) == 1 and tasks[0].weight == 2.0
    assert tasks[0].groups == tuple(g.name for g in groups)
    # the weights are kernel arguments, so one kernel serves both groups correctly
    compiled = compile_model(_two_convs(1, 2))
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    want = run_reference(graph, [x])["y"]
    np.testing.assert_allclose(compiled.run([x])[0], want, rtol=1e-4, atol=1e-5)
    assert len({s.kernel for s in compiled.plan.steps}) == 1


def test_scalar_constants_become_immediates():
    nodes = [helper.make_node("Div", ["x", "s"], ["d"], name="div"),
             helper.make_node("Mul", ["d", "h"], ["y"], name="mul")]
    model = make_model(nodes, {"x": ((2, 3), "float32")}, ["y"],
                       {"s": np.float32(4.0), "h": np.float32(0.5)})
    graph, groups = prepare_graph(model)
    dag = lower_group(groups[0], graph.constants)
    assert [v.name for v in dag.inputs] == ["x"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(compile_model(model).run([x])[0], x / 4 * 0.5)


def test_unknown_graph_op_is_reported_by_node():
    x = Value("x", (2,), "float32")
    node = Node("fft", (x,), (Value("y", (2,), "float32"),), name="fft_0")
    with pytest.raises(UnsupportedOperatorError, match=r"node 'fft_0'.*'fft'.*supported:"):
        lower_node(node, [None])


def test_integer_div_truncates_toward_zero():
    nodes = [helper.make_node("Div", ["a", "b"], ["y"], name="div")]
    a = np.array([7, -7, 7, -7, 6, -6], dtype=np.int64)
    b = np.array([2, 2, -2, -2, 3, 3], dtype=np.int64)
    model = make_model(nodes, {"a": a, "b": b}, [("y", "int64")])
    got = compile_model(model).run({"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, np.array([3, -3, -3, 3, 2, -2]))

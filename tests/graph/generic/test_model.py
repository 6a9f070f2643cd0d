"""GenericModel: planning, running, errors (graph/generic/model.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic
from kiln.graph.generic.lowering import Unsupported
from kiln.te.errors import KernelArgumentError
from tests.graph.graph_helpers import make_model
from tests.graph.generic.helpers import assert_generic_matches_ort, fast_groups


def _relu_reshape(shape):
    n = int(np.prod(shape))
    return make_model([helper.make_node("Relu", ["x"], ["r"]),
                       helper.make_node("Reshape", ["r", "s"], ["y"])],
                      {"x": (shape, "float32")}, ["y"],
                      inits={"s": np.array([n], np.int64)})


@pytest.mark.parametrize("shape", [(1,), (3, 37), (2, 16), (1, 1, 17), (4, 1023)])
def test_relu_reshape_matches_onnxruntime(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    assert_generic_matches_ort(_relu_reshape(shape), {"x": x})


def test_runs_repeat_on_fresh_inputs(rng):
    gm = compile_generic(_relu_reshape((5, 7)), Target.native(), 2)
    for _ in range(3):
        x = rng.standard_normal((5, 7)).astype(np.float32)
        np.testing.assert_array_equal(gm.run([x])[0], np.maximum(x, 0).reshape(-1))


def test_wrong_input_shape_names_the_input():
    gm = compile_generic(_relu_reshape((5, 7)), Target.native(), 2)
    with pytest.raises(KernelArgumentError, match="input 'x'.*expected float32\\[5, 7\\]"):
        gm.run([np.zeros((5, 8), np.float32)])


def test_an_op_without_generic_kernel_is_named():
    model = make_model([helper.make_node("Det", ["x"], ["y"])], {"x": ((3, 3), "float32")},
                       ["y"])
    with pytest.raises(Unsupported, match="det"):
        compile_generic(model, Target.native(), 1)


def _relu_det_model(copies: int):
    nodes, outs = [helper.make_node("Relu", ["x"], ["r"])], []
    for k in range(copies):
        nodes.append(helper.make_node("Det", ["r"], [f"d{k}"]))
        outs.append(f"d{k}")
    return make_model(nodes, {"x": ((2, 3, 3), "float32")}, outs)


def test_uncovered_groups_run_on_kernels_compiled_for_them(rng):
    calls = []
    gm = compile_generic(_relu_det_model(2), Target.native(), 2, fast_groups(calls=calls))
    assert len(calls) == 1 and len(calls[0]) == len(gm.uncovered) >= 1
    assert "compiled: " in gm.summary() and gm.calls      # relu stays generic
    assert set(gm.kernel_tiers().values()) == {"generic", "fast"}
    x = rng.standard_normal((2, 3, 3)).astype(np.float32)
    got = gm.run([x])
    want = np.linalg.det(np.maximum(x, 0))
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


def test_too_many_uncovered_groups_are_unsupported():
    calls = []
    with pytest.raises(Unsupported, match="fused groups have no generic kernels"):
        compile_generic(_relu_det_model(6), Target.native(), 2, fast_groups(calls=calls))
    assert not calls


def test_blocks_are_reused_but_never_while_a_view_of_them_is_read(rng):
    """a = relu(x); v = reshape(a); c = relu(a); d = relu(c); e = relu(v): a's block must
    outlive a's last direct read while its view v is still to be read; c's block can serve
    a later value."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "s"], ["v"]),
             helper.make_node("Relu", ["a"], ["c"]),
             helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Relu", ["d"], ["d2"]),
             helper.make_node("Relu", ["v"], ["e"])]
    model = make_model(nodes, {"x": ((4, 33), "float32")}, ["d2", "e"],
                       inits={"s": np.array([132], np.int64)})
    gm = compile_generic(model, Target.native(), 2)
    x = rng.standard_normal((4, 33)).astype(np.float32)
    d2, e = gm.run([x])
    np.testing.assert_array_equal(d2, np.maximum(x, 0))
    np.testing.assert_array_equal(e, np.maximum(x, 0).reshape(-1))
    blocks = {c.arrays[-1].__array_interface__["data"][0] for c in gm.calls}
    assert len(blocks) < len(gm.calls)          # some output block served twice


def test_a_block_returns_to_the_pool_only_when_no_live_value_views_it():
    from kiln.graph.generic.lowering import ALIGNMENT, _BlockPool
    pool = _BlockPool()
    a = pool.take((4, 33), np.dtype(np.float32))
    assert a.ctypes.data % ALIGNMENT == 0
    view = a.reshape(-1)
    pool.hold(a)
    pool.hold(view)
    pool.drop(a)                                  # the view is still to be read
    b = pool.take((4, 33), np.dtype(np.float32))
    assert not np.shares_memory(a, b)
    pool.drop(view)
    c = pool.take((132,), np.dtype(np.float32))   # now a's block serves
    assert np.shares_memory(a, c)
    d = pool.take((1000,), np.dtype(np.float32))  # too big for any free block
    assert not np.shares_memory(d, a) and not np.shares_memory(d, b)


def test_outputs_that_view_inputs_keep_their_own_values(rng):
    """Regression (found by the random-graph property test): an output that is a view of a
    graph input (reshape) had its input's block handed to another value."""
    model = make_model([helper.make_node("Reshape", ["x1", "s"], ["r"]),
                        helper.make_node("Relu", ["x2"], ["t"])],
                       {"x1": ((1,), "float32"), "x2": ((1,), "float32")}, ["t", "r"],
                       inits={"s": np.array([1], np.int64)})
    gm = compile_generic(model, Target.native(), 2)
    t, r = gm.run({"x1": np.array([1.0], np.float32), "x2": np.array([2.0], np.float32)})
    assert t[0] == 2.0 and r[0] == 1.0


def test_an_input_that_decides_a_shape_is_pinned_and_checked(rng):
    """Reshape's shape from a graph input: compiled for a value (constants=), run checks it
    (and fills it in when it is left out), as a CompiledModel does."""
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Reshape", ["r", "shape"], ["y"])],
                       {"x": ((4, 6), "float32"), "shape": ((2,), "int64")}, ["y"])
    shape = np.array([3, 8], np.int64)
    gm = compile_generic(model, Target.native(), 2, constants={"shape": shape})
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = np.maximum(x, 0).reshape(3, 8)
    np.testing.assert_array_equal(gm.run({"x": x, "shape": shape})[0], want)
    np.testing.assert_array_equal(gm.run([x])[0], want)          # left out: filled in
    with pytest.raises(KernelArgumentError, match="input 'shape'.*decides a shape"):
        gm.run({"x": x, "shape": np.array([8, 3], np.int64)})


def test_small_calls_run_on_one_thread_and_large_ones_on_the_pool(rng):
    """A call under SERIAL_BYTES takes the one-thread copy of its kernel (a fork and join
    would cost more than it saves); a large call of the same kernel keeps the model's count."""
    from kiln.graph.generic import model as model_mod
    small, large = (3, 37), (512, 1024)         # 2 x 444 bytes; 2 x 2 MiB
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"])]
    model = make_model(nodes, {"a": (small, "float32"), "b": (large, "float32")}, ["ra", "rb"])
    gm = compile_generic(model, Target.native(), 2)
    assert model_mod._call_bytes(gm.calls[0]) < model_mod.SERIAL_BYTES
    assert model_mod._call_bytes(gm.calls[1]) >= model_mod.SERIAL_BYTES
    (serial,) = gm.serial_kernels.values()
    (pooled,) = gm.kernels.values()          # one name: the model lists the pool's copy
    assert serial is not pooled and (serial.num_threads, pooled.num_threads) == (1, 2)
    gm.set_num_threads(1)
    gm.set_num_threads(2)
    assert (serial.num_threads, pooled.num_threads) == (1, 2)
    a, b = rng.standard_normal(small).astype(np.float32), rng.standard_normal(large).astype(
        np.float32)
    ra, rb = gm.run([a, b])
    np.testing.assert_array_equal(ra, np.maximum(a, 0))
    np.testing.assert_array_equal(rb, np.maximum(b, 0))

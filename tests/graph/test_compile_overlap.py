"""The compile's serial start overlapped with its workers: tasks handed to the workers as
they are found (parallel_build.StreamingBuild), the Winograd weights computed while they
work (graph/deferred.py), the ONNX file checked where it lies (frontend.load_onnx)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

from kiln.graph import models
from kiln.graph.compile import parallel_build
from kiln.graph.compile.model import compile_model, prepare_graph
from kiln.graph.deferred import DeferredArray, resolve_pending
from kiln.graph.compile.tasks import extract_tasks
from kiln.codegen.target import Target
from kiln.te.errors import KilnError, ModelFormatError
from kiln.te.ops import unpack_conv_weight_blocked
from kiln.te.ops.winograd import pack_winograd_weight

needs_linker = pytest.mark.skipif(not parallel_build.can_fork_workers(),
                                  reason="no C compiler driver to link with")


def test_deferred_array_knows_its_shape_and_computes_once():
    calls = []

    def make(a, b):
        calls.append(1)
        return np.full((2, 3), a + b, np.float32)
    d = DeferredArray((2, 3), "float32", make, 1, 2)
    assert (d.shape, d.dtype, d.ndim, d.size, d.nbytes) == ((2, 3), np.float32, 2, 6, 24)
    assert not d.ready and calls == []
    assert resolve_pending() >= 1 and d.ready and calls == [1]
    np.testing.assert_array_equal(np.ascontiguousarray(d, dtype=np.float64), np.full((2, 3), 3.0))
    np.testing.assert_array_equal(np.asarray(d), np.full((2, 3), 3, np.float32))
    assert calls == [1] and resolve_pending() == 0


def test_deferred_array_that_breaks_its_promise_says_so():
    d = DeferredArray((4,), "float32", lambda: np.zeros(5, np.float32))
    with pytest.raises(KilnError, match=r"computed float32\[5\], not the float32\[4\]"):
        np.asarray(d)


def test_winograd_weights_are_deferred_and_exact():
    model = models.resnet18_like(image_size=32, base_width=16, num_classes=10)
    graph, _ = prepare_graph(model)
    deferred = {k: v for k, v in graph.constants.items() if isinstance(v, DeferredArray)}
    assert deferred and not any(v.ready for v in deferred.values())
    name, u = next(iter(deferred.items()))
    # the conv weight it came from: the same value, transformed on the spot
    m = u.shape[0] - 2
    assert np.asarray(u).shape == u.shape and u.ready
    assert u._args == ()        # computed: the inputs it was computed from are dropped
    assert name.endswith(f"/winograd{m}")


def test_winograd_weight_value_matches_the_transform_of_its_conv_weight():
    model = models.resnet18_like(image_size=32, base_width=16, num_classes=10)
    graph, _ = prepare_graph(model)
    u = next(v for v in graph.constants.values() if isinstance(v, DeferredArray))
    packed, m, block = u._args
    want = pack_winograd_weight(unpack_conv_weight_blocked(packed), m, block)
    got = np.asarray(u)
    assert got.dtype == want.dtype and np.array_equal(got, want)


class _Recorder:
    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def __call__(self, mt):
        self.seen.append((mt.name, self.inner.started))
        self.inner.add(mt)


@needs_linker
def test_workers_start_while_tasks_are_still_being_found(monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    model = models.default_cnn(image_size=16, width=8)
    graph, groups = prepare_graph(model)
    from kiln.graph.compile.model import _build_task
    from kiln.autotune.dispatch import select_record
    with parallel_build.StreamingBuild(Target.native(), 2, _build_task,
                                       lambda mt: select_record(mt.task, "native", None, 1),
                                       1) as stream:
        rec = _Recorder(stream)
        tasks, _ = extract_tasks(graph, groups, Target.native(), on_task=rec)
        kernels, sources, stats = stream.finish()
    assert len(tasks) > 2 and [n for n, _ in rec.seen] == [t.name for t in tasks]
    # the pool started with the second task, before the third was found
    assert [s for _, s in rec.seen[:3]] == [False, False, True]
    assert sorted(kernels) == sorted(t.name for t in tasks)
    assert set(sources.values()) == {"default"} and stats["workers"] in (1, 2)


def test_finish_before_two_tasks_is_an_error():
    with parallel_build.StreamingBuild(Target.native(), 2, None, lambda mt: None, 1) as stream:
        with pytest.raises(KilnError, match="fewer than two tasks"):
            stream.finish()


def _two_winograd_convs() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(
        np.float32), name=f"w{k}") for k in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 5, 7])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@needs_linker
def test_streamed_compile_with_deferred_weights_matches_the_serial_one(monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    model = _two_winograd_convs()
    parallel = compile_model(model, jobs=2, db=None)
    assert any("winograd" in op for s in parallel.plan.steps for op in s.ops)
    assert parallel.plan.meta["compile"]["workers"] in (1, 2)
    serial = compile_model(model, jobs=1, db=None)
    x = np.random.default_rng(1).standard_normal((1, 32, 5, 7)).astype(np.float32)
    np.testing.assert_array_equal(serial.run([x])[0], parallel.run([x])[0])
    import onnxruntime as ort
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(parallel.run([x])[0], want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())


def test_an_invalid_model_file_is_still_checked(tmp_path):
    """The checker reads the file itself when the model was not changed on loading."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    # an input name no node or graph input defines: invalid
    graph = helper.make_graph([helper.make_node("Relu", ["missing"], ["y"])], "g", [x], [y])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelFormatError, match=r"bad\.onnx is invalid"):
        compile_model(str(path), db=None)

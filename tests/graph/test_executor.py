"""CompiledModel: list/dict inputs, input checks, memory plan, aliases, export and reload."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.graph import models
from kiln.graph.compile.model import compile_model
from kiln.graph.runtime.executor import load_compiled
from kiln.te.errors import KernelArgumentError, ModelFormatError

from .graph_helpers import ort_run


@pytest.fixture(scope="module")
def cnn():
    model = models.default_cnn(image_size=12, width=8)
    return model, compile_model(model)


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)


def test_list_and_dict_inputs_match_onnxruntime(cnn, image):
    model, compiled = cnn
    want = ort_run(model, {"input": image})[0]
    by_list = compiled.run([image])[0]
    by_dict = compiled.run({"input": image})[0]
    np.testing.assert_allclose(by_list, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(by_dict, by_list)


def test_outputs_are_fresh_arrays(cnn, image):
    _, compiled = cnn
    first = compiled.run([image])[0]
    kept = first.copy()
    compiled.run([image * 2])
    np.testing.assert_array_equal(first, kept)


def test_non_contiguous_input_is_accepted(cnn, image):
    _, compiled = cnn
    strided = np.asfortranarray(image)
    np.testing.assert_array_equal(compiled.run([strided])[0], compiled.run([image])[0])


def test_wrong_shape_names_the_input(cnn, image):
    _, compiled = cnn
    with pytest.raises(KernelArgumentError, match=r"input 'input'.*float32\[1, 3, 12, 12\].*"
                                                  r"float32\[1, 3, 12, 13\]"):
        compiled.run([np.zeros((1, 3, 12, 13), np.float32)])


def test_wrong_dtype_names_the_input(cnn, image):
    _, compiled = cnn
    with pytest.raises(KernelArgumentError, match=r"input 'input'.*got float64.*astype"):
        compiled.run({"input": image.astype(np.float64)})


def test_unknown_missing_and_extra_inputs(cnn, image):
    _, compiled = cnn
    with pytest.raises(KernelArgumentError, match=r"no input named 'img'.*inputs are input"):
        compiled.run({"img": image})
    with pytest.raises(KernelArgumentError, match=r"input 'input'.*was not given"):
        compiled.run({})
    with pytest.raises(KernelArgumentError, match=r"takes 1 inputs \(input\), got 2"):
        compiled.run([image, image])


def test_memory_plan_reuses_the_arena(cnn):
    _, compiled = cnn
    plan = compiled.plan
    arena = [b for b in plan.buffers if b.kind == "arena"]
    assert len(arena) >= 5
    assert 0 < plan.arena_bytes < plan.naive_bytes
    # the flatten/reshape before the Gemm is a view, not a kernel
    assert any(b.kind == "alias" for b in plan.buffers)
    assert len(plan.aliases) == 1 and "reshape" in plan.aliases[0]


def test_profile_and_benchmark_cover_every_kernel(cnn):
    _, compiled = cnn
    rows = compiled.profile(repeat=2)
    assert [r["name"] for r in rows[:-1]] == [s.group for s in compiled.plan.steps]
    assert rows[-1]["name"] == "(python overhead)"
    assert all(r["ms"] >= 0 for r in rows) and sum(r["share"] for r in rows) <= 1.0 + 1e-9
    assert compiled.benchmark(repeat=2) > 0


def test_summary_lists_groups_and_sources(cnn):
    _, compiled = cnn
    text = compiled.summary()
    assert "0 from the database" in text
    for step in compiled.plan.steps:
        assert step.group in text and step.source == "default"


def test_export_and_load_compiled_give_same_outputs(cnn, image, tmp_path):
    _, compiled = cnn
    path = compiled.export(tmp_path / "cnn.so")
    loaded = load_compiled(path)
    np.testing.assert_array_equal(loaded.run([image])[0], compiled.run([image])[0])
    assert loaded.plan == compiled.plan


def test_load_compiled_reports_missing_files(tmp_path):
    with pytest.raises(ModelFormatError, match=r"nothing\.so\.plan\.json does not exist"):
        load_compiled(tmp_path / "nothing.so")


def test_native_call_sequence_matches_kernel_by_kernel_calls(cnn, image):
    """run() makes one native call that runs every kernel on the plan's fixed buffers; the
    result is the kernel-by-kernel result (checked calls through Python), bit for bit."""
    from kiln.graph.runtime.executor import CompiledModel
    _, compiled = cnn
    assert compiled._sequence is not None
    assert compiled._sequence.calls == len(compiled.plan.steps)
    checked = CompiledModel(compiled.plan, compiled.kernels,
                            {n: compiled.buffers[n] for n, s in compiled._specs.items()
                             if s.kind == "constant"}, checked_calls=True)
    assert checked._sequence is None
    for scale in (1.0, -2.0):
        np.testing.assert_array_equal(compiled.run([image * scale])[0],
                                      checked.run([image * scale])[0])


def test_call_sequence_rejects_null_addresses():
    from kiln.codegen.sequence import CallSequence
    from kiln.te.errors import CodegenError
    with pytest.raises(CodegenError, match="at least one call"):
        CallSequence([])
    with pytest.raises(CodegenError, match="call 0 .* null"):
        CallSequence([(0, [1])])

"""The fixed costs of a cold compile: tier 1's kernels built several to an LLVM module
(graph/compile/fast_batch.py), the compile workers forked before the graph passes and building
the thread-pool runtime (parallel_build.StreamingBuild(early=True))."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import llvmlite.binding as llvm
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.codegen import jit
from kiln.codegen.target import Target
from kiln.graph import models
from kiln.graph.compile import fast_batch, parallel_build, tiers
from kiln.graph.compile.model import compile_model, model_tasks
from kiln.te.errors import UnsupportedOperatorError

needs_workers = pytest.mark.skipif(not parallel_build.can_fork_workers(),
                                   reason="no worker processes here")


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")


def _cnn(tmp_path) -> str:
    # odd sizes: 13x13 images, 12 channels (not a multiple of the vector width), 7 classes
    path = str(tmp_path / "cnn.onnx")
    onnx.save(models.default_cnn(image_size=13, width=12, num_classes=7), path)
    return path


def _ort(path: str, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _close(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


@pytest.fixture(scope="module")
def cnn_tasks(tmp_path_factory):
    path = _cnn(tmp_path_factory.mktemp("cnn"))
    return path, model_tasks(path, Target.native())


def test_a_batch_shares_one_object_and_each_kernel_matches_its_own_module(cnn_tasks, rng):
    """Three tasks to one module: one object file for the three, loaded once, and every
    kernel computes what the same task built alone (its own module) computes."""
    _, tasks = cnn_tasks
    target = Target.native()
    batch = tasks[:3]
    built = fast_batch.build_fast_batch(batch, target, threads=1)
    assert [name for name, *_ in built] == [mt.name for mt in batch]
    assert {source for _, _, source, *_ in built} == {tiers.FAST_SOURCE}
    objects = [(name, obj) for name, obj, *_ in built]
    assert len({id(obj.object_code) for _, obj in objects}) == 1
    together = parallel_build.link_and_load(objects, target, 1)
    alone = parallel_build.link_and_load(
        [(mt.name, tiers.build_fast_task(mt, target, None, threads=1)[0]) for mt in batch],
        target, 1)
    for mt in batch:
        args = [rng.standard_normal(p.shape).astype(p.dtype) if not p.written
                else np.zeros(p.shape, p.dtype) for p in together[mt.name].params]
        again = [a.copy() for a in args]
        together[mt.name](*args)
        alone[mt.name](*again)
        for a, b in zip(args, again):
            np.testing.assert_array_equal(a, b)


@needs_workers
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_tiered_model_of_batched_kernels_matches_onnxruntime(tmp_path, rng, jobs,
                                                               monkeypatch):
    """7 tasks: batches of 4 and 3, in workers (jobs=2) or in this process (jobs=1)."""
    monkeypatch.setenv("KILN_GENERIC_TIER", "0")    # the fast tier, not the generic one
    path = _cnn(tmp_path)
    m = kiln.compile(path, db=None, jobs=jobs, tiered=True)
    assert m.tier == tiers.FAST and len(m.kernels) == 7 > fast_batch.BATCH
    x = rng.standard_normal((1, 3, 13, 13)).astype(np.float32)
    _close(m.run(x), _ort(path, x))
    stats = m.plan.meta["compile"]
    assert sorted(stats["kernel_cpu_s"]) == sorted(m.kernels)
    _close(m.optimized(timeout=120).run(x), _ort(path, x))


def test_optimize_takes_a_parsed_module():
    """codegen.jit.optimize on a ModuleRef (fast_batch's linked module) gives what it gives
    on the module's text."""
    text = textwrap.dedent("""\
        define void @twice(float* noalias %a, i64 %n) {
        entry:
          br label %loop
        loop:
          %i = phi i64 [0, %entry], [%j, %loop]
          %p = getelementptr float, float* %a, i64 %i
          %v = load float, float* %p
          %w = fadd float %v, %v
          store float %w, float* %p
          %j = add i64 %i, 1
          %c = icmp slt i64 %j, %n
          br i1 %c, label %loop, label %exit
        exit:
          ret void
        }
        """)
    target = Target.native()
    from_text = str(jit.optimize(text, target, "o1"))
    from_ref = str(jit.optimize(llvm.parse_assembly(text), target, "o1"))
    assert from_ref == from_text and "fadd" in from_ref


def _one_matmul(tmp_path, n: int = 1, k: int = 31, m: int = 13) -> str:
    """One MatMul: a model of a single task (prime sizes)."""
    w = onnx.numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((k, m)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m])], [w])
    path = str(tmp_path / "one.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@needs_workers
@pytest.mark.parametrize("tiered", [False, True])
def test_a_one_task_model_compiles_in_the_early_pool(tmp_path, rng, tiered):
    path = _one_matmul(tmp_path)
    m = compile_model(path, db=None, jobs=2, tiered=tiered, cache_model=False)
    assert len(m.kernels) == 1
    x = rng.standard_normal((1, 31)).astype(np.float32)
    _close(m.run([x]), _ort(path, x))


@needs_workers
def test_a_model_that_fails_to_load_leaves_no_worker_behind(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"])], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = str(tmp_path / "bad.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    before = set(multiprocessing.active_children())
    with pytest.raises(UnsupportedOperatorError, match="NoSuchOp"):
        compile_model(path, db=None, jobs=2, cache_model=False)
    # (a worker told to stop may take a moment to be reaped on a loaded machine: CI
    # 2026-11-29 21:23 UTC saw one still listed right after the compile raised)
    deadline = time.monotonic() + 10
    while set(multiprocessing.active_children()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(multiprocessing.active_children()) <= before


_RUNTIME_PROBE = """
import os, sys
import numpy as np
from kiln.codegen import runtime
from kiln.graph import models
from kiln.graph.compile.model import compile_model
built_in = []
real = runtime._compile_runtime
def recorded(*args):
    built_in.append(os.getpid())
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\\n")
    return real(*args)
runtime._compile_runtime = recorded
m = compile_model(models.mlp(batch=2, sizes=(37, 29, 11)), db=None, jobs=2, threads=2,
                  cache_model=False)
assert runtime.pool_loaded()
m.run(m._example_inputs())
print(os.getpid())
"""


@needs_workers
def test_the_thread_pool_runtime_is_built_in_a_worker(tmp_path):
    """In a fresh process (the pool is per process): a parallel compile's runtime is compiled
    once, in a worker, not in the parent."""
    record = tmp_path / "built_by"
    proc = subprocess.run([sys.executable, "-c", _RUNTIME_PROBE, str(record)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KILN_CACHE_DIR": "off",
                               "KILN_GENERIC_DIR": "off",   # (it keeps the pool's code too)
                               "KILN_PARALLEL_RUNTIME": "kiln"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    parent = int(proc.stdout.strip().splitlines()[-1])
    builders = [int(line) for line in record.read_text().split()]
    assert len(builders) == 1 and builders[0] != parent

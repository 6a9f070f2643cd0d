"""Parallel kernel compilation: worker-built kernels equal the in-process ones."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.graph import models
from kiln.graph.compile.model import compile_model
from kiln.graph.runtime.executor import load_compiled
from kiln.graph.compile.parallel_build import linker
from kiln.te.errors import KilnError

needs_linker = pytest.mark.skipif(linker() is None, reason="no C compiler driver to link with")


@pytest.fixture(scope="module")
def serial_and_parallel():
    model = models.default_cnn(image_size=16, width=8)
    with pytest.MonkeyPatch.context() as mp:    # both compiles build their kernels
        mp.setenv("KILN_CACHE_DIR", "off")
        return compile_model(model, jobs=1), compile_model(model, jobs=2)


@needs_linker
def test_parallel_kernels_are_the_serial_kernels(serial_and_parallel):
    serial, parallel = serial_and_parallel
    assert sorted(serial.kernels) == sorted(parallel.kernels) and len(serial.kernels) > 2
    for name, kernel in serial.kernels.items():
        other = parallel.kernels[name]
        assert other.params == kernel.params
        assert other.llvm_ir() == kernel.llvm_ir(), name   # same optimized LLVM IR
        assert other.ir() == kernel.ir()
    inputs = serial._example_inputs()
    for a, b in zip(serial.run(inputs), parallel.run(inputs)):
        np.testing.assert_array_equal(a, b)
    assert (serial.plan.steps, serial.plan.buffers) == (parallel.plan.steps,
                                                        parallel.plan.buffers)
    assert serial.plan.meta["compile"]["workers"] == 1
    assert parallel.plan.meta["compile"]["workers"] in (1, 2)   # a fast worker may take all


@needs_linker
def test_parallel_model_exports_and_loads(serial_and_parallel, tmp_path):
    serial, parallel = serial_and_parallel
    parallel.export(tmp_path / "model.so")
    loaded = load_compiled(tmp_path / "model.so")
    inputs = serial._example_inputs()
    np.testing.assert_array_equal(loaded.run(inputs)[0], serial.run(inputs)[0])


def test_jobs_must_be_positive():
    with pytest.raises(KilnError, match=r"jobs=0.*must be >= 1"):
        compile_model(models.mlp(sizes=(8, 4)), jobs=0)


def _compile_in_daemon(queue) -> None:
    compiled = compile_model(models.mlp(sizes=(12, 8, 4)), jobs=2)
    queue.put((compiled.plan.meta["compile"]["workers"],
               compiled.run(compiled._example_inputs())[0]))


def test_a_daemonic_worker_compiles_serially():
    """multiprocessing daemons may not fork children: compile falls back to one process."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_compile_in_daemon, args=(queue,), daemon=True)
    proc.start()
    proc.join(timeout=120)               # the result is a few bytes: the queue cannot block
    assert proc.exitcode == 0
    workers, got = queue.get(timeout=10)
    assert workers == 1
    here = compile_model(models.mlp(sizes=(12, 8, 4)), jobs=1)
    np.testing.assert_array_equal(got, here.run(here._example_inputs())[0])

"""Shared helpers for tests: random inputs, running a schedule, comparing with numpy."""
from __future__ import annotations

import numpy as np

import kiln
from kiln.te import dtype as dt


def random_array(shape, dtype="float32", rng=None, low=-1.0, high=1.0) -> np.ndarray:
    rng = rng or np.random.default_rng(0)
    if dt.is_float(dtype):
        return rng.uniform(low, high, size=shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -50), min(info.max, 50), size=shape).astype(dtype)


def run_schedule(sch, args, inputs: list[np.ndarray], target="native") -> list[np.ndarray]:
    """Build `sch` for `args`, feed `inputs` (the leading args) and return the outputs."""
    kernel = kiln.build(sch, args, target=target)
    outs = [np.zeros(t.shape, dtype=t.dtype) for t in args[len(inputs):]]
    kernel(*inputs, *outs)
    return outs


def assert_matches(actual, expected, dtype="float32", rtol=None, atol=None):
    if dt.is_float(dtype):
        rtol = 1e-5 if rtol is None else rtol
        atol = 1e-5 if atol is None else atol
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(actual, expected)


def matmul_dag(m, k, n, dtype="float32"):
    A = kiln.te.placeholder((m, k), dtype, name="A")
    B = kiln.te.placeholder((k, n), dtype, name="B")
    r = kiln.te.reduce_axis((0, k), name="k")
    C = kiln.te.compute((m, n), lambda i, j: kiln.te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def task_inputs(task, seed: int = 0, low: float = -1.0, high: float = 1.0) -> dict:
    """Uniform random arrays for every input tensor of an autotune Task."""
    rng = np.random.default_rng(seed)
    return {t: rng.uniform(low, high, t.shape).astype(t.dtype)
            for t in task.args if t not in task.outputs}


def run_config(task, space, config, inputs: dict, compiled: bool = True) -> list[np.ndarray]:
    """The task's outputs under one search-space config: compiled with LLVM, or run by the
    loop-IR interpreter. Outputs start as NaN so a point the kernel never writes shows."""
    from kiln.codegen import build
    from kiln.schedule.interpret import interpret
    from kiln.schedule.lower import lower
    sch, args = space.apply(config)
    func = lower(sch, args, name="k")
    arrays = [inputs[t].copy() if t in inputs else np.full(t.shape, np.nan, t.dtype)
              for t in args]
    if compiled:
        build(func, target="native")(*arrays)
    else:
        interpret(func, *arrays)
    return [arrays[p] for p in task.output_positions]


def knob(space, stage: str, rest: str) -> str:
    """The name of knob `rest` ("tile/2", "inline", ...) of the stage this test's DAG calls
    `stage` (knob names are positions, s<k>/..., so tests look them up by op name)."""
    ops = [o for o in space.ops if o.name == stage]
    assert len(ops) == 1, f"{len(ops)} stages named {stage!r}: {[o.name for o in space.ops]}"
    return f"{space.stage_label(ops[0])}/{rest}"


def pack_knob(space, stage: str, tensor: str) -> str:
    """The pack knob of input `tensor` (by name) of the stage named `stage`."""
    anchor = next(a for a in space.anchors if a.op.name == stage)
    return next(p.knob for p in anchor.packs if p.tensor.name == tensor)


def vector_gemm_schedule(c, lanes: int):
    """A schedule of the 2-D reduction `c`: columns split by `lanes` and vectorized inside
    the reduction loop (i, j_outer, k, j_inner); `lanes` 0 leaves the naive loop nest."""
    import kiln
    s = kiln.create_schedule(c)
    if lanes:
        i, j = c.op.axis
        jo, ji = s[c].split(j, lanes)
        s[c].reorder(i, jo, c.op.reduce_axis[0], ji)
        s[c].vectorize(ji)
    return s


def finishes_in_child(target, args: tuple, seconds: float) -> bool:
    """Run target(*args) in a forked child; True if it exited cleanly within `seconds`
    (a child still running is killed). For regressions that used to hang the process (an
    LLVM pass in exponential time): such a test fails instead of hanging the suite."""
    import multiprocessing
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(seconds)
    if child.is_alive():
        child.kill()
        child.join()
        return False
    return child.exitcode == 0


def numpy_conv_nchwc(x, wt, stride, pad):
    """conv2d_nchwc in numpy: x blocked [N, C / bi, H, W, bi] with w[F / bo, C / bi, R, S, bi,
    bo], or NCHW [N, C, H, W] with w[F / bo, C, R, S, bo]."""
    if x.ndim == 4:
        x, wt = x[..., None], wt[:, :, :, :, None, :]
    n, cb, h, w, bi = x.shape
    fo, _, r, s, _, bo = wt.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    out = np.zeros((n, fo, oh, ow, bo), np.float64)
    for ry in range(r):
        for rx in range(s):
            win = xp[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride, :]
            out += np.einsum("ncyxi,fcio->nfyxo", win, wt[:, :, ry, rx], optimize=True)
    return out

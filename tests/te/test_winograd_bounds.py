"""The Winograd input transform reads only inside its input: its zero padding is a select
whose discarded value was once loaded from up to a row before (or after) the buffer.

Each case runs in a child process with the input placed right after, then right before, an
inaccessible page (mprotect PROT_NONE), so any read outside it crashes the child; the
outputs at both placements must equal those from an ordinary array. Built twice: with the
plain schedule and with the search space's default (vectorised, transform axes unrolled),
the one a model compile uses."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kiln import te
from kiln.te.ops import winograd as W
from kiln.te.reference import evaluate
from kiln.te.visit import walk

CHILD = textwrap.dedent("""
    import ctypes, json, mmap, sys
    import numpy as np
    import kiln
    from kiln import codegen, te
    from kiln.autotune.dispatch import Selection, apply_selection
    from kiln.autotune.space import SearchSpace
    from kiln.autotune.task import Task
    from kiln.schedule import lower
    from kiln.te.ops import winograd as W

    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    out_json = []
    for case in json.loads(sys.argv[1]):
        m, h, w, pads, b = case
        X = te.placeholder((1, 1, h, w, b), name="X")
        V = W.winograd_input_transform(X, m, tuple(pads))
        plain = kiln.build(kiln.create_schedule([V]), [X, V], target="native")
        sch, args, _ = apply_selection(SearchSpace(Task("wi", (V,), (X, V))), Selection(None))
        default = codegen.build(lower(sch, args, name="wi"), target="native")
        n = h * w * b
        region = mmap.mmap(-1, 4 * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        for page in (0, 3):
            assert libc.mprotect(ctypes.c_void_p(base + page * PAGE), PAGE, 0) == 0
        x = np.random.default_rng(0).standard_normal((1, 1, h, w, b)).astype(np.float32)
        results = []
        for kernel in (plain, default):
            want = np.zeros(V.shape, np.float32)
            kernel(x.copy(), want)
            for off in (PAGE, 3 * PAGE - 4 * n):   # right after / right before a guard page
                xa = np.frombuffer(region, np.float32, n, off).reshape(x.shape)
                xa[...] = x
                got = np.zeros(V.shape, np.float32)
                kernel(xa, got)
                assert np.array_equal(got, want), (case, off)
            results.append(want.tolist())
        out_json.append(results)
    print(json.dumps(out_json))
""")

CASES = [  # m, H, W, (top, left, bottom, right), block
    (4, 1, 1, (1, 1, 1, 1), 8),      # one pixel: every read but one is padding
    (4, 5, 5, (1, 1, 1, 1), 8),      # crashed before the clamp (a row before the buffer)
    (2, 3, 4, (2, 0, 1, 1), 8),      # crashed before the clamp (past the end)
    (2, 5, 3, (0, 0, 0, 0), 8),      # no padding: the last tile's crop only
]


def test_input_transform_reads_stay_inside_the_input():
    import json
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (f"child exited with {proc.returncode} (-11: a read outside "
                                  f"the input):\n{proc.stderr[-2000:]}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, outputs in zip(CASES, results, strict=True):
        m, h, w, pads, b = case
        X = te.placeholder((1, 1, h, w, b), name="X")
        V = W.winograd_input_transform(X, m, pads)
        x = np.random.default_rng(0).standard_normal((1, 1, h, w, b)).astype(np.float32)
        (ref,) = evaluate([V], {X: x})
        for got in outputs:
            np.testing.assert_allclose(np.array(got, np.float32), ref, rtol=1e-5, atol=1e-5)


def test_clamped_reads_keep_the_workload_key():
    """The clamp is a tag lowering honours, not part of the expression: committed tuning
    records of the transforms (keyed by the expression) still apply."""
    from kiln.autotune.task import Task
    X = te.placeholder((1, 4, 56, 56, 16), name="X")
    V = W.winograd_input_transform(X, 4, 1)
    assert "clamp_reads" in V.op.tag.split(",")
    # ResNet-50's first Winograd input transform, as keyed in tuning_logs/kiln.db
    assert Task("t", (V,), (X, V)).workload_key == (
        "31d5c7d7c33d90e20dca0ed2afaec3f92366c45aa131ed38d99c0076d82ff866")

"""The loop-IR pipeline (schedule/passes): every loop IR -> loop IR pass in one PIPELINE, the
LOWER stage ending lower() and the CODEGEN stage run for a CPU before translation, each pass
printed by KILN_DUMP_IR."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.codegen import Target
from kiln.codegen import masked_tail
from kiln.codegen.emit_module import emit_module, fastmath_flags, register_file_bytes
from kiln.schedule.passes import (CODEGEN, LOWER, PIPELINE, PassOptions, run_passes)

CODEGEN_PASSES = ["promote register tiles", "split tails", "remove unit loops",
                  "branch uniform selects"]


def _tiled_add(n: int = 13):
    """A vectorised add over n (prime) elements in tiles of 8: a guarded tail tile."""
    a = te.placeholder((n,), "float32", "a")
    b = te.placeholder((n,), "float32", "b")
    c = te.compute((n,), lambda i: a[i] + b[i], name="c")
    s = kiln.create_schedule(c)
    outer, inner = s[c].split(c.op.axis[0], 8)
    s[c].vectorize(inner)
    return s, [a, b, c]


def test_pipeline_holds_every_pass_in_order():
    names = [(p.stage, p.name) for p in PIPELINE]
    assert names == [(LOWER, "simplify"), (LOWER, "drop trivial guards")] + \
        [(CODEGEN, n) for n in CODEGEN_PASSES]


def test_dump_shows_each_pass_of_both_stages(tmp_path, monkeypatch):
    path = tmp_path / "ir.txt"
    monkeypatch.setenv("KILN_DUMP_IR", str(path))
    s, args = _tiled_add()
    func = kiln.lower(s, args, name="tiled_add")
    emit_module(func, Target.from_string("llvm -mcpu=znver3"), fastmath_flags(("contract",)),
                parallel="serial")
    text = path.read_text()
    headers = [line for line in text.splitlines() if line.startswith("--- after ")]
    assert headers == ["--- after build loop nests ---", "--- after simplify ---",
                       "--- after drop trivial guards ---"] + \
        [f"--- after {n} ---" for n in CODEGEN_PASSES]
    assert text.count("tiled_add") >= len(headers)


def test_emit_module_translates_what_the_codegen_stage_gives(monkeypatch):
    """emit_module runs the CODEGEN stage for its target and nothing else: with those passes
    replaced by the identity, its LLVM IR is the translation of the lowered function."""
    s, args = _tiled_add()
    func = kiln.lower(s, args, name="tiled_add")
    target = Target.from_string("llvm -mcpu=znver3")
    seen = []
    real = run_passes

    def spy(f, stage, options=PassOptions(), **kw):
        seen.append((stage, options))
        return real(f, stage, options, **kw)

    monkeypatch.setattr("kiln.codegen.emit_module.run_passes", spy)
    emit_module(func, target, fastmath_flags(("contract",)), parallel="serial")
    assert seen == [(CODEGEN, PassOptions(register_file_bytes(target), masked_tail.ENABLED))]


def test_run_passes_rejects_a_wrong_stage_or_missing_options():
    s, args = _tiled_add()
    func = kiln.lower(s, args)
    with pytest.raises(ValueError, match="stage 'llvm'"):
        run_passes(func, "llvm")
    with pytest.raises(ValueError, match="register_file_bytes"):
        run_passes(func, CODEGEN)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_kernels_through_the_pipeline_match_numpy(n):
    s, args = _tiled_add(n)
    f = kiln.build(s, args, target="native")
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    c = np.empty(n, np.float32)
    f(a, b, c)
    np.testing.assert_array_equal(c, a + b)

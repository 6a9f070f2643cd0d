"""onnx's backend node tests through Kiln's ONNX backend (kiln.backend), one test per onnx
case module (an operator), against the committed list of cases Kiln does not pass.

A test fails when a case outside the list fails, when a listed case passes (shrink the list)
or fails differently (an "unsupported" case that now gives a wrong answer). Regenerate the list
with `python -m tests.onnx_node.update_expected` after adding operators.
"""
from __future__ import annotations

import pytest

from . import runner

EXPECTED = runner.read_expected()
MODULES = [m for m in runner.case_modules() if not m.rsplit(".", 1)[-1].startswith("_")]


def test_list_names_known_modules():
    unknown = sorted(set(EXPECTED.by_module) - set(MODULES))
    assert not unknown, f"expected_failures.txt lists modules onnx does not have: {unknown}"


def test_list_has_no_wrong_answers():
    """A wrong answer is a bug to fix, never an accepted failure."""
    wrong = [name for cases in EXPECTED.by_module.values() for name, r in cases.items()
             if r.status == "wrong"]
    assert not wrong, f"expected_failures.txt accepts wrong answers: {wrong}"


# modules whose cases take minutes to compile, run in parts that pytest-xdist's workers share
PARTS = {"attention": 8, "softmax_cross_entropy_loss": 3, "averagepool": 2, "lppool": 2,
         "rmsnormalization": 2, "layernormalization": 2, "maxpool": 2,
         "negativeloglikelihoodloss": 2}
CASE_PARTS = [pytest.param(m, p, id=m if PARTS.get(m, 1) == 1 else f"{m}-{p}")
              for m in MODULES for p in range(PARTS.get(m, 1))]


def test_parts_name_known_modules():
    assert set(PARTS) <= set(MODULES), sorted(set(PARTS) - set(MODULES))


@pytest.mark.parametrize("module, part", CASE_PARTS)
def test_node_cases(module, part):
    parts = PARTS.get(module, 1)
    cases = runner.module_cases(module)
    mine = {c.name for c in cases[part::parts]}
    every = {c.name for c in cases}
    # this part's listed cases, and (in part 0) listed names the module no longer has
    expected = {name: r for name, r in EXPECTED.module(module).items()
                if name in mine or (part == 0 and name not in every)}
    results = [runner.run_kiln(case) for case in cases[part::parts]]
    problems = runner.compare(results, expected)
    assert not problems, (
        f"onnx {runner.onnx.__version__} node cases of '{module}' (list made with onnx "
        f"{EXPECTED.onnx_version}) differ from tests/onnx_node/expected_failures.txt:\n  "
        + "\n  ".join(problems) + "\nIf the change is intended, regenerate the list: "
        "python -m tests.onnx_node.update_expected")

"""The ONNX converter registry: one converter per op type, registered once and explicitly
(graph/onnx/registry.py, graph/onnx/converters.py), and every registered op exercised by a
test.

An op counts as tested when onnx's backend node cases build a node of it (the node suite,
tests/onnx_node, runs every case and fails on a failure it does not expect) or when a test
under tests/ names it as a string (a node it builds). A converter added without either fails
here, naming its module.
"""
from __future__ import annotations

import re
from pathlib import Path

import onnx.backend.test.case.node as node_cases
import pytest

import kiln.graph  # noqa: F401 - registers every converter
from kiln.graph.onnx import converters
from kiln.graph.onnx.registry import (CONVERTERS, DuplicateConverterError, converter,
                                      module_of, register, registered)

TESTS = Path(__file__).resolve().parent.parent
QUOTED = re.compile(r"""["']([A-Za-z][A-Za-z0-9]*)["']""")


def _quoted_names(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        names.update(QUOTED.findall(path.read_text(errors="replace")))
    return names


def test_second_registration_raises_naming_both_modules():
    before = registered()
    with pytest.raises(DuplicateConverterError) as info:
        register("Relu", lambda ctx, x: x, "tests.graph.somewhere")
    assert "kiln.graph.onnx.core" in str(info.value)
    assert "tests.graph.somewhere" in str(info.value) and "'Relu'" in str(info.value)
    with pytest.raises(DuplicateConverterError, match="kiln.graph.onnx.converters"):
        converter("Conv")(lambda ctx, x, w: x)   # the decorator too
    assert registered() == before


def test_converters_cannot_be_overwritten_in_place():
    with pytest.raises(TypeError):
        CONVERTERS["Relu"] = lambda ctx, x: x   # the old way of wrapping a converter
    assert module_of("Relu") == "kiln.graph.onnx.core"


def test_every_converter_module_is_in_the_one_list():
    modules = {m.__name__ for m in converters.MODULES} | {converters.__name__}
    by_module = set(registered().values())
    assert by_module <= modules, sorted(by_module - modules)


def test_ops_of_several_forms_dispatch_on_rank_in_one_converter():
    """Conv, ConvTranspose and the pools have one converter each, composed in converters.py
    from the forms of core.py (4-D), spatial.py (3-D) and conv3d.py/pool3d.py (5-D)."""
    for op in ("Conv", "ConvTranspose", "AveragePool", "MaxPool"):
        assert module_of(op) == "kiln.graph.onnx.converters", op


def test_every_registered_op_is_covered_by_a_test():
    table = registered()
    assert set(table) == set(CONVERTERS)
    in_node_suite = _quoted_names(Path(node_cases.__file__).parent)
    in_tests = _quoted_names(TESTS)
    rows, missing = [], []
    for op, module in sorted(table.items()):
        name = op.rsplit(".", 1)[-1]   # com.microsoft.QGemm: the node names QGemm
        by = ("onnx node suite" if name in in_node_suite else
              "tests/" if name in in_tests else None)
        rows.append(f"{op:40s} {module:36s} {by or 'NOT TESTED'}")
        if by is None:
            missing.append(f"{op} ({module})")
    print("\n".join(rows))
    assert len(rows) > 150
    assert not missing, ("converters no test builds a node of (add a test, or onnx has "
                         f"cases for it under another name): {missing}")

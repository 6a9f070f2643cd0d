"""GEMMs whose column count the vector does not divide (attention over 17 tokens, linears
of 20 or 36 outputs): their default kernels match numpy, batched and with constant weights,
and no partial vector is left to run lane by lane (schedule/passes/tails.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.autotune.dispatch import Selection, apply_selection, canonical_target
from kiln.autotune.space.rules import SearchSpace
from kiln.codegen import Target, masked_tail
from kiln.codegen.emit_module import register_file_bytes
from kiln.graph.compile.model import compile_model, prepare_graph
from kiln.graph.compile.tasks import extract_tasks
from kiln.schedule import lower
from kiln.schedule.ir import For, ForKind, IfThenElse
from kiln.schedule.analysis import free_vars
from kiln.schedule.passes import CODEGEN, PassOptions, run_passes
from kiln.schedule.visitor import StmtVisitor

from .graph_helpers import make_model

RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _matmuls(cases, const):
    """One model of independent MatMuls x_i @ w_i (w_i an initializer when `const`)."""
    nodes, inputs, inits, outputs = [], {}, {}, []
    for i, (x_shape, w_shape) in enumerate(cases):
        inputs[f"x{i}"] = _rand(*x_shape)
        (inits if const else inputs)[f"w{i}"] = _rand(*w_shape)
        nodes.append(helper.make_node("MatMul", [f"x{i}", f"w{i}"], [f"y{i}"]))
        outputs.append(f"y{i}")
    return make_model(nodes, inputs, outputs, inits), inputs, inits


def _check(cases, const):
    model, inputs, inits = _matmuls(cases, const)
    got = compile_model(model, db=None, jobs=1, threads=1).run(inputs)
    for i, y in enumerate(got):
        want = np.matmul(inputs[f"x{i}"], (inits | inputs)[f"w{i}"])
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=str(cases[i]))


def test_batched_matmuls_with_column_tails_match_numpy():
    """Runtime operands (attention scores @ V): 17 = 16 + 1, 20, 36, 12, 3, 1 columns."""
    _check([((16, 64, 64), (16, 64, 17)), ((3, 13, 33), (3, 33, 20)),
            ((2, 7, 9), (2, 9, 36)), ((5, 31, 16), (5, 16, 12)),
            ((1, 11, 5), (1, 5, 3)), ((2, 3, 17), (2, 17, 1))], const=False)


def test_constant_weights_with_column_tails_match_numpy():
    """Linears with a constant weight (prepacked panels), over batched and 2-D inputs."""
    _check([((16, 64, 64), (64, 17)), ((3, 13, 33), (33, 20)), ((2, 7, 9), (9, 36)),
            ((29, 47), (47, 23)), ((1, 1, 19), (19, 37))], const=True)


class _LaneGuards(StmtVisitor):
    """Vector loops whose body is a guard on their own lane (run lane by lane by codegen)."""

    def __init__(self):
        self.found = []

    def visit_For(self, loop: For) -> None:
        if (loop.kind is ForKind.VECTORIZED and isinstance(loop.body, IfThenElse)
                and loop.loop_var in free_vars(loop.body.cond)):
            self.found.append(loop)
        self.visit(loop.body)


@pytest.mark.skipif(masked_tail.ENABLED, reason="masked partial vectors: guards stay")
@pytest.mark.parametrize("x_shape,w_shape,const", [
    ((16, 64, 64), (16, 64, 17), False),
    ((16, 64, 64), (64, 20), True),
])
def test_no_partial_vector_runs_lane_by_lane(x_shape, w_shape, const):
    model, _, _ = _matmuls([(x_shape, w_shape)], const)
    target = canonical_target("native")
    graph, groups = prepare_graph(model)
    (task,) = [mt.task for mt in extract_tasks(graph, groups, target)[0]]
    sch, args, _ = apply_selection(SearchSpace(task.retargeted(target), 1), Selection(None))
    func = lower(sch, args, name="k")
    before = _LaneGuards()
    before(func.body)
    assert before.found, "the default schedule has no column tail: the test lost its case"
    options = PassOptions(register_file_bytes(Target.from_string(target)))
    body = run_passes(func, CODEGEN, options).body
    after = _LaneGuards()
    after(body)
    assert not after.found

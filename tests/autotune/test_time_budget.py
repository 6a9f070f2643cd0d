"""Tuning with a time budget: the task scheduler stops at the deadline (a trial in flight may
finish), spends the time where the model's latency is, and a rerun resumes from the log."""
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.autotune.database import Database
from kiln.autotune.dispatch import canonical_target
from kiln.autotune.scheduler import tune_tasks
from kiln.autotune.task import Task
from kiln.te.errors import KilnError


def two_matmuls() -> onnx.ModelProto:
    """A small task (3x8 @ 8x5 + Relu) and one far larger (97x200 @ 200x131), weight 1 each."""
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
          for n, s in (("w_small", (8, 5)), ("w_big", (200, 131)))]
    nodes = [helper.make_node("MatMul", ["a", "w_small"], ["h"]),
             helper.make_node("Relu", ["h"], ["y_small"]),
             helper.make_node("MatMul", ["b", "w_big"], ["y_big"])]
    graph = helper.make_graph(
        nodes, "two_matmuls",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [97, 200])],
        [helper.make_tensor_value_info("y_small", TensorProto.FLOAT, [3, 5]),
         helper.make_tensor_value_info("y_big", TensorProto.FLOAT, [97, 131])], ws)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow
def test_time_budget_stops_in_time_and_follows_latency(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    db = Database(tmp_path / "t.db")
    stamps: list[float] = []
    budget = 15.0
    begun = []          # the scheduler's clock starts once its measurement worker is up
    # (no confirmation or in-model check: the loop alone has the budget, whose end it keeps)
    reports = kiln.tune(two_matmuls(), db=db, time_budget=budget, batch_size=1, search="random",
                        confirm=None, model_check=False,
                        callback=lambda p: (stamps.append(time.perf_counter()),
                                            begun.append(stamps[-1] - p.elapsed)))
    end = time.perf_counter()
    assert stamps, "no trial was measured"
    start = begun[0]
    # the longest gap between two finished trials bounds one trial (with its proposal)
    one_trial = max(b - a for a, b in zip([start] + stamps, stamps))
    assert end - start <= budget + one_trial + 2.0, (end - start, one_trial)   # + close
    assert stamps[-1] - start >= budget * 0.5, "stopped long before the budget ran out"
    from kiln.graph.compile.model import model_tasks
    flops = {mt.task.workload_key: mt.task.flops for mt in model_tasks(two_matmuls())}
    small, big = sorted(reports, key=lambda r: flops[r.task_key])
    # the time goes where the latency is: the big task first (the tasks' latencies come from
    # a profile of the model; no round-robin warm-up, autotune/spread.py)
    assert big.trials > small.trials and big.trials >= 1, [(r.name, r.trials) for r in reports]
    # every trial was committed; a rerun resumes (its trials count, none is measured twice)
    target = canonical_target("native")
    held = sum(len(db.records(r.task_key, target)) for r in reports)
    assert held == sum(r.trials for r in reports) == len(stamps)
    again = kiln.tune(two_matmuls(), db=db, trials=held + 2, batch_size=2, search="random")
    assert sum(r.trials for r in again) == held + 2


def test_time_budget_and_trials_whichever_first(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    db = Database(tmp_path / "t.db")
    task = Task.from_op("matmul", [5, 7, 3])
    reports = tune_tasks([(task, 1.0)], "native", trials=3, db=db, search="random",
                         batch_size=2, time_budget=600.0)
    assert sum(r.trials for r in reports) == 3          # the trial budget ran out first


def test_bad_budgets_are_clear_errors(tmp_path):
    task = Task.from_op("matmul", [5, 7, 3])
    db = Database(tmp_path / "t.db")
    with pytest.raises(KilnError, match="trial budget .* or a time budget"):
        tune_tasks([(task, 1.0)], "native", trials=None, db=db)
    with pytest.raises(KilnError, match=r"time_budget=-1"):
        tune_tasks([(task, 1.0)], "native", trials=None, db=db, time_budget=-1)
    with pytest.raises(KilnError, match=r"kiln.tune\(time_budget=0\)"):
        kiln.tune(task, db=db, time_budget=0)
    with pytest.raises(KilnError, match=r"kiln.tune\(time_budget='10m'\)"):
        kiln.tune(task, db=db, time_budget="10m")

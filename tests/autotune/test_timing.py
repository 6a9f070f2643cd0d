"""Time per trial by part: the worker reports its phases, the tuner adds up the parts, and the
parts account for the whole wall time."""
import pickle

import pytest

from kiln.autotune.database import Database
from kiln.autotune.measure import MeasureOptions, MeasureStatus, TaskData, run_payload
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.autotune.timing import PARTS, SUB_PARTS, TrialTimer, merge_summaries
from kiln.autotune.tuner import canonical_target, tune_task

FAST = MeasureOptions(timeout=30.0, repeat=1, min_repeat_seconds=0.0)


def test_timer_summary_splits_wall_time_into_parts():
    timer = TrialTimer()
    timer.add("propose", 0.5)
    timer.add_measurement(2.0, {"setup": 0.1, "lower": 0.2, "compile": 1.0, "check": 0.1,
                                "run": 0.4})
    timer.add_measurement(1.0, {"setup": 0.1})              # a config the worker refused
    timer.add_measurement(0.3, {}, timed_out=True)           # killed at the timeout
    timer.add_counters({"features": 1.0, "fit": 0.0}, {"features": 1.25, "fit": 0.1})
    timer.add("db_commit", 0.1)
    timer.trials, timer.wall = 2, 4.0
    s = timer.summary()
    assert s["seconds"]["ipc"] == pytest.approx(0.2 + 0.9)  # round trip minus worker phases
    assert s["seconds"]["worker_timeout"] == pytest.approx(0.3)
    assert s["seconds"]["worker_compile"] == 1.0 and s["seconds"]["features"] == 0.25
    assert s["seconds"]["other"] == pytest.approx(4.0 - 3.9)
    assert sum(s["seconds"][p] for p in PARTS) == pytest.approx(4.0)
    assert s["per_trial"]["worker_run"] == pytest.approx(0.2)
    assert s["candidates_per_minute"] == pytest.approx(30.0)
    # overhead: everything but lower, compile, check and run (0.2 + 1.0 + 0.1 + 0.4) and the
    # candidate that timed out (0.3)
    assert s["overhead_share"] == pytest.approx((4.0 - 1.7 - 0.3) / 4.0)
    both = merge_summaries([timer, timer])
    assert both["trials"] == 4 and both["seconds"]["worker_compile"] == 2.0
    assert TrialTimer().summary()["candidates_per_minute"] == 0.0


def test_worker_reports_its_phases():
    task = Task.from_op("matmul", (16, 8, 24))
    data = TaskData.make(task)
    payload = {"task": pickle.dumps(task), "options": FAST,
               "config": SearchSpace(task).default_config(), "target": "native",
               "inputs": data.inputs, "expected": data.expected}
    result = run_payload(payload)
    assert result.status is MeasureStatus.OK, result.error_text
    assert set(result.phases) == {"setup", "lower", "compile", "check", "run"}
    assert all(v >= 0 for v in result.phases.values())
    assert result.build_seconds == pytest.approx(result.phases["lower"]
                                                 + result.phases["compile"])
    bad = run_payload(dict(payload, config={"s0/unroll": 7}))
    assert bad.status is MeasureStatus.INVALID_CONFIG and "run" not in bad.phases


@pytest.mark.slow
def test_tune_result_timing_accounts_for_every_trial(tmp_path):
    task = Task.from_op("matmul", (16, 8, 24))
    db = Database(tmp_path / "t.db")
    result = tune_task(task, "native", trials=5, db=db, batch_size=3, options=FAST)
    timing = result.timing
    assert timing["trials"] == result.measured == 5
    assert set(timing["seconds"]) == set(PARTS + SUB_PARTS)
    assert sum(timing["seconds"][p] for p in PARTS) == pytest.approx(timing["wall_seconds"])
    assert timing["seconds"]["worker_compile"] > 0 and timing["seconds"]["features"] > 0
    assert timing["seconds"]["fit"] > 0                       # the model was refitted
    assert 0 < timing["overhead_share"] < 1
    assert timing["candidates_per_minute"] == pytest.approx(
        60 * 5 / timing["wall_seconds"])
    assert len(db.records(task.workload_key, canonical_target("native"))) == 5

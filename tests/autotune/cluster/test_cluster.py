"""Tuning on a Dask cluster with real processes on 127.0.0.1: a `dask scheduler` and `kiln
worker`s started here, on free ports, and stopped (their process groups killed) after.

One small matmul task, random search, few trials: what is checked is the coordination
(who measured what, when, how often), not the speed."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow

from kiln.autotune.cluster.runner import ClusterOptions  # noqa: E402
from kiln.autotune.cluster.worker import KilnPlugin  # noqa: E402
from kiln.autotune.confirm import ConfirmOptions  # noqa: E402
from kiln.autotune.database import Database, config_key  # noqa: E402
from kiln.autotune.dispatch import select_record  # noqa: E402
from kiln.autotune.exchange import export_log, import_log  # noqa: E402
from kiln.autotune.measure import MeasureOptions  # noqa: E402
from kiln.autotune.space import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.autotune.tuner import canonical_target, tune_task  # noqa: E402
from kiln.codegen.target import Target  # noqa: E402

OPTIONS = MeasureOptions(timeout=30.0, repeat=2, min_repeat_seconds=0.0, threads=1)
TARGET = canonical_target("native")


def _start(args, log_path, env=None):
    log = open(log_path, "w")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)


def _stop(process, sig=signal.SIGTERM):
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    yield from _scheduler(tmp_path_factory.mktemp("dask"))


def _scheduler(folder, env=None):
    info = folder / "scheduler.json"
    process = _start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                      "127.0.0.1", "--port", "0", "--scheduler-file", str(info),
                      "--dashboard-address", "127.0.0.1:0"], folder / "scheduler.log", env)
    try:
        for _ in range(300):
            if info.exists() and info.stat().st_size:
                break
            assert process.poll() is None, (folder / "scheduler.log").read_text()
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        yield address, folder
    finally:
        _stop(process, signal.SIGKILL)


@pytest.fixture(scope="module")
def client(scheduler):
    with distributed.Client(scheduler[0], timeout=30, set_as_default=False) as c:
        yield c


def start_worker(scheduler, client, name, *extra):
    address, folder = scheduler
    process = _start([sys.executable, "-m", "kiln", "worker", address, "--name", name,
                      "--threads", "1", *extra], folder / f"{name}.log")
    for _ in range(600):
        names = {w["name"] for w in client.scheduler_info()["workers"].values()}
        if name in names:
            return process
        assert process.poll() is None, (folder / f"{name}.log").read_text()
        time.sleep(0.1)
    raise AssertionError(f"worker {name} did not register")


@pytest.fixture(scope="module")
def workers(scheduler, client):
    """Two matching workers and one that advertises another vector ISA."""
    started = []
    try:
        for name, extra in (("w1", ()), ("w2", ()),
                            ("odd", ("--advertise-isa", "avx,avx2,fma"))):
            started.append(start_worker(scheduler, client, name, *extra))
        yield started
    finally:
        for process in started:
            _stop(process)


@pytest.fixture(scope="module")
def task():
    return Task.from_op("matmul", (16, 8, 24))


def rows(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT task_key || '/' || config_key, status, worker, "
                            "provenance, error_text, threads FROM records ORDER BY id"
                            ).fetchall()


def duplicates(records):
    counts = Counter((key, threads) for key, _, _, _, _, threads in records)
    return {k: n for k, n in counts.items() if n > 1}


@pytest.fixture(scope="module")
def tuned(scheduler, workers, task, tmp_path_factory):
    """A 24-trial tune on the two workers, confirmed on the cluster at the end."""
    path = tmp_path_factory.mktemp("tuned") / "tune.db"
    db = Database(path)
    result = tune_task(task, "native", 24, db, search="random", options=OPTIONS,
                       cluster=scheduler[0], confirm=ConfirmOptions(leaders=2, rounds=3))
    db.close()
    return path, result


def test_a_tune_uses_both_workers_one_measurement_at_a_time(tuned):
    path, result = tuned
    records = rows(path)
    assert len(records) == 24 and result.measured == 24
    assert not duplicates(records)
    by_worker = Counter(worker for _, _, worker, _, _, _ in records)
    assert set(by_worker) == {"w1", "w2"}, by_worker      # never the mismatching "odd"
    spans: dict[str, list] = {}
    for _, _, worker, provenance, _, _ in records:
        p = json.loads(provenance)
        assert p["fingerprint"]["name"] == worker and p["fingerprint"]["threads"] == 1
        spans.setdefault(worker, []).append((p["start"], p["end"]))
    for worker, times in spans.items():
        times.sort()
        for (_, end), (start, _) in zip(times, times[1:]):
            assert start >= end, f"{worker}: measurements overlap"
    assert result.choice is not None        # the confirmation ran on a worker


def test_logs_json_lists_workers_per_task(tuned):
    path, _ = tuned
    out = subprocess.run([sys.executable, "-m", "kiln", "logs", "--db", str(path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    [row] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sum(row["workers"].values()) == 24 and set(row["workers"]) == {"w1", "w2"}


def test_export_import_round_trip_picks_the_same_schedules(tuned, task, tmp_path):
    path, _ = tuned
    source = Database(path)
    exported = tmp_path / "log.jsonl"
    export_log(source, exported)
    copy = Database(tmp_path / "copy.db")
    counts = import_log(copy, exported)
    assert counts.records == 24 and counts.choices == 1
    assert import_log(copy, exported).records == 0          # idempotent
    for db in (source, copy):
        db._choices_found = None
    task = task.retargeted(TARGET)
    picked = [select_record(task, Target.from_string(TARGET), db, threads=1) for db in (source, copy)]
    # the confirmed pick (a record, or the default when it won the confirmation) is the same
    assert (picked[0].record is None) == (picked[1].record is None)
    if picked[0].record is not None:
        assert config_key(picked[0].record.config) == config_key(picked[1].record.config)
    assert picked[0].choice is not None and picked[1].choice is not None   # the confirmed one
    assert picked[0].source(TARGET) == picked[1].source(TARGET)
    imported = copy.records(task.workload_key, TARGET)
    assert {r.worker for r in imported} == {"w1", "w2"}                 # provenance kept
    assert all(r.provenance["fingerprint"]["cpu"] for r in imported)


def test_a_crashing_candidate_is_recorded_broken_once(scheduler, workers, task, tmp_path):
    default = config_key(SearchSpace(task.retargeted(TARGET), 1).default_config())
    options = ClusterOptions(address=scheduler[0], test_fault=lambda c: "crash"
                             if config_key(c) == default else None)
    db = Database(tmp_path / "crash.db")
    tune_task(task, "native", 6, db, search="random", options=OPTIONS, cluster=options,
              confirm=None)
    db.close()
    records = rows(tmp_path / "crash.db")
    broken = [r for r in records if r[0].endswith("/" + default)]
    assert len(records) == 6 and len(broken) == 1
    assert broken[0][1] == "RUNTIME_ERROR" and "died" in broken[0][4]


def test_local_and_cluster_tuners_on_one_log_never_measure_twice(scheduler, workers, task,
                                                                  tmp_path):
    path = tmp_path / "shared.db"
    Database(path).close()
    errors = []

    def run(**kwargs):
        db = Database(path)
        try:
            tune_task(task, "native", 16, db, search="random", options=OPTIONS,
                      confirm=None, batch_size=4, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=run), threading.Thread(
        target=run, kwargs={"cluster": scheduler[0]})]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    records = rows(path)
    assert not duplicates(records)
    # each run's budget counted the other's records: far fewer than 2 x 16
    assert 16 <= len(records) <= 16 + 2 * 4
    assert {"local"} < {worker for _, _, worker, _, _, _ in records}


def test_a_killed_worker_loses_nothing(scheduler, client, workers, task, tmp_path):
    victim = start_worker(scheduler, client, "victim")
    path = tmp_path / "kill.db"
    killed_at = []

    def kill_when_busy():
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                done = [r for r in rows(path) if r[2] == "victim"]
            except sqlite3.Error:
                done = []
            if done:
                os.killpg(victim.pid, signal.SIGKILL)
                killed_at.append(time.time())
                return
            time.sleep(0.05)

    Database(path).close()
    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    db = Database(path)
    try:
        tune_task(task, "native", 20, db, search="random", options=OPTIONS,
                  cluster=scheduler[0], confirm=None)
    finally:
        db.close()
        killer.join()
        _stop(victim, signal.SIGKILL)
    assert killed_at, "the victim never measured anything"
    records = rows(path)
    assert len(records) == 20 and not duplicates(records)
    after = [json.loads(p)["start"] for _, _, w, p, _, _ in records if w == "victim"]
    assert all(start < killed_at[0] for start in after)
    # what ended after the kill was measured by the survivors; when the victim's first
    # record came last (CI, 2026-11-29 16:05 UTC, under load) nothing was left to measure
    late = [w for _, _, w, p, _, _ in records if json.loads(p)["end"] > killed_at[0]]
    assert set(late) <= {"w1", "w2"}


def test_a_candidate_that_kills_its_worker_is_recorded_broken_once(task, tmp_path):
    # a scheduler that gives up on a task after the first worker it took down (the
    # default is after 4); the tuner sends it a second time (to another worker, which it
    # takes down too) and then records it as broken; the third worker finishes the run
    env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0")
    for scheduler in _scheduler(tmp_path, env):
        with distributed.Client(scheduler[0], timeout=30, set_as_default=False) as c:
            started = [start_worker(scheduler, c, name) for name in ("k1", "k2", "k3")]
            try:
                default = config_key(SearchSpace(task.retargeted(TARGET), 1).default_config())
                options = ClusterOptions(address=scheduler[0], test_fault=lambda c: (
                    "kill-worker" if config_key(c) == default else None))
                db = Database(tmp_path / "killer.db")
                tune_task(task, "native", 2, db, search="random", options=OPTIONS,
                          cluster=options, confirm=None, batch_size=1)
                db.close()
            finally:
                for process in started:
                    _stop(process, signal.SIGKILL)
    records = rows(tmp_path / "killer.db")
    assert len(records) == 2 and not duplicates(records)
    [broken] = [r for r in records if r[0].endswith("/" + default)]
    [fine] = [r for r in records if not r[0].endswith("/" + default)]
    assert broken[1] == "RUNTIME_ERROR" and "took down" in broken[4]
    assert fine[1] == "OK" and fine[2] in ("k1", "k2", "k3"), fine


def two_matmuls():
    """A model of two MatMul tasks (a prime and a non-multiple of the vector width)."""
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (12, 16)), ("w2", (8, 7)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w1"], ["y1"]),
         helper.make_node("MatMul", ["b", "w2"], ["y2"])], "two_matmuls",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [8, 12]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [13, 8])],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [8, 16]),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, [13, 7])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_local_cluster_of_eight_one_thread_workers(tmp_path):
    # in-process workers talk over Dask's inproc transport; only the scheduler's HTTP
    # server listens, on a free port of 127.0.0.1
    import kiln
    with distributed.LocalCluster(n_workers=8, threads_per_worker=1, processes=False,
                                  resources={"kiln-measure": 1},
                                  dashboard_address="127.0.0.1:0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        c.register_plugin(KilnPlugin(threads=1))
        db = Database(tmp_path / "eight.db")
        reports = kiln.tune(two_matmuls(), trials=32, db=db, search="random", options=OPTIONS,
                            confirm=None, cluster=c)
        db.close()
        names = {str(w["name"]) for w in c.scheduler_info()["workers"].values()}
    records = rows(tmp_path / "eight.db")
    assert len(reports) == 2 and sum(r.trials for r in reports) == len(records) == 32
    assert not duplicates(records)
    assert {worker for _, _, worker, _, _, _ in records} == names and len(names) == 8


def test_a_tuner_killed_with_sigkill_resumes_on_rerun(scheduler, workers, tmp_path):
    path = tmp_path / "resume.db"
    command = [sys.executable, "-m", "kiln", "tune", "--op", "matmul", "--shape", "16,8,24",
               "--trials", "12", "--threads", "1", "--search", "random", "--leaders", "0",
               "--db", str(path), "--cluster", scheduler[0]]
    first = _start(command, tmp_path / "first.log")
    try:
        for _ in range(1200):
            if path.exists():
                try:
                    if len(rows(path)) >= 3:
                        break
                except sqlite3.Error:
                    pass
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
    finally:
        _stop(first, signal.SIGKILL)
    held = len(rows(path))
    assert 3 <= held < 12
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    records = rows(path)
    assert len(records) == 12 and not duplicates(records)
    assert f"measured {12 - held} new candidates" in " ".join(rerun.stdout.split())

"""The SQLite tuning database: roundtrip, WAL, concurrent readers, jsonl exchange, rejection."""
import dataclasses
import json
import sqlite3
import threading

import pytest

from kiln.autotune.database import SCHEMA_VERSION, Database, Record, config_key
from kiln.te.errors import TuningDatabaseError

KEY = "a" * 64


def _record(cost, status="OK", target="cpu-a", config=None, key=KEY):
    config = config if config is not None else {"tile": [4, int(cost * 1e6)]}
    costs = (cost, cost) if status == "OK" else ()
    return Record(key, target, config, costs, status, "" if status == "OK" else "boom")


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "log.db")
    database.commit_task(KEY, "C = A @ B", [["A", [4, 4], "float32"]], flops=128.0)
    yield database
    database.close()


def test_roundtrip_keeps_configs_costs_and_order(db):
    records = [_record(3e-3), _record(1e-3), _record(0, "WRONG_ANSWER", config={"x": 1})]
    for r in records:
        db.commit_record(r)
    back = db.records(KEY, "cpu-a")
    assert [r.config for r in back] == [r.config for r in records]
    assert [r.status for r in back] == ["OK", "OK", "WRONG_ANSWER"]
    assert back[0].costs == (3e-3, 3e-3)
    assert back[2].error_text == "boom"
    assert back[0].schema_version == SCHEMA_VERSION


def test_best_returns_only_ok_records_fastest_first(db):
    db.commit_record(_record(0, "TIMEOUT", config={"fast": "but broken"}))
    for cost in (5e-3, 2e-3, 9e-3):
        db.commit_record(_record(cost))
    best = db.best(KEY, "cpu-a", k=2)
    assert [r.mean_cost for r in best] == [2e-3, 5e-3]


def test_records_of_another_target_are_never_returned(db):
    db.commit_record(_record(1e-3, target="cpu-b"))
    db.commit_record(_record(4e-3, target="cpu-a"))
    assert [r.mean_cost for r in db.best(KEY, "cpu-a")] == [4e-3]
    assert all(r.target == "cpu-a" for r in db.records(KEY, "cpu-a"))
    assert db.best(KEY, "cpu-c") == []


def test_wal_mode_and_commit_per_record(db, tmp_path):
    mode = sqlite3.connect(tmp_path / "log.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    db.commit_record(_record(1e-3))
    # a separate connection sees the record at once: it was committed, not buffered
    other = sqlite3.connect(tmp_path / "log.db")
    assert other.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 1


def test_concurrent_reader_while_writing(db, tmp_path):
    counts, errors = [], []

    def read():
        try:
            reader = Database(tmp_path / "log.db")   # its own connection, as a reader process
            for _ in range(50):
                counts.append(len(reader.records(KEY, "cpu-a")))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    for i in range(50):
        db.commit_record(_record(1e-3 + i * 1e-6))
    thread.join()
    assert errors == []
    assert counts == sorted(counts)          # a reader only ever sees more records
    assert len(db.records(KEY, "cpu-a")) == 50
    assert counts[-1] <= 50


def test_export_import_jsonl_roundtrip(db, tmp_path):
    for cost in (2e-3, 1e-3):
        db.commit_record(_record(cost))
    db.commit_record(_record(0, "COMPILE_ERROR", config={"bad": True}))
    path = tmp_path / "log.jsonl"
    assert db.export_jsonl(path) == 3
    other = Database(tmp_path / "other.db")
    assert other.import_jsonl(path) == 3
    assert [r.config for r in other.records(KEY, "cpu-a")] == \
        [r.config for r in db.records(KEY, "cpu-a")]
    assert other.best(KEY, "cpu-a")[0].mean_cost == 1e-3
    assert other.task_info(KEY)["description"] == "C = A @ B"


def _write_lines(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines))


def test_import_rejects_foreign_schema_version_naming_line(db, tmp_path):
    good = {"kind": "record", **_record(1e-3).to_json()}
    foreign = dict(good, schema_version=SCHEMA_VERSION + 1)
    path = tmp_path / "foreign.jsonl"
    _write_lines(path, [good, foreign])
    with pytest.raises(TuningDatabaseError,
                       match=rf"line 2: record has schema version {SCHEMA_VERSION + 1}.*"
                             rf"schema versions 1 to {SCHEMA_VERSION}"):
        db.import_jsonl(path)
    assert db.records(KEY, "cpu-a") == []   # nothing of a rejected file is imported


def test_import_keeps_older_schema_records_as_stale(db, tmp_path):
    """A log exported before knob names were positions imports; its records wait, stale,
    until their task is compiled (autotune/dispatch.py renames them)."""
    old = dict({"kind": "record", **_record(1e-3).to_json()}, schema_version=1)
    path = tmp_path / "old.jsonl"
    _write_lines(path, [old])
    assert db.import_jsonl(path) == 1
    assert db.records(KEY, "cpu-a") == [] and db.stale_count() == 1
    assert [row["stale"] for row in db.summary()] == [1]


def test_import_rejects_malformed_line(db, tmp_path):
    path = tmp_path / "broken.jsonl"
    _write_lines(path, [{"kind": "record", **_record(1e-3).to_json()}, "{not json"])
    with pytest.raises(TuningDatabaseError, match=r"broken.jsonl, line 2: malformed JSON"):
        db.import_jsonl(path)


def test_import_rejects_missing_fields(db, tmp_path):
    path = tmp_path / "partial.jsonl"
    _write_lines(path, [{"task_key": KEY, "target": "cpu-a", "schema_version": 1}])
    with pytest.raises(TuningDatabaseError, match=r"line 1: record is missing field\(s\) config"):
        db.import_jsonl(path)


def test_import_with_target_rejects_other_targets(db, tmp_path):
    path = tmp_path / "other_target.jsonl"
    _write_lines(path, [{"kind": "record", **_record(1e-3, target="cpu-b").to_json()}])
    with pytest.raises(TuningDatabaseError, match=r"target 'cpu-b', expected 'cpu-a'"):
        db.import_jsonl(path, target="cpu-a")


def _vector(seed, n=None):
    import numpy as np
    from kiln.autotune.features import N_FEATURES
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n or N_FEATURES) * 100).astype(np.float32)


def test_export_import_jsonl_keeps_feature_vectors_bit_for_bit(db, tmp_path):
    import numpy as np
    from kiln.autotune.features import FEATURE_VERSION
    with_features = [_record(2e-3), _record(1e-3)]
    for i, r in enumerate(with_features):
        db.commit_record(r, _vector(i), FEATURE_VERSION)
    db.commit_record(_record(0, "INVALID_CONFIG", config={"bad": 1}))   # no vector
    db.commit_record(_record(5e-3), _vector(9, n=7), "v0-older-layout")
    path = tmp_path / "log.jsonl"
    assert db.export_jsonl(path) == 4
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    records = [x for x in lines if x["kind"] == "record"]
    assert "features" not in records[2]
    assert records[0]["features"]["version"] == FEATURE_VERSION
    other = Database(tmp_path / "other.db")
    assert other.import_jsonl(path) == 4
    back = other.feature_vectors(KEY, "cpu-a", FEATURE_VERSION)
    assert list(back) == [config_key(r.config) for r in with_features]
    for i, vector in enumerate(back.values()):
        np.testing.assert_array_equal(vector, _vector(i))
    old = other.feature_vectors(KEY, "cpu-a", "v0-older-layout")
    np.testing.assert_array_equal(next(iter(old.values())), _vector(9, n=7))
    rows = other.feature_rows("cpu-a", FEATURE_VERSION)
    assert rows[KEY][0].shape == (2, len(_vector(0)))


def test_import_of_jsonl_without_features_still_works(db, tmp_path):
    """Files exported before vectors were part of the format import as before."""
    from kiln.autotune.features import FEATURE_VERSION
    path = tmp_path / "old.jsonl"
    _write_lines(path, [{"kind": "record", **_record(1e-3).to_json()},
                        {"kind": "record", **_record(2e-3).to_json(), "features": None}])
    assert db.import_jsonl(path) == 2
    assert len(db.records(KEY, "cpu-a")) == 2
    assert db.feature_vectors(KEY, "cpu-a", FEATURE_VERSION) == {}


def test_import_rejects_feature_vector_of_wrong_length_naming_line(db, tmp_path):
    from kiln.autotune.features import FEATURE_VERSION, N_FEATURES
    good = {"kind": "record", **_record(1e-3).to_json(),
            "features": {"version": FEATURE_VERSION, "vector": _vector(0).tolist()}}
    short = dict(good, features={"version": FEATURE_VERSION, "vector": [1.0, 2.0]})
    path = tmp_path / "short.jsonl"
    _write_lines(path, [good, short])
    with pytest.raises(TuningDatabaseError,
                       match=rf"short.jsonl, line 2: feature vector has 2 values, but version "
                             rf"'{FEATURE_VERSION}' has {N_FEATURES} .*drop the 'features'"):
        db.import_jsonl(path)
    assert db.records(KEY, "cpu-a") == []   # nothing of a rejected file is imported
    # another layout: the first vector of that version sets its length for the file
    other = [dict(good, features={"version": "v0-x", "vector": [1.0, 2.0, 3.0]}),
             dict(good, features={"version": "v0-x", "vector": [1.0, 2.0]})]
    _write_lines(path, other)
    with pytest.raises(TuningDatabaseError, match=r"line 2: .*has 2 values.*'v0-x' has 3 "
                                                  r"\(line 1, the first vector"):
        db.import_jsonl(path)


@pytest.mark.parametrize("features", [[1.0, 2.0], {"version": 3, "vector": [1.0]},
                                      {"version": "v1", "vector": [1.0, "x"]},
                                      {"version": "v1", "vector": [float("nan")]}])
def test_import_rejects_malformed_features_field(db, tmp_path, features):
    path = tmp_path / "bad_features.jsonl"
    _write_lines(path, [{"kind": "record", **_record(1e-3).to_json(), "features": features}])
    with pytest.raises(TuningDatabaseError, match=r"line 1: .*(features|feature vector)"):
        db.import_jsonl(path)


def test_commit_rejects_foreign_schema_record(db):
    record = Record(KEY, "cpu-a", {}, (1.0,), "OK", schema_version=SCHEMA_VERSION + 5)
    with pytest.raises(TuningDatabaseError, match="schema version"):
        db.commit_record(record)


def test_not_a_database_file_is_a_clear_error(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TuningDatabaseError, match=r"cannot open tuning database .*garbage.db"):
        Database(path)


def test_summary_counts_statuses_and_gflops(db):
    db.commit_record(_record(1e-6))
    db.commit_record(_record(2e-6))
    db.commit_record(_record(0, "TIMEOUT", config={"t": 1}))
    (row,) = db.summary()
    assert row["trials"] == 3
    assert row["by_status"] == {"OK": 2, "TIMEOUT": 1}
    assert row["best_seconds"] == pytest.approx(1e-6)
    assert row["best_gflops"] == pytest.approx(128.0 / 1e-6 / 1e9)
    assert row["description"] == "C = A @ B"


def test_config_key_is_order_independent():
    assert config_key({"a": 1, "b": [2, 3]}) == config_key({"b": [2, 3], "a": 1})
    assert config_key({"a": 1}) != config_key({"a": 2})


def _at(cost, threads, config=None):
    return dataclasses.replace(_record(cost, config=config), threads=threads)


def test_best_for_a_thread_count_ranks_records_measured_at_it_first(db):
    db.commit_record(_at(1e-3, 1, {"one": 1}))          # fastest, but at 1 thread
    db.commit_record(_at(2e-3, None, {"old": 1}))       # a record from before thread counts
    db.commit_record(_at(4e-3, 2, {"two": 1}))
    db.commit_record(_at(3e-3, 2, {"two": 2}))
    assert [r.config for r in db.best(KEY, "cpu-a", k=3, threads=2)] == [
        {"two": 2}, {"two": 1}, {"old": 1}]
    # never measured at 4 threads: unknown-count records, then the other counts
    assert [r.config for r in db.best(KEY, "cpu-a", k=4, threads=4)] == [
        {"old": 1}, {"one": 1}, {"two": 2}, {"two": 1}]
    # no count asked: the fastest of all, whatever it was measured at
    assert db.best(KEY, "cpu-a")[0].config == {"one": 1}
    assert db.best(KEY, "cpu-a", threads=1)[0].threads == 1


def test_a_log_from_before_thread_counts_opens_and_gains_the_column(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, task_key TEXT, target TEXT, "
                 "config TEXT, config_key TEXT, costs TEXT, mean_cost FLOAT, status TEXT, "
                 "error_text TEXT, kiln_version TEXT, schema_version INTEGER, timestamp FLOAT)")
    conn.execute("INSERT INTO records VALUES (1, ?, 'cpu-a', '{\"a\": 1}', '{\"a\":1}', "
                 "'[0.001]', 0.001, 'OK', '', '0.1', ?, 0.0)", (KEY, SCHEMA_VERSION))
    conn.commit()
    conn.close()
    old = Database(path)
    assert [(r.config, r.threads) for r in old.records(KEY, "cpu-a")] == [({"a": 1}, None)]
    old.commit_record(_at(2e-3, 2, {"b": 1}))
    assert old.best(KEY, "cpu-a", threads=2)[0].config == {"b": 1}
    assert old.summary()[0]["threads"] == [None, 2]
    old.close()


def test_jsonl_carries_the_thread_count_and_rejects_a_bad_one(db, tmp_path):
    db.commit_record(_at(1e-3, 2))
    db.commit_record(_at(2e-3, None, {"x": 1}))
    path = tmp_path / "log.jsonl"
    db.export_jsonl(path)
    other = Database(tmp_path / "other.db")
    other.import_jsonl(path)
    assert [r.threads for r in other.records(KEY, "cpu-a")] == [2, None]
    lines = path.read_text().splitlines()
    bad = json.loads(lines[-1])
    bad["threads"] = 0
    lines[-1] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TuningDatabaseError, match=rf"line {len(lines)}: 'threads' must be"):
        other.import_jsonl(path)
    other.close()


def _isa_sibling(target, cpu_a="znver4", cpu_b="znver5"):
    """`target`'s features on another CPU name: the same vector ISA, another target string."""
    return f"llvm -mcpu={cpu_b if target.cpu == cpu_a else cpu_a} -mattr={target.features}"


def test_similar_cpus_lends_records_only_of_the_same_vector_isa(db):
    from kiln.codegen import Target
    avx512 = "llvm -mcpu=znver4 -mattr=+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl"
    sibling = "llvm -mcpu=znver5 -mattr=+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl"
    avx2 = "llvm -mcpu=znver3"
    assert Target.from_string(avx512).vector_isa() == Target.from_string(sibling).vector_isa()
    db.commit_record(_record(1e-3, target=avx2))
    assert db.best(KEY, avx512, similar_cpus=True) == []          # AVX2 is another ISA
    db.commit_record(_record(2e-3, target=sibling))
    db.commit_record(_record(0, "RUNTIME_ERROR", target="llvm -mcpu=sapphirerapids"))
    assert db.best(KEY, avx512) == []                             # never without asking
    lent = db.best(KEY, avx512, similar_cpus=True)
    assert [(r.target, r.mean_cost) for r in lent] == [(sibling, 2e-3)]
    db.commit_record(_record(5e-3, target=avx512))                # its own records win
    assert [r.target for r in db.best(KEY, avx512, similar_cpus=True)] == [avx512]
    assert db.best(KEY, "cpu-unknown", similar_cpus=True) == []   # not a target: no siblings


def test_apply_best_says_when_the_schedule_was_tuned_on_another_cpu(db):
    from kiln.autotune.space.rules import SearchSpace
    from kiln.autotune.task import Task
    from kiln.autotune.tuner import apply_best, canonical_target
    from kiln.codegen import Target
    from kiln.schedule import lower
    task = Task.from_op("matmul", (8, 16, 24))
    native = canonical_target("native")
    task = dataclasses.replace(task, target=native, _key=[])
    db.commit_task(task.workload_key, "matmul", [])
    space = SearchSpace(task)
    default = space.default_config()
    # a tile the default does not take on this host (AVX2 and AVX-512 defaults differ)
    other = next(list(c) for c in space._by_name["s0/tile/1"].choices
                 if list(c) != default["s0/tile/1"] and c[1] % 8 == 0)
    config = dict(default, **{"s0/tile/1": other})
    sibling = _isa_sibling(Target.from_string(native))
    db.commit_record(Record(task.workload_key, sibling, config, (1e-6,), "OK", ""))
    sch, args, source = apply_best(task, "native", db)
    assert source.startswith("similar CPU") and Target.from_string(sibling).cpu in source
    lent = str(lower(sch, args, name="mm"))
    sch, args, source = apply_best(task, "native", db, similar_cpus=False)
    assert source.startswith("default") and str(lower(sch, args, name="mm")) != lent

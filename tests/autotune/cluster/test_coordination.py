"""The parts of cluster tuning that need no cluster: claims in the log, the provenance
migration, fingerprint matching, progress lines off a terminal, the missing-extra message."""
import io
import json
import sqlite3
import subprocess
import sys
import time

from kiln.autotune.claims import Claims
from kiln.autotune.cluster.fingerprint import Fingerprint
from kiln.autotune.database import Database, Record, config_key
from kiln.autotune.tuner import Progress, canonical_target
from kiln.progress_lines import LineProgress

TARGET = canonical_target("native")


def _record(config, worker=None, threads=1):
    return Record("task", TARGET, config, (1e-3,), "OK", threads=threads, worker=worker,
                  provenance={"start": 1.0, "end": 2.0} if worker else None)


def test_a_claim_is_exclusive_until_released_or_its_owner_dies(tmp_path):
    db = Database(tmp_path / "log.db")
    ours, theirs = Claims(db), Claims(Database(tmp_path / "log.db"))
    keys = [config_key({"k": i}) for i in range(4)]
    assert ours.take("task", TARGET, 1, keys[:3]) == keys[:3]
    assert theirs.take("task", TARGET, 1, keys) == keys[3:]      # live owner: refused
    assert theirs.take("task", TARGET, 2, keys[:1]) == keys[:1]  # another thread count
    db.commit_record(_record({"k": 0}))
    ours.release("task", TARGET, 1, keys[0])
    assert theirs.take("task", TARGET, 1, keys[:1]) == []        # recorded: never again
    ours.release("task", TARGET, 1, keys[1])
    assert theirs.take("task", TARGET, 1, keys[1:2]) == keys[1:2]
    # a run killed with -9 on this machine: its claims are taken over at once
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours.conn.execute("UPDATE claims SET owner = ? WHERE owner = ?",
                      (f"{ours.host}:{dead}:gone", ours.owner))
    ours.conn.commit()
    assert theirs.take("task", TARGET, 1, keys[2:3]) == keys[2:3]


def test_an_expired_lease_is_taken_over(tmp_path):
    first = Claims(Database(tmp_path / "log.db"), lease=0.05)
    second = Claims(Database(tmp_path / "log.db"))
    first.host = "elsewhere"            # (no pid check for another machine's run)
    first.owner = "elsewhere:1:x"
    assert first.take("task", TARGET, 1, ["a"]) == ["a"]
    assert second.take("task", TARGET, 1, ["a"]) == []
    time.sleep(0.1)
    assert second.take("task", TARGET, 1, ["a"]) == ["a"]


def test_provenance_columns_are_added_to_an_old_log_without_losing_records(tmp_path):
    path = tmp_path / "old.db"
    Database(path).close()
    with sqlite3.connect(path) as conn:       # a log from before provenance
        conn.execute("ALTER TABLE records DROP COLUMN worker")
        conn.execute("ALTER TABLE records DROP COLUMN provenance")
    old = Database(path)
    old.commit_record(_record({"k": 1}))
    old.close()
    db = Database(path, base=path)                 # layered over a base without the columns
    db.commit_record(_record({"k": 2}, worker="w1"))
    records = db.records("task", TARGET)
    assert [r.config["k"] for r in records] == [1, 1, 2]           # base + own, none lost
    assert [r.worker for r in records if r.record_id > 0] == [None, "w1"]
    [row] = db.summary()
    assert row["workers"] == {"unknown": 2, "w1": 1}


def test_fingerprint_matching_names_what_differs():
    here = Fingerprint.local("w", 1)
    assert here.mismatch(TARGET, 1) is None
    assert "thread" in here.mismatch(TARGET, 2)
    posing = Fingerprint.local("w", 1, advertise_isa=("avx", "avx2", "fma"))
    if set(here.isa) != {"avx", "avx2", "fma"}:
        assert "vector ISA" in posing.mismatch(TARGET, 1)
    assert Fingerprint.from_json(json.loads(json.dumps(here.to_json()))) == here


def test_progress_lines_print_at_a_steady_interval_off_a_terminal():
    out = io.StringIO()
    lines = LineProgress(10, None, print_line=lambda t: print(t, file=out), interval=0.05)
    with lines:
        lines(Progress("matmul", 3, 10, 5.0, "OK", 1.0, 2e-4, "2/2"))
        time.sleep(0.3)
    text = out.getvalue().splitlines()
    assert len(text) >= 4
    assert "3/10 trials" in text[1] and "0.2 ms" in text[1] and "workers busy 2/2" in text[1]
    assert "left" in text[1] and "done in" in text[-1]


def test_cluster_without_the_extra_says_what_to_install(tmp_path):
    code = ("import sys; sys.modules['distributed'] = None; from kiln.cli import main; "
            "sys.exit(main(['tune', '--op', 'matmul', '--shape', '8,8,8', '--trials', '1', "
            f"'--db', {str(tmp_path / 'x.db')!r}, '--cluster', 'tcp://127.0.0.1:9']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert 'pip install "tensorkiln[cluster]"' in " ".join(run.stdout.split())

"""The `kiln` command line, run as a user would (a subprocess), checked by exit code and output."""
import json
import subprocess
import sys

import pytest


def kiln(*args, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          timeout=timeout, env={"KILN_NUM_THREADS": "2", "PATH": "/usr/bin:/bin",
                                                "HOME": "/tmp"})
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_tune_op_then_logs_json(tmp_path):
    db = str(tmp_path / "t.db")
    code, out = kiln("tune", "--op", "matmul", "--shape", "32,16,24", "--trials", "6",
                     "--db", db)
    assert code == 0, out
    assert "6 in the database" in out
    code, out = kiln("logs", "--db", db, "--json")
    assert code == 0, out
    rows = [json.loads(line) for line in out.strip().splitlines()]
    assert len(rows) == 1
    assert rows[0]["trials"] == 6 and rows[0]["by_status"].get("OK", 0) >= 1
    assert rows[0]["best_gflops"] > 0
    # a rerun with the same budget resumes: nothing new is measured
    code, out = kiln("tune", "--op", "matmul", "--shape", "32,16,24", "--trials", "6",
                     "--db", db)
    assert code == 0 and "measured 0 new candidates" in out, out


def test_unknown_operator_is_a_clear_error(tmp_path):
    code, out = kiln("tune", "--op", "fft", "--shape", "8", "--db", str(tmp_path / "t.db"))
    assert code == 1
    assert "unknown operator 'fft'" in out and "matmul" in out


def test_bad_shape_is_a_clear_error(tmp_path):
    code, out = kiln("tune", "--op", "matmul", "--shape", "8,8", "--db", str(tmp_path / "t.db"))
    assert code == 1 and "operator 'matmul' got shape (8, 8)" in out


def test_logs_on_empty_database(tmp_path):
    code, out = kiln("logs", "--db", str(tmp_path / "empty.db"))
    assert code == 0 and "holds no records yet" in out


def test_unknown_target(tmp_path):
    code, out = kiln("tune", "--op", "matmul", "--shape", "8,8,8", "--target", "llvm -mcpu=znver9",
                     "--db", str(tmp_path / "t.db"))
    assert code == 1 and "znver9" in out

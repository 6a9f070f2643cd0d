"""`kiln tune` / `kiln bench` with no model: the ResNet-18-shaped default model, and --time."""
import json
import re
import shutil

import pytest

from kiln import cli
from kiln.autotune.default_db import shipped_db_path

from .test_cli import kiln


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("1h", 3600),
                                          ("1.5m", 90), ("45", 45), (" 2M ", 120)])
def test_parse_duration(text, seconds):
    assert cli.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "ten minutes", "5x", "0", "-3m", "inf", "nan"])
def test_parse_duration_refuses_what_is_not_a_duration(text):
    with pytest.raises(Exception) as info:
        cli.parse_duration(text)
    assert repr(text) in str(info.value)


def test_bad_time_is_a_clear_error(tmp_path):
    code, out = kiln("tune", "--op", "matmul", "--shape", "8,8,8", "--time", "5x",
                     "--db", str(tmp_path / "t.db"))
    assert code == 2 and "'5x' is not a duration" in out and "10m" in out, out


def test_tune_op_with_a_time_budget(tmp_path):
    code, out = kiln("tune", "--op", "matmul", "--shape", "5,7,3", "--time", "3s",
                     "--search", "random", "--db", str(tmp_path / "t.db"), "--threads", "1")
    assert code == 0, out
    assert "3 s" in out and "measured" in out, out


@pytest.mark.slow
def test_default_model_without_records_says_it_tunes_and_for_how_long(tmp_path):
    """On a database with no records of the default model, `kiln tune` says so and tunes
    for its time budget (a short --time here), then compiles and compares ResNet-18."""
    code, out = kiln("tune", "--db", str(tmp_path / "empty.db"), "--time", "2s",
                     "--threads", "1", "--json", timeout=900)
    assert code == 0, out
    assert "resnet18_like" in out, out
    text = " ".join(out.split())          # the console wraps long lines
    assert re.search(r"(\d+) of its \1 tasks have no tuning records", text), out
    assert "for 2 s" in text, out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["model"] == "resnet18_like" and figures["kiln_ms"] > 0
    assert figures["max_abs_error_vs_ort"] < 1e-2


@pytest.mark.slow
def test_default_model_with_records_only_compiles(tmp_path):
    """With the shipped records of this CPU, `kiln tune` measures nothing: it compiles the
    ResNet-18-shaped model with them and compares it with onnxruntime."""
    from kiln.autotune.database import Database
    from kiln.graph.models import resnet18_like
    shipped = tmp_path / "kiln.db"          # a copy: the compile may rename older records
    shutil.copy(shipped_db_path(), shipped)
    db = Database(shipped)
    missing, total = cli._tasks_without_records(resnet18_like(), "native", db, "nchwc", True)
    if missing:
        pytest.skip(f"the shipped log has no records of {missing}/{total} tasks for this CPU")
    code, out = kiln("tune", "--db", str(shipped), "--json", timeout=900)
    assert code == 0, out
    text = " ".join(out.split())          # the console wraps long lines
    assert f"all {total} tasks have tuning records" in text and "tuning took" not in text, out
    # the comparison table, then one line of summary (no per-kernel table without -v)
    summary = out.strip().splitlines()[-2]
    assert summary.startswith("resnet18_like: Kiln's latency is"), out
    assert re.search(r"schedules: \d+ database$", summary), out
    assert "kernel conv2d" not in out, out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["model"] == "resnet18_like"
    assert figures["max_abs_error_vs_ort"] < 1e-2

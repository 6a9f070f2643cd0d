"""The `kiln` command line, run as a user would (a subprocess), checked by exit code and output."""
import json
import sqlite3
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
                     "--db", db, "--threads", "1")
    assert code == 0, out
    assert "6 in the database" in out
    code, out = kiln("logs", "--db", db, "--json")
    assert code == 0, out
    rows = [json.loads(line) for line in out.strip().splitlines()]
    assert len(rows) == 1
    assert rows[0]["trials"] == 6 and rows[0]["by_status"].get("OK", 0) >= 1
    assert rows[0]["best_gflops"] > 0
    assert rows[0]["threads"] == [1]            # --threads 1 beat KILN_NUM_THREADS=2
    # a rerun with the same budget at the same thread count resumes: nothing new is measured
    code, out = kiln("tune", "--op", "matmul", "--shape", "32,16,24", "--trials", "6",
                     "--db", db, "--threads", "1")
    assert code == 0 and "measured 0 new candidates" in out, out


def test_unknown_operator_is_a_clear_error(tmp_path):
    code, out = kiln("tune", "--op", "fft", "--shape", "8", "--db", str(tmp_path / "t.db"))
    assert code == 1
    assert "unknown operator 'fft'" in out and "matmul" in out


def test_bad_shape_is_a_clear_error(tmp_path):
    code, out = kiln("tune", "--op", "matmul", "--shape", "8,8", "--db", str(tmp_path / "t.db"))
    assert code == 1 and "operator 'matmul' got shape (8, 8)" in out


def test_thread_count_below_one_is_refused(tmp_path):
    code, out = kiln("bench", "--threads", "0", "--db", str(tmp_path / "t.db"))
    assert code == 2 and "--threads 0" in out


def test_logs_on_empty_database(tmp_path):
    code, out = kiln("logs", "--db", str(tmp_path / "empty.db"))
    assert code == 0 and "holds no records yet" in out


def test_unknown_target(tmp_path):
    code, out = kiln("tune", "--op", "matmul", "--shape", "8,8,8", "--target", "llvm -mcpu=znver9",
                     "--db", str(tmp_path / "t.db"))
    assert code == 1 and "znver9" in out


def _tiny_matmul_model(tmp_path):
    """A one-task ONNX model (MatMul + Relu, [3, 8] x [8, 4]) saved under tmp_path."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [w])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.slow
def test_tune_model_ends_with_a_confirmation_of_k_leaders(tmp_path):
    path = _tiny_matmul_model(tmp_path)
    db = str(tmp_path / "m.db")
    # (no in-model check: when the leader wins, that check may add a second choice row)
    code, out = kiln("tune", str(path), "--trials", "3", "--leaders", "1", "--db", db,
                     "--no-model-check")
    assert code == 0, out
    # tuning ended with the task's leader timed side by side with its default
    assert "confirmed 1 task side by side with their defaults" in " ".join(out.split()), out
    with sqlite3.connect(db) as conn:
        (rows,) = conn.execute("SELECT COUNT(*) FROM choices").fetchone()
        (candidates,) = conn.execute("SELECT candidates FROM choices").fetchone()
    assert rows == 1 and len(json.loads(candidates)) == 2       # the default and 1 leader
    code, out = kiln("logs", "--db", db, "--json")
    assert code == 0, out
    (row,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(row["choices"]) == 1, row        # one thread count confirmed
    # a second run measures nothing: the bar says where its trials came from
    code, out = kiln("tune", str(path), "--trials", "3", "--db", db)
    assert code == 0, out
    assert "all from the database" in out and "0/3" not in out, out


def test_confirm_compares_mutations_of_an_untuned_model_and_compiles_follow(tmp_path):
    """`kiln confirm` on a model with no records: each task's default against N mutations,
    side by side; the labels are stored, and a compile takes the confirmed winners."""
    path = _tiny_matmul_model(tmp_path)
    db = str(tmp_path / "m.db")
    code, out = kiln("confirm", str(path), "--mutations", "2", "--rounds", "3", "--db", db,
                     "--threads", "1")
    assert code == 0, out
    assert "confirmed 1 task in" in " ".join(out.split()), out
    with sqlite3.connect(db) as conn:
        (candidates,) = conn.execute("SELECT candidates FROM choices").fetchone()
    rows = json.loads(candidates)
    assert [r["source"] for r in rows] == ["default", "mutation", "mutation"]
    assert all(r["features"] and r["ratio"] for r in rows)
    code, out = kiln("confirm", str(path), "--mutations", "-1", "--db", db)
    assert code == 1 and "--mutations -1" in out


def test_bench_ends_with_the_table_and_one_summary_line(tmp_path):
    """`kiln bench` prints the comparison table and one line of summary; the per-kernel table
    only with -v (before that line), the figures as JSON only with --json (last)."""
    path = _tiny_matmul_model(tmp_path)
    db = str(tmp_path / "empty.db")
    code, out = kiln("bench", str(path), "--repeat", "3", "--db", db)
    assert code == 0, out
    lines = out.strip().splitlines()
    assert lines[-2].startswith("└") and "onnxruntime" in out, out     # the table's last row
    assert lines[-1].startswith("tiny.onnx: Kiln's latency is"), out
    assert "1 kernel call, schedules: 1 default (-v lists each kernel)" in lines[-1], out
    assert "kernel matmul" not in out, out
    code, out = kiln("bench", str(path), "--repeat", "3", "--db", db, "-v", "--json")
    assert code == 0, out
    lines = [line for line in out.strip().splitlines()        # (-v also logs, to stderr)
             if not line.startswith(("INFO ", "WARNING "))]
    figures = json.loads(lines[-1])
    assert figures["model"] == "tiny.onnx" and figures["max_abs_error_vs_ort"] < 1e-5
    assert lines[-2].startswith("tiny.onnx: Kiln's latency is") and "-v" not in lines[-2], out
    assert "kernel matmul" in out, out                                  # the per-kernel table


def test_compile_in_either_layout_and_refuse_an_unknown_one(tmp_path):
    from kiln.graph.models import save_default_model
    model = str(save_default_model(tmp_path / "cnn.onnx"))
    db = str(tmp_path / "empty.db")
    for layout in ("nchwc", "nchw"):
        code, out = kiln("compile", model, "-o", str(tmp_path / f"{layout}.so"), "--db", db,
                         "--layout", layout)
        assert code == 0, out
        blocked = "conv2d_nchwc" in out
        assert blocked == (layout == "nchwc"), out
    code, out = kiln("compile", model, "-o", str(tmp_path / "x.so"), "--layout", "nhwc")
    assert code != 0 and "nhwc" in out


def test_logs_check_lists_and_prune_removes_records_that_no_longer_fit(tmp_path):
    import onnx

    from kiln.autotune.database import Database, Record
    from kiln.autotune.dispatch import canonical_target
    from kiln.graph import models
    from kiln.graph.compile.model import model_tasks
    model = models.mlp(sizes=(16, 8))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    db = Database(tmp_path / "t.db")
    target = canonical_target("native")
    mt = model_tasks(model)[0]
    db.commit_record(Record(mt.task.workload_key, target, {"matmul/tile/0:i": [1, 1]},
                            (1e-9,), "OK"))
    db.close()
    code, out = kiln("logs", "--db", str(tmp_path / "t.db"), "--check", str(path))
    assert code == 0 and "does not fit" in out and "1 record(s)" in out, out
    code, out = kiln("logs", "--db", str(tmp_path / "t.db"), "--check", str(path), "--prune")
    assert code == 0 and "removed 1 stale record(s)" in out, out
    code, out = kiln("logs", "--db", str(tmp_path / "t.db"), "--check", str(path))
    assert code == 0 and "0 record(s)" in out, out


def test_an_error_naming_a_long_path_prints_it_whole_and_literally(tmp_path):
    """Errors are not wrapped (a path or shape a user greps for stays on one line) and their
    text is not read as console markup: a file named with brackets is printed as it is."""
    deep = tmp_path / ("a_rather_long_folder_name_" * 4) / "[bold]model.onnx"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"not an onnx file")
    code, out = kiln("compile", str(deep), "-o", str(tmp_path / "m.so"))
    assert code != 0, out
    assert str(deep) in out, out


def test_logs_merge_twice_adds_nothing_and_names_a_missing_file(tmp_path):
    from kiln.autotune.database import Database, Record
    src = Database(tmp_path / "src.db")
    src.commit_task("k" * 64, "C = A @ B", [])
    src.commit_record(Record("k" * 64, "cpu-a", {"t": 1}, (1e-3,), "OK"))
    src.close()
    dest = str(tmp_path / "dest.db")
    code, out = kiln("logs", "--db", dest, "--merge", str(tmp_path / "src.db"))
    assert code == 0 and "1 of 1 record(s)" in out, out
    code, out = kiln("logs", "--db", dest, "--merge", str(tmp_path / "src.db"))
    assert code == 0 and "0 of 1 record(s)" in out, out
    code, out = kiln("logs", "--db", dest, "--merge", str(tmp_path / "nope.db"))
    assert code == 1 and "nope.db" in out and "no such file" in out, out

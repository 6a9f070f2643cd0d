"""Whole models in the persistent cache (graph/compile/model_cache.py): a second compile loads the
plan, constants and kernels; any changed input or option is a miss; bad entries rebuild."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import kiln
from kiln.autotune.database import Database
from kiln.graph.compile import model_cache
from kiln.graph import models


def _model(seed_width=8, size=17):
    # odd image side: every pooling and conv has ragged edges
    return models.resnet18_like(image_size=size, base_width=seed_width, num_classes=7)


def _check(compiled, path, rng):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = {i.name: rng.standard_normal([d for d in i.shape]).astype("float32")
         for i in sess.get_inputs()}
    got = compiled.run(x)
    np.testing.assert_allclose(got[0], sess.run(None, x)[0], rtol=2e-3, atol=2e-3)
    return got


def _cached(compiled) -> bool:
    return bool(compiled.plan.meta["compile"].get("cached"))


def test_second_compile_is_a_hit_with_the_same_results(cache_root, tmp_path, rng):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    cold = kiln.compile(str(path), db=None, jobs=1)
    warm = kiln.compile(str(path), db=None, jobs=1)
    assert not _cached(cold) and _cached(warm)
    assert warm.plan.steps == cold.plan.steps and warm.plan.buffers == cold.plan.buffers
    x = cold._example_inputs()
    for a, b in zip(cold.run(x), warm.run(x)):
        np.testing.assert_array_equal(a, b)
    _check(warm, path, rng)
    # the warm model exports like a compiled one (kernels carry their optimized IR)
    warm.export(tmp_path / "w.so")
    loaded = kiln.load_compiled(tmp_path / "w.so")
    np.testing.assert_array_equal(loaded.run(x)[0], cold.run(x)[0])
    assert "database" in warm.summary() and "default" in warm.summary()


def test_a_changed_model_file_is_a_miss(cache_root, tmp_path, rng):
    path = tmp_path / "m.onnx"
    first = _model()
    onnx.save(first, path)
    kiln.compile(str(path), db=None, jobs=1)
    # same architecture and file size, other weights: written at once after the compile
    other = _model()
    for init in other.graph.initializer:
        arr = onnx.numpy_helper.to_array(init)
        init.CopyFrom(onnx.numpy_helper.from_array((arr * 0.5).astype(arr.dtype), init.name))
    onnx.save(other, path)
    assert os.path.getsize(path) > 0
    again = kiln.compile(str(path), db=None, jobs=1)
    assert not _cached(again)
    _check(again, path, rng)


def test_the_file_alias_is_used_only_for_old_files(cache_root, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    key = model_cache.model_key(str(path), None, "t", None, 2, "nchwc", True)
    monkeypatch.setattr(model_cache, "RACY_SECONDS", -1.0)    # as if written long ago
    assert model_cache.model_key(str(path), None, "t", None, 2, "nchwc", True) == key
    model_cache.still_valid(key, str(path), None, "t", None, 2, "nchwc", True)
    assert list((cache_root / "aliases").rglob("*.sha"))
    os.utime(path, ns=(1, 1))                       # a change of times: another alias
    assert model_cache.model_key(str(path), None, "t", None, 2, "nchwc", True) == key


@pytest.mark.parametrize("change", [{"threads": 1}, {"layout": "nchw"}, {"winograd": False},
                                    {"input_shapes": {"input": (2, 3, 17, 17)}}])
def test_options_are_part_of_the_key(cache_root, tmp_path, change):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    base = dict(input_shapes=None, target="native", db=None, threads=2, layout="nchwc",
                winograd=True)
    assert (model_cache.model_key(str(path), **base)
            != model_cache.model_key(str(path), **{**base, **change}))


def test_the_database_is_part_of_the_key(cache_root, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    db = Database(tmp_path / "t.db")
    args = (None, "native")
    assert model_cache.model_key(str(path), *args, db, 2, "nchwc", True) is None   # just made
    monkeypatch.setattr(model_cache, "RACY_SECONDS", -1.0)
    k1 = model_cache.model_key(str(path), *args, db, 2, "nchwc", True)
    k0 = model_cache.model_key(str(path), *args, None, 2, "nchwc", True)
    assert k1 is not None and k1 != k0
    with db._db.conn:
        db._db.conn.execute("CREATE TABLE touched (x INTEGER)")
    db._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert model_cache.model_key(str(path), *args, db, 2, "nchwc", True) != k1


def test_graph_objects_and_disabled_cache_are_not_cached(tmp_path, monkeypatch):
    from kiln.graph.onnx.load import load_onnx
    model = _model()
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "c"))
    graph = load_onnx(model)
    assert model_cache.model_key(graph, None, "native", None, 2, "nchwc", True) is None
    assert model_cache.model_key(model, None, "native", None, 2, "nchwc", True) is not None
    monkeypatch.setenv("KILN_CACHE_DIR", "0")
    assert model_cache.model_key(model, None, "native", None, 2, "nchwc", True) is None


def _entry(root):
    (entry,) = list((root / "models").rglob("*.kmodel"))
    return entry


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign", "kernel gone"])
def test_a_bad_model_entry_is_rebuilt(cache_root, tmp_path, rng, damage):
    path = tmp_path / "m.onnx"
    onnx.save(_model(size=11), path)
    kiln.compile(str(path), db=None, jobs=1)
    entry = _entry(cache_root)
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        entry.write_bytes(bytes(data[:-100]))
    elif damage == "flip":
        data[-17] ^= 1                                 # a constant's bit
        entry.write_bytes(bytes(data))
    elif damage == "foreign":
        entry.write_bytes(b"PK\x03\x04" + bytes(data[4:]))
    else:
        next((cache_root / "kernels").rglob("*.kobj")).unlink()
    again = kiln.compile(str(path), db=None, jobs=1)
    assert not _cached(again)
    _check(again, path, rng)
    assert _cached(kiln.compile(str(path), db=None, jobs=1))


def test_concurrent_model_compiles(cache_root, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(models.default_cnn(image_size=13, width=8), path)
    code = textwrap.dedent(f"""
        import numpy as np, onnxruntime as ort, kiln
        c = kiln.compile({str(path)!r}, db=None, jobs=2)
        s = ort.InferenceSession({str(path)!r}, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(3).standard_normal((1, 3, 13, 13)).astype("float32")
        np.testing.assert_allclose(c.run([x])[0], s.run(None, {{"input": x}})[0], rtol=2e-3,
                                   atol=2e-3)
        print(bool(c.plan.meta["compile"].get("cached")))
    """)
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_root)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    third = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-2000:]
    assert third.stdout.strip().splitlines()[-1] == "True"


def test_a_compile_with_a_database_is_cached(cache_root, tmp_path, monkeypatch, rng):
    """Reading the tuning database (which opens its WAL) does not change its identity."""
    import shutil
    from pathlib import Path
    shutil.copy(Path(__file__).resolve().parents[2] / "tuning_logs" / "kiln.db",
                tmp_path / "k.db")
    monkeypatch.setattr(model_cache, "RACY_SECONDS", -1.0)    # as if copied long ago
    path = tmp_path / "m.onnx"
    onnx.save(models.default_cnn(image_size=13, width=8), path)
    cold = kiln.compile(str(path), db=str(tmp_path / "k.db"), jobs=1)
    warm = kiln.compile(str(path), db=Database(tmp_path / "k.db"), jobs=1)
    assert not _cached(cold) and _cached(warm)
    assert [s.source for s in warm.plan.steps] == [s.source for s in cold.plan.steps]
    _check(warm, path, rng)


def test_bfloat16_and_zero_size_constants_round_trip(cache_root):
    """Constants with no buffer format (bfloat16) or a zero in their shape are stored too."""
    import ml_dtypes
    from onnx import TensorProto, helper, numpy_helper
    c = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16) / 4
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"]), helper.make_node("Mul", ["e", "e"], ["z"])],
        "t", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [0, 3])],
        initializer=[numpy_helper.from_array(c, "c"),
                     numpy_helper.from_array(np.zeros((0, 3), np.float32), "e")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.ones((2, 3), ml_dtypes.bfloat16)
    cold = kiln.compile(m, db=None, jobs=1)
    warm = kiln.compile(m, db=None, jobs=1)
    assert not _cached(cold) and _cached(warm)
    y, z = warm.run({"x": x})
    np.testing.assert_array_equal(y.astype(np.float32), (x + c).astype(np.float32))
    assert z.shape == (0, 3)

"""The fixed costs of a compile (issue 33 item 1): a DynamicModel's up-front checks are
remembered per model bytes (graph/onnx/checked.py) and skipped only for the same bytes, Kiln
sources and onnx version; a warm compile gives the cold one's outputs bit for bit, and a stale
entry (changed model, Kiln source, target, threads) misses; a parallel compile's weights are
packed aligned while its workers build (graph/compile/model._pack_weights); the host target is
detected once. Oracle: onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import kiln
from kiln.codegen import cache_store
from kiln.codegen.target import Target
from kiln.graph.compile import model_cache
from kiln.graph.onnx import checked
from kiln.graph.runtime import dynamic
from kiln.graph.runtime.executor import ARENA_ALIGNMENT
from kiln.te.errors import ModelFormatError, UnsupportedOperatorError

from .graph_helpers import make_model, ort_run

RNG = np.random.default_rng(33)


@pytest.fixture
def checker_calls(monkeypatch):
    """Counts onnx.checker runs (the real checker is called)."""
    calls = []
    real = onnx.checker.check_model

    def spy(model, *args, **kw):
        calls.append(1)
        return real(model, *args, **kw)
    monkeypatch.setattr(onnx.checker, "check_model", spy)
    return calls


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _symbolic(scale: float = 0.5):
    """MatMul (3 -> 7, odd widths) + Relu over a symbolic batch 'N'."""
    return make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                       helper.make_node("Relu", ["m"], ["y"])],
                      {"x": (("N", 3), "float32")}, ["y"], {"w": _rand(3, 7) * scale})


def _cached(model) -> list[bool]:
    return [bool(s.plan.meta["compile"].get("cached")) for s in model.specializations]


def test_checks_run_once_per_model_bytes_and_again_for_other_bytes(cache_root,
                                                                   checker_calls):
    first, other = _symbolic(), _symbolic()
    model = kiln.compile(first, db=None, jobs=1)
    assert len(checker_calls) == 1
    x = {"x": _rand(3, 3)}
    np.testing.assert_allclose(model.run(x)[0], ort_run(first, x)[0], rtol=1e-5, atol=1e-6)
    assert len(checker_calls) == 1                # nor is the specialisation checked again
    kiln.compile(first, db=None, jobs=1)          # the same bytes: checked before
    assert len(checker_calls) == 1
    kiln.compile(other, db=None, jobs=1)          # other weights: other bytes
    assert len(checker_calls) == 2


def test_a_changed_kiln_source_or_onnx_version_checks_again(cache_root, checker_calls,
                                                            monkeypatch):
    model = _symbolic()
    kiln.compile(model, db=None, jobs=1)
    kiln.compile(model, db=None, jobs=1)
    assert len(checker_calls) == 1
    monkeypatch.setattr(onnx, "__version__", onnx.__version__ + ".other")
    kiln.compile(model, db=None, jobs=1)
    assert len(checker_calls) == 2
    monkeypatch.undo()
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache_root))
    monkeypatch.setattr(onnx.checker, "check_model", lambda *a, **k: checker_calls.append(1))
    monkeypatch.setattr(cache_store, "environment_key",
                        lambda: {"kiln_source": "an edited Kiln"})
    kiln.compile(model, db=None, jobs=1)
    assert len(checker_calls) == 3


def test_without_a_cache_every_compile_checks(tmp_path, monkeypatch, checker_calls):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    model = _symbolic()
    kiln.compile(model, db=None, jobs=1)
    kiln.compile(model, db=None, jobs=1)
    assert len(checker_calls) == 2


def test_a_failed_check_is_never_remembered(cache_root):
    bad = _symbolic()
    bad.graph.node[1].op_type = "NoSuchOp"
    for _ in range(2):
        with pytest.raises(UnsupportedOperatorError, match="NoSuchOp"):
            kiln.compile(bad, db=None, jobs=1)
    invalid = _symbolic()
    invalid.graph.node[0].input[1] = "missing"       # reads a value nothing defines
    for _ in range(2):
        with pytest.raises(ModelFormatError, match="invalid"):
            kiln.compile(invalid, db=None, jobs=1)
    assert not list((cache_root / "checked").rglob("*.ok"))


def test_check_model_once_returns_the_bytes_digest(cache_root):
    import hashlib
    model = _symbolic()
    digest = hashlib.sha256(model.SerializeToString()).hexdigest()
    assert checked.check_model_once(model) == digest == checked.check_model_once(model)


def test_a_digested_proto_keys_like_the_bare_proto(cache_root):
    model = _symbolic()
    digested = model_cache.DigestedProto(model, checked.check_model_once(model))
    args = ({"x": (5, 3)}, "native", None, 2, "nchwc", True)
    assert model_cache.model_key(digested, *args) == model_cache.model_key(model, *args)


def test_dynamic_warm_specialisations_match_cold_bit_for_bit(cache_root, tmp_path):
    path = tmp_path / "m.onnx"
    model = _symbolic()
    onnx.save(model, path)
    feeds = [{"x": _rand(n, 3)} for n in (1, 5, 2)]     # awkward batches: 1, a prime
    cold = kiln.compile(str(path), db=None, jobs=1)
    want = [cold.run(f)[0] for f in feeds]
    for f, w in zip(feeds, want):
        np.testing.assert_allclose(w, ort_run(model, f)[0], rtol=1e-5, atol=1e-6)
    warm = kiln.compile(str(path), db=None, jobs=1)
    got = [warm.run(f)[0] for f in feeds]
    assert _cached(cold) == [False] * 3 and _cached(warm) == [True] * 3
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _static_model():
    """Conv 3x3 (5 -> 8 channels, pad 1) + Relu + MatMul over a 1x5x7x9 image."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    return make_model(nodes, {"x": ((1, 5, 7, 9), "float32")}, ["y"],
                      {"w": _rand(8, 5, 3, 3) * 0.3, "fc": _rand(8, 11)})


def test_stale_entries_miss_and_warm_is_bit_identical(cache_root, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    model = _static_model()
    onnx.save(model, path)
    x = {"x": _rand(1, 5, 7, 9)}
    cold = kiln.compile(str(path), db=None, jobs=2, threads=1)
    warm = kiln.compile(str(path), db=None, jobs=2, threads=1)
    assert not cold.plan.meta["compile"].get("cached")
    assert warm.plan.meta["compile"].get("cached")
    np.testing.assert_array_equal(warm.run(x)[0], cold.run(x)[0])
    np.testing.assert_allclose(cold.run(x)[0], ort_run(model, x)[0], rtol=1e-4, atol=1e-5)
    # another thread count, another target: misses
    assert not kiln.compile(str(path), db=None, jobs=1, threads=2).plan.meta["compile"].get(
        "cached")
    other = "llvm -mcpu=x86-64-v3"
    assert not kiln.compile(str(path), target=other, db=None, jobs=1,
                            threads=1).plan.meta["compile"].get("cached")
    # an edited Kiln: every key changes
    monkeypatch.setattr(cache_store, "environment_key", lambda: {"kiln_source": "edited"})
    assert not kiln.compile(str(path), db=None, jobs=1, threads=1).plan.meta[
        "compile"].get("cached")
    monkeypatch.undo()
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache_root))
    # the original options still hit
    assert kiln.compile(str(path), db=None, jobs=1, threads=1).plan.meta["compile"].get(
        "cached")


def test_a_parallel_compile_packs_its_weights_while_the_workers_build(cache_root,
                                                                     monkeypatch):
    from kiln.graph.compile import model as model_mod
    from kiln.graph.runtime import executor
    copies = {"compile": [], "executor": []}

    def spy(where):
        real = executor.pack_aligned

        def pack(arrays, *args):
            copies[where].append(sorted(arrays))
            return real(arrays, *args)
        return pack
    monkeypatch.setattr(model_mod, "pack_aligned", spy("compile"))
    monkeypatch.setattr(executor, "pack_aligned", spy("executor"))
    model = _static_model()
    compiled = kiln.compile(model, db=None, jobs=2, threads=1)
    x = {"x": _rand(1, 5, 7, 9)}
    np.testing.assert_allclose(compiled.run(x)[0], ort_run(model, x)[0], rtol=1e-4, atol=1e-5)
    constants = [b.name for b in compiled.plan.buffers if b.kind == "constant"]
    # packed once, by the compile; the executor found them aligned and kept them
    assert constants and copies == {"compile": [sorted(constants)], "executor": []}
    for name in constants:
        arr = compiled.buffers[name]
        assert arr.nbytes == 0 or arr.ctypes.data % ARENA_ALIGNMENT == 0, name


def test_the_host_target_is_detected_once():
    a, b = Target.from_string("native"), Target.native()
    assert a is b and str(a) == str(Target.from_string(str(a)))


def test_the_default_database_opens_only_when_a_compile_reads_it(cache_root, tmp_path,
                                                                  monkeypatch):
    from kiln.autotune import default_db
    from kiln.graph.compile import model as model_mod
    user = tmp_path / "user" / "tuning.db"
    monkeypatch.setenv("KILN_TUNING_DB", str(user))
    monkeypatch.setattr(model_cache, "RACY_SECONDS", -1.0)     # files count as old at once
    opened = []
    real = model_mod.open_db
    monkeypatch.setattr(model_mod, "open_db", lambda db: opened.append(real(db)) or opened[-1])
    path = tmp_path / "m.onnx"
    onnx.save(_static_model(), path)
    default_db.open_database("default").records("none", "none")    # the user's log exists
    cold = kiln.compile(str(path), jobs=1, threads=1)
    assert opened[-1].opened             # a cold compile reads records
    warm = kiln.compile(str(path), jobs=1, threads=1)
    assert warm.plan.meta["compile"].get("cached") and not opened[-1].opened
    x = {"x": _rand(1, 5, 7, 9)}
    np.testing.assert_array_equal(warm.run(x)[0], cold.run(x)[0])


def test_a_lazy_database_reports_a_bad_file_at_first_use(tmp_path):
    from kiln.autotune.database import Database
    from kiln.te.errors import TuningDatabaseError
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database" * 100)
    db = Database(bad, lazy=True)
    assert not db.opened
    db.close()                          # nothing to close
    with pytest.raises(TuningDatabaseError, match="bad.db"):
        db.records("task", "target")
    with pytest.raises(TuningDatabaseError, match="bad.db"):
        Database(bad)


def test_a_file_compiled_before_is_loaded_without_parsing_it(cache_root, tmp_path,
                                                              monkeypatch):
    path = tmp_path / "m.onnx"
    model = _static_model()
    onnx.save(model, path)
    monkeypatch.setattr(model_cache, "RACY_SECONDS", -1.0)     # the file counts as old
    x = {"x": _rand(1, 5, 7, 9)}
    cold = kiln.compile(str(path), db=None, jobs=1, threads=1)
    reads = []
    real = dynamic.read_model
    monkeypatch.setattr(dynamic, "read_model", lambda *a: reads.append(a) or real(*a))
    warm = kiln.compile(str(path), db=None, jobs=1, threads=1)
    assert warm.plan.meta["compile"].get("cached") and reads == []
    np.testing.assert_array_equal(warm.run(x)[0], cold.run(x)[0])
    # the same shapes given explicitly: another request, parsed once, then remembered too
    shapes = {"x": (1, 5, 7, 9)}
    assert kiln.compile(str(path), db=None, jobs=1, threads=1,
                        input_shapes=shapes).plan.meta["compile"].get("cached")
    assert len(reads) == 1
    kiln.compile(str(path), db=None, jobs=1, threads=1, input_shapes=shapes)
    assert len(reads) == 1
    # a changed file: parsed and compiled anew, and right
    other = _static_model()
    onnx.save(other, path)
    again = kiln.compile(str(path), db=None, jobs=1, threads=1)
    assert not again.plan.meta["compile"].get("cached") and len(reads) == 2
    np.testing.assert_allclose(again.run(x)[0], ort_run(other, x)[0], rtol=1e-4, atol=1e-5)
    # a request whose model entry is gone falls back to the full compile
    for entry in (cache_root / "models").rglob("*.kmodel"):
        entry.unlink()
    gone = kiln.compile(str(path), db=None, jobs=1, threads=1)
    assert not gone.plan.meta["compile"].get("cached") and len(reads) == 3
    np.testing.assert_array_equal(gone.run(x)[0], again.run(x)[0])

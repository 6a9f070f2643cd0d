"""The persistent compiled-kernel cache (codegen/cache.py): hits compute what cold builds do,
anything that changes the code changes the key, bad entries are rebuilt, never loaded."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
import kiln.codegen.build  # noqa: F401 - the module, for monkeypatching
build_mod = sys.modules["kiln.codegen.build"]
from kiln.codegen import cache, cache_store
from kiln.codegen.cache_store import HEADER_SIZE, Store, cache_dir
from kiln.codegen.target import Target


@pytest.fixture
def builds(monkeypatch):
    """Counts LLVM compiles (cache misses) of codegen.build."""
    calls = []
    real = build_mod.compile_object

    def counting(text, target):
        calls.append(target)
        return real(text, target)
    monkeypatch.setattr(build_mod, "compile_object", counting)
    return calls


def _kernel(m=37, k=13, n=29, factor=8, scale=0.5, parallel=True, fastmath=None):
    """A fused exp-matmul with awkward (prime) sizes: tails on every split."""
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(te.exp(A[i, r] * scale) * B[r, j], axis=r),
                   name="C")
    s = kiln.create_schedule(C)
    io, jo, ii, ji = s[C].tile(*C.op.axis, factor, 8)
    s[C].reorder(io, jo, r, ii, ji)
    s[C].vectorize(ji)
    if parallel:
        s[C].parallel(io)
    extra = {} if fastmath is None else {"fastmath": fastmath}
    return kiln.build(s, [A, B, C], name="expmm", **extra), (m, k, n, scale)


def _check(f, shape, rng):
    m, k, n, scale = shape
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.zeros((m, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, np.exp(a * scale) @ b, rtol=1e-4, atol=1e-4)


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in (root / "kernels").rglob("*.kobj"))


def test_warm_hit_computes_what_the_cold_build_does(cache_root, builds, rng):
    cold, shape = _kernel()
    assert len(builds) == 1 and len(_entries(cache_root)) == 1
    warm, _ = _kernel()
    assert len(builds) == 1, "the second build ran LLVM: no cache hit"
    assert warm.cache_key == cold.cache_key and warm.params == cold.params
    assert warm.llvm_ir() == cold.llvm_ir()      # the stored optimized IR, read on demand
    assert "vfmadd" in warm.asm() or "vmul" in warm.asm()
    assert warm.ir() == cold.ir()
    _check(cold, shape, rng)
    _check(warm, shape, rng)


@pytest.mark.parametrize("change", [{"factor": 4}, {"scale": 0.25}, {"parallel": False},
                                    {"fastmath": False}, {"m": 41}])
def test_what_changes_the_code_changes_the_key(cache_root, builds, rng, change):
    base, _ = _kernel()
    other, shape = _kernel(**change)
    assert other.cache_key != base.cache_key and len(builds) == 2
    _check(other, shape, rng)


def test_the_key_covers_target_and_environment(monkeypatch):
    text = "define void @f() {\n  ret void\n}\n"
    native = Target.native()
    keys = {cache.kernel_key(text, native),
            cache.kernel_key(text, Target.from_string("llvm -mcpu=x86-64-v2")),
            cache.kernel_key(text + "\n", native)}
    assert len(keys) == 3
    env = cache_store.environment_key()
    assert env["kiln_source"] == cache_store.source_fingerprint() and len(env["llvm"]) >= 3
    before = cache.kernel_key(text, native)
    monkeypatch.setattr(cache_store, "FORMAT_VERSION", cache_store.FORMAT_VERSION + 1)
    cache_store.environment_key.cache_clear()
    try:
        assert cache.kernel_key(text, native) != before
    finally:
        monkeypatch.undo()
        cache_store.environment_key.cache_clear()


def _corrupt_truncate(path: Path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_flip(path: Path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40          # a flipped bit in the object code
    path.write_bytes(bytes(data))


def _corrupt_foreign(path: Path):
    path.write_bytes(b"\x7fELF" + os.urandom(300))


def _corrupt_header_only(path: Path):
    path.write_bytes(path.read_bytes()[:HEADER_SIZE - 5])


def _corrupt_other_key(path: Path):
    """A valid entry of another key copied over this one (same format, wrong content)."""
    data = bytearray(path.read_bytes())
    data[12:76] = b"0" * 64
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [_corrupt_truncate, _corrupt_flip, _corrupt_foreign,
                                     _corrupt_header_only, _corrupt_other_key])
def test_a_bad_entry_is_rebuilt_not_loaded(cache_root, builds, rng, corrupt, caplog):
    _kernel()
    (entry,) = _entries(cache_root)
    good = entry.read_bytes()
    corrupt(entry)
    warm, shape = _kernel()
    assert len(builds) == 2, "a corrupt entry was loaded"
    assert "ignoring" in caplog.text and "rebuilt" in caplog.text
    _check(warm, shape, rng)
    assert entry.read_bytes()[:76] == good[:76]          # magic, version, key: replaced
    assert cache.read_object(cache.kernel_store(), warm.cache_key) is not None
    _kernel()
    assert len(builds) == 2


def test_store_rejects_every_bad_variant(tmp_path):
    store = Store(tmp_path, "t", "bin")
    key = "ab" * 32
    assert store.read(key) is None                   # missing
    assert store.write(key, [b"hello ", memoryview(b"world")])
    mm, start = store.read(key)
    assert mm[start:] == b"hello world"
    mm.close()
    path = store.path(key)
    raw = path.read_bytes()
    for bad in (raw[:-1], raw + b"!", raw[:-1] + b"X", b"KILNCACH" + raw[8:12] + b"c" * 64
                + raw[76:], b""):
        path.write_bytes(bad)
        assert store.read(key) is None
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_cache_dir_settings(tmp_path):
    assert cache_dir({"KILN_CACHE_DIR": str(tmp_path)}) == tmp_path
    for off in ("off", "0", "OFF", " off "):
        assert cache_dir({"KILN_CACHE_DIR": off}) is None
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "kiln"
    assert cache_dir({}) == Path.home() / ".cache" / "kiln"


def test_disabled_cache_writes_nothing(tmp_path, monkeypatch, builds, rng):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    f, shape = _kernel()
    g, _ = _kernel()
    assert f.cache_key is None and g.cache_key is None
    assert not builds            # the cache-off path JITs in memory (compile_module)
    _check(g, shape, rng)
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def test_an_unwritable_cache_folder_is_not_fatal(tmp_path, monkeypatch, rng, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker))
    f, shape = _kernel()
    _check(f, shape, rng)
    assert "cannot write" in caplog.text


_CHILD = textwrap.dedent("""
    import sys, numpy as np, kiln
    from kiln import te
    sys.path.insert(0, {tests!r})
    from codegen.test_kernel_cache import _kernel, _check
    f, shape = _kernel(m=53, k=31, n=47)
    _check(f, shape, np.random.default_rng(int(sys.argv[1])))
    print(f.cache_key)
""")


def test_concurrent_processes_get_correct_kernels(cache_root):
    """Two processes compile (and store) the same kernel at once; a third loads it."""
    tests = str(Path(__file__).resolve().parent.parent)
    code = _CHILD.format(tests=tests)
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_root)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    keys = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(keys) == 1 and len(_entries(cache_root)) == 1
    third = subprocess.run([sys.executable, "-c", code, "7"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]
    assert not [p for p in cache_root.rglob(".tmp-*")]


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    """Readers racing writers of one key see a whole entry or none, never a broken one."""
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from kiln.codegen.cache_store import Store
        store, key = Store(Path(sys.argv[1]), "t", "bin"), "cd" * 32
        payload = bytes([int(sys.argv[2])]) * 2_000_000
        bad = 0
        for _ in range(40):
            store.write(key, [payload])
            found = store.read(key)
            if found is not None:
                mm, start = found
                body = mm[start:]
                bad += len(set(body)) != 1 or len(body) != 2_000_000
                mm.close()
        print(bad)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(k + 1)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        assert out.strip() == "0"


def test_tuning_candidates_stay_out_of_the_cache(cache_root, rng):
    """codegen.build(cache_kernel=False), as autotune's measurement worker builds."""
    A = te.placeholder((19,), "float32", name="A")
    B = te.compute((19,), lambda i: A[i] * 3.0 + 1.0, name="B")
    func = kiln.lower(kiln.create_schedule(B), [A, B], name="axpb")
    f = kiln.codegen.build(func, cache_kernel=False)
    a, b = rng.standard_normal(19).astype("float32"), np.zeros(19, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 3.0 + 1.0, rtol=1e-6)
    assert f.cache_key is None and not (cache_root / "kernels").exists()

"""The source fingerprint in every cache key (codegen/cache_store.source_fingerprint): read
from a stat alias when one was stored, rehashed when any file's stat changes, never aliased
for files written in the last seconds."""
from __future__ import annotations

import hashlib
import time
import types

import pytest

from kiln.codegen import cache_store


@pytest.fixture
def sources(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "src"
    folder.mkdir()
    files = []
    for name, text in (("a.py", "x = 1\n"), ("b.py", "y = 2\n")):
        path = folder / name
        path.write_text(text)
        files.append((f"kiln/{name}", path))
    monkeypatch.setattr(cache_store, "_source_files", lambda: files)
    cache_store.source_fingerprint.cache_clear()
    yield files
    cache_store.source_fingerprint.cache_clear()


def _later(monkeypatch, seconds: float = 60.0) -> None:
    """The cache's clock `seconds` ahead: the files look that old (their ctime is now)."""
    monkeypatch.setattr(cache_store, "time", types.SimpleNamespace(
        time=lambda: time.time() + seconds))


def _hashed(files) -> str:
    h = hashlib.sha256()
    for label, path in files:
        h.update(f"{label}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _fresh() -> str:
    cache_store.source_fingerprint.cache_clear()
    return cache_store.source_fingerprint()


def _aliases(tmp_path) -> list:
    return list((tmp_path / "cache" / "aliases").rglob("*.src"))


def test_the_alias_gives_the_hashed_digest_and_a_change_rehashes(sources, tmp_path,
                                                                 monkeypatch):
    _later(monkeypatch)
    first = _fresh()
    assert first == _hashed(sources) and len(_aliases(tmp_path)) == 1
    # the next process reads the alias: no file is read
    monkeypatch.setattr(type(sources[0][1]), "read_bytes",
                        lambda self: pytest.fail(f"{self} read despite the alias"))
    assert _fresh() == first
    monkeypatch.undo()
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache_store, "_source_files", lambda: sources)
    _later(monkeypatch)
    sources[1][1].write_text("y = 3\n")        # an edit of the same size
    changed = _fresh()
    assert changed == _hashed(sources) != first


def test_files_written_just_now_are_hashed_and_not_aliased(sources, tmp_path):
    sources[0][1].write_text("x = 4\n")          # modified now: within RACY_SECONDS
    assert _fresh() == _hashed(sources)
    assert _aliases(tmp_path) == []


def test_the_scan_finds_nested_sources_and_skips_caches_and_hidden_folders(tmp_path):
    for rel in ("a.py", "pkg/b.py", "pkg/deep/c.py", "pkg/notes.txt", "__pycache__/a.py",
                "pkg/__pycache__/b.py", ".hidden/d.py", "pkg/.tox/e.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert cache_store._py_files(str(tmp_path)) == ["a.py", "pkg/b.py", "pkg/deep/c.py"]

"""The cache folder, keys and entry files of the persistent cache (see codegen/cache.py)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import mmap
import os
import platform
import struct
import tempfile
import time
import zlib
from functools import lru_cache
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import masked_tail
from .pyentry import AVAILABLE as PYENTRY

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MAGIC = b"KILNCACH"
_HEADER = struct.Struct("<8sI64sQI")      # magic, format version, key (hex), length, crc32
HEADER_SIZE = _HEADER.size                  # where an entry's payload starts
OFF_VALUES = ("off", "0", "no", "false", "none")
# Kiln's packages (kiln.te -> te/, ...): their sources are part of every key
_PACKAGES = ("kiln", "kiln.te", "kiln.schedule", "kiln.codegen", "kiln.autotune", "kiln.graph")


def cache_dir(environ=None) -> Path | None:
    """The cache folder from KILN_CACHE_DIR, or None when caching is off."""
    environ = os.environ if environ is None else environ
    raw = environ.get("KILN_CACHE_DIR")
    if raw is not None and raw.strip():
        raw = raw.strip()
        if raw.lower() in OFF_VALUES:
            return None
        return Path(raw).expanduser()
    xdg = environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kiln"


GENERIC_ENV = "KILN_GENERIC_DIR"


def generic_dir(environ=None) -> Path | None:
    """The folder of the per-machine generic kernel library (codegen/generic/library.py):
    KILN_GENERIC_DIR, else `kiln-generic` next to the default cache folder; None when it
    is "off". It is apart from KILN_CACHE_DIR on purpose: the library belongs with the
    install, and an emptied model or kernel cache still finds it."""
    environ = os.environ if environ is None else environ
    raw = environ.get(GENERIC_ENV, "").strip()
    if raw:
        return None if raw.lower() in OFF_VALUES else Path(raw).expanduser()
    root = cache_dir({k: v for k, v in environ.items() if k != "KILN_CACHE_DIR"})
    return None if root is None else root.parent / "kiln-generic"


def open_generic_store(kind: str, suffix: str, environ=None) -> "Store | None":
    root = generic_dir(environ)
    return None if root is None else Store(root, kind, suffix)


# a source file written this recently may change again within its clock tick (same times):
# the fingerprint is then hashed from the bytes, never taken from a stat alias
RACY_SECONDS = 3.0


def _py_files(root: str, rel: str = "") -> list[str]:
    """The .py files under `root`, relative, '/'-separated and sorted. os.scandir, skipping
    __pycache__ and hidden folders: a quarter of os.walk's time (every process that touches
    the cache pays it; a warm model load takes ~12 ms in all)."""
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".py"):
                found.append(rel + name)
            elif name != "__pycache__" and name[0] != "." and entry.is_dir():
                found += _py_files(entry.path, f"{rel}{name}/")
    return found if rel else sorted(found, key=lambda r: r.split("/"))


def _source_files() -> list[tuple[str, str | Path]]:
    """(label, path) of every .py file of Kiln's packages (paths as strings: a Path object
    each cost more than the stat)."""
    files = []
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        for root in sorted(spec.submodule_search_locations or ()):
            files += [(f"{name}/{rel}", os.path.join(root, rel)) for rel in _py_files(root)]
    return files


def _source_stats(files) -> list:
    out = []
    for label, path in files:
        st = os.stat(path)
        out.append([label, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    return out


@lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """sha256 over the path and bytes of every .py file of Kiln's packages. Reading and
    hashing them costs ~30 ms in every process that touches the cache; a small alias entry
    keyed on every file's stat (path, inode, size, times) keeps the digest, so a later
    process only stats them (any write to a file changes its times)."""
    files = _source_files()
    stats = _source_stats(files)
    root = cache_dir()
    store = Store(root, "aliases", "src") if root is not None else None
    alias = hashlib.sha256(json.dumps(stats).encode()).hexdigest()
    if store is not None and (found := store.read(alias)) is not None:
        mm, start = found
        digest = mm[start:].decode()
        mm.close()
        return digest
    h = hashlib.sha256()
    for label, path in files:
        h.update(f"{label}\0".encode())
        h.update(Path(path).read_bytes())
    digest = h.hexdigest()
    newest = max((max(s[4], s[5]) for s in stats), default=0) / 1e9
    if (store is not None and time.time() - newest > RACY_SECONDS
            and _source_stats(files) == stats):
        store.write(alias, [digest.encode()])
    return digest


@lru_cache(maxsize=1)
def environment_key() -> dict:
    """What besides a kernel's own description decides its machine code."""
    return {"format": FORMAT_VERSION, "kiln_source": source_fingerprint(),
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "numpy": np.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "pyentry": PYENTRY,
            "masked_tails": masked_tail.ENABLED}


def make_key(kind: str, **parts) -> str:
    """sha256 hex of a canonical JSON of `parts` plus the environment (see module doc)."""
    doc = {"kind": kind, "env": environment_key(), **parts}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"),
                                     default=str).encode()).hexdigest()


class Store:
    """Entries of one kind (a sub-folder of the cache folder) as files `<key>.<suffix>`."""

    def __init__(self, root: Path, kind: str, suffix: str):
        self.folder = root / kind
        self.suffix = suffix

    def path(self, key: str) -> Path:
        return self.folder / f"{key[:2]}" / f"{key}.{self.suffix}"

    def write(self, key: str, parts) -> bool:
        """Store the payload `parts` (bytes-like, concatenated) under `key`; False (logged)
        when the folder cannot be written: the cache is an optimisation, never fatal."""
        path = self.path(key)
        crc, length = 0, 0
        for p in parts:
            crc, length = zlib.crc32(p, crc), length + len(memoryview(p).cast("B"))
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, key.encode(), length, crc)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                for p in parts:
                    f.write(p)
            os.replace(tmp, path)
            tmp = None
            return True
        except OSError as exc:
            log.warning("kernel cache: cannot write %s (%s); continuing without it", path, exc)
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def read(self, key: str) -> tuple[mmap.mmap, int] | None:
        """The entry of `key` mapped read-only and where its payload starts, or None when
        it is missing or not a valid entry of `key` (logged; the caller rebuilds it)."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < _HEADER.size:
                    return self._invalid(path, "shorter than its header")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("kernel cache: cannot read %s (%s)", path, exc)
            return None
        magic, version, stored_key, length, crc = _HEADER.unpack_from(mm, 0)
        if magic != MAGIC or version != FORMAT_VERSION:
            return self._invalid(path, "not a Kiln cache entry of this format", mm)
        if stored_key != key.encode():
            return self._invalid(path, "stored under another key", mm)
        if length != size - _HEADER.size:
            return self._invalid(path, f"{size - _HEADER.size} payload bytes, header says "
                                 f"{length}", mm)
        if zlib.crc32(memoryview(mm)[_HEADER.size:]) != crc:
            return self._invalid(path, "checksum mismatch", mm)
        return mm, _HEADER.size

    @staticmethod
    def _invalid(path: Path, why: str, mm: mmap.mmap | None = None):
        log.warning("kernel cache: ignoring %s (%s); it will be rebuilt", path, why)
        if mm is not None:
            mm.close()


def open_store(kind: str, suffix: str, environ=None) -> Store | None:
    root = cache_dir(environ)
    return None if root is None else Store(root, kind, suffix)

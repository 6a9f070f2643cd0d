"""Whole compiled models in the persistent cache (KILN_CACHE_DIR, see codegen/cache.py).

A second `kiln.compile` of the same model with the same options loads its plan, its prepared
constants (packed and transformed weights, memory-mapped) and its kernels (from the kernel
cache) instead of importing, optimising, fusing, scheduling, lowering and compiling again.

The key covers everything the compile reads: the model (an ONNX file or ModelProto), the
input shapes, target, thread count, layout, Winograd switch, parallel runtime, the tuning
database the schedules came from, and (through codegen.cache_store.make_key) Kiln's sources
and the LLVM/numpy versions. A file (the model, the database and its WAL) is identified by its
sha256 of the model file's bytes (looked up, once it is older than RACY_SECONDS, by its path,
device, inode, size and modification and change times, which every later write changes); the
database by those times (of the file and its WAL): one written in the last RACY_SECONDS (a
write in the same clock tick as the stat may leave its times unchanged) keeps that compile
from using the model cache. A model given as a Graph object is not cached here (its kernels are).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import struct
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ...codegen import cache
from ...codegen.cache_store import HEADER_SIZE, Store, make_key, open_store
from ...codegen.runtime import backend
from ...codegen.target import Target
from ..runtime.executor import CompiledModel, Plan
from ..ir import Graph

log = logging.getLogger(__name__)

RACY_SECONDS = 3.0
_ALIGN = 64


def _stat_identity(path: Path) -> list | None:
    """The file's path, device, inode, size and times, or None when it changed in the last
    RACY_SECONDS (a write in the same clock tick may leave the times unchanged)."""
    st = os.stat(path)
    if time.time() - max(st.st_mtime, st.st_ctime) <= RACY_SECONDS:
        return None
    return [str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns]


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _content_identity(path: Path) -> str:
    """sha256 of the file's bytes, read from a small alias entry keyed on its stat identity
    when one was stored (hashing a 100 MB model costs ~0.1 s); else hashed, and the alias
    stored if the file is old enough and did not change while being hashed (so a compile's
    check at its end, still_valid, and the next compile only stat the file)."""
    aliases = open_store("aliases", "sha")
    before = _stat_identity(path)
    if aliases is None or before is None:
        return _digest(path)
    alias = make_key("alias", stat=before)
    if (found := aliases.read(alias)) is not None:
        mm, start = found
        digest = mm[start:].decode()
        mm.close()
        return digest
    digest = _digest(path)
    if _stat_identity(path) == before:
        aliases.write(alias, [digest.encode()])
    return digest


@dataclasses.dataclass(frozen=True)
class DigestedProto:
    """A ModelProto with the sha256 of its serialised bytes, computed once (a DynamicModel's:
    its specialisations' keys then need not serialise the model again). Same identity as the
    bare proto's."""
    proto: object
    digest: str


def _model_identity(model) -> list | None:
    if isinstance(model, Graph):
        return None
    if isinstance(model, DigestedProto):
        return ["proto", model.digest]
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        return ["file", _content_identity(path)] if path.is_file() else None
    if hasattr(model, "SerializeToString"):
        return ["proto", hashlib.sha256(model.SerializeToString()).hexdigest()]
    return None


def _db_identity(db) -> list | None:
    """None: the database cannot be identified cheaply now (changed in the last seconds)."""
    if db is None:
        return ["none"]
    parts = []
    # a layered database (the default: the user's log over the shipped one) is both files
    for path in [Path(db.path)] + ([Path(db.base)] if getattr(db, "base", None) else []):
        if not path.is_file():
            return None
        parts.append(_stat_identity(path))
        wal = Path(str(path) + "-wal")   # an empty WAL (a reader's) adds nothing to the file
        if wal.exists() and wal.stat().st_size > 0:
            parts.append(_stat_identity(wal))
    return None if any(p is None for p in parts) else ["db", *parts]


def _plain_shape(shape):
    """A shape as JSON-able ints; a sequence input's shape is one shape per element."""
    if isinstance(shape, (list, tuple)):
        return [_plain_shape(d) for d in shape]
    return None if shape is None else int(shape)


def model_key(model, input_shapes: Mapping[str, Sequence[int]] | None, target: str,
              db, threads: int, layout: str, winograd: bool,
              zero_shot: list | None = None) -> str | None:
    """The cache key of compiling `model` with these options, or None when this compile
    cannot use the model cache (caching off, a Graph, a database written seconds ago).
    zero_shot: the ranking's settings when zero-shot picks are on (they are a function of
    the database, those settings and Kiln's sources, all in the key)."""
    if open_store("models", "kmodel") is None:
        return None
    ident = _model_identity(model)
    db_ident = _db_identity(db) if ident is not None else None
    if ident is None or db_ident is None:
        return None
    shapes = None if input_shapes is None else {k: _plain_shape(v)
                                                 for k, v in sorted(input_shapes.items())}
    return make_key("model", model=ident, input_shapes=shapes, target=target,
                    threads=threads, layout=layout, winograd=winograd, runtime=backend(),
                    db=db_ident, **({"zero_shot": zero_shot} if zero_shot else {}))


def still_valid(key: str, model, input_shapes, target, db, threads, layout, winograd,
                zero_shot: list | None = None) -> bool:
    """Whether the inputs still are what `key` was made of (a model or database written
    during the compile must not be stored under the old key: any write changes the file's
    stat identity, so its alias misses and the file is hashed again)."""
    return model_key(model, input_shapes, target, db, threads, layout, winograd,
                     zero_shot) == key


# ---------------------------------------------------------------- a file's compile, as asked for
def request_key(model, input_shapes, target: str, db, threads: int, layout: str,
                winograd: bool, zero_shot: list | None = None) -> str | None:
    """The key of compiling the ONNX file `model` with the options as the caller gave them
    (`input_shapes` as given, not as resolved from the model), or None (not a file, caching
    off, a database written seconds ago). It maps to the model's key (remember_request), so a
    compile that was made before is loaded without parsing the model: parsing is the largest
    fixed cost of a warm compile of a big model (ResNet-18's 45 MB: 0.07-0.25 s)."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    key = model_key(model, input_shapes, target, db, threads, layout, winograd, zero_shot)
    return None if key is None else make_key("request", options=key)


def load_requested(request: str, target: Target, threads: int) -> CompiledModel | None:
    """The model a compile under `request` made before, or None."""
    aliases = open_store("aliases", "req")
    found = aliases.read(request) if aliases is not None else None
    if found is None:
        return None
    mm, start = found
    key = mm[start:].decode()
    mm.close()
    return load(key, target, threads)


def remember_request(request: str, key: str) -> None:
    """Record that the compile asked for as `request` is the model stored under `key`."""
    aliases = open_store("aliases", "req")
    if aliases is not None:
        aliases.write(request, [key.encode()])


# ---------------------------------------------------------------- compiles with pinned values
def _value_digest(arr) -> str:
    arr = np.ascontiguousarray(arr)
    return hashlib.sha256(f"{arr.dtype}{arr.shape}".encode() + arr.tobytes()).hexdigest()


def pinned_key(key: str, constants: Mapping[str, np.ndarray]) -> str | None:
    """The key of a compile given `constants` (values of graph inputs: a DynamicModel passes
    every feed) under the options' `key`: `key` plus the values of the inputs that compile
    pinned (the ones that decided a shape), as a first compile recorded them (remember_pins).
    None before any compile of `key` recorded them. A value not pinned does not split the
    cache: a transformer's token ids vary, its compiled model does not."""
    pins = open_store("pins", "kpins")
    found = pins.read(key) if pins is not None else None
    if found is None:
        return None
    mm, start = found
    try:
        names = json.loads(mm[start:])
    except ValueError:
        return None
    finally:
        mm.close()
    if not isinstance(names, list) or any(n not in constants for n in names):
        return None
    return make_key("pinned", options=key,
                    values={n: _value_digest(constants[n]) for n in sorted(names)})


def pins_match(compiled: CompiledModel, constants: Mapping[str, np.ndarray]) -> bool:
    """Whether every value `compiled` was pinned to is the one given in `constants`."""
    from ..runtime.executor import pinned_arrays
    pinned = pinned_arrays(compiled.plan.meta.get("pinned", {}))
    return all(n in constants and np.array_equal(np.asarray(constants[n]), v)
               for n, v in pinned.items())


def remember_pins(key: str, compiled: CompiledModel) -> None:
    """Record which inputs the compile under the options' `key` pinned (see pinned_key)."""
    pins = open_store("pins", "kpins")
    if pins is not None:
        pins.write(key, [json.dumps(sorted(compiled.plan.meta.get("pinned", {}))).encode()])


def store(key: str, compiled: CompiledModel) -> bool:
    """Write `compiled` under `key`; False when a kernel of it is not in the kernel cache."""
    entries = {name: k.cache_key for name, k in compiled.kernels.items()}
    models = open_store("models", "kmodel")
    if models is None or any(v is None for v in entries.values()):
        return False
    constants = [(b.name, np.ascontiguousarray(compiled.buffers[b.name]))
                 for b in compiled.plan.buffers if b.kind == "constant"]
    table, offset = [], 0
    for name, arr in constants:
        offset = -(-offset // _ALIGN) * _ALIGN
        table.append({"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape),
                      "offset": offset, "nbytes": arr.nbytes})
        offset += arr.nbytes
    meta = json.dumps({"plan": compiled.plan.to_json(), "kernels": entries,
                       "constants": table}).encode()
    head = struct.pack("<I", len(meta)) + meta
    # constants start 64-aligned in the file: the entry header is 92 bytes
    base = -(-(HEADER_SIZE + len(head)) // _ALIGN) * _ALIGN - HEADER_SIZE
    parts: list = [head, bytes(base - len(head))]
    at = 0
    for (name, arr), row in zip(constants, table):
        if row["offset"] > at:
            parts.append(bytes(row["offset"] - at))
        # as bytes: a memoryview cannot hold bfloat16 (no buffer format) nor cast a zero-size
        # shape
        parts.append(memoryview(arr.reshape(-1).view(np.uint8)))
        at = row["offset"] + row["nbytes"]
    return models.write(key, parts)


def load(key: str, target: Target, threads: int) -> CompiledModel | None:
    """The model stored under `key`, or None (missing, invalid, or a kernel missing)."""
    models, kernels = open_store("models", "kmodel"), cache.kernel_store()
    if models is None or kernels is None:
        return None
    start = time.perf_counter()
    found = models.read(key)
    if found is None:
        return None
    mm, begin = found
    try:
        (n,) = struct.unpack_from("<I", mm, begin)
        meta = json.loads(mm[begin + 4:begin + 4 + n])
        base = -(-(begin + 4 + n) // _ALIGN) * _ALIGN
        constants = {}
        for row in meta["constants"]:
            dtype = np.dtype(row["dtype"])
            count = row["nbytes"] // dtype.itemsize
            if base + row["offset"] + row["nbytes"] > len(mm):
                raise ValueError(f"constant {row['name']} runs past the end")
            constants[row["name"]] = np.frombuffer(mm, dtype, count, base + row["offset"]
                                                   ).reshape(row["shape"])
        plan = Plan.from_json(meta["plan"], str(models.path(key)))
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        Store._invalid(models.path(key), f"malformed payload: {exc}")
        return None
    names = sorted(meta["kernels"])
    objects = [cache.read_object(kernels, meta["kernels"][n]) for n in names]
    if any(o is None for o in objects):
        log.info("model cache: a kernel of %s is gone from the kernel cache; recompiling",
                 plan.name)
        return None
    loaded = cache.load_objects(objects, target, [meta["kernels"][n] for n in names],
                                num_threads=threads)
    for name, kernel in zip(names, loaded):
        kernel.name = name
    seconds = round(time.perf_counter() - start, 3)
    cold = plan.meta.get("compile") or {}
    plan = dataclasses.replace(plan, meta={**plan.meta, "compile": {
        "seconds": seconds, "cached": True, "workers": 0, "worker_cpu_s": [],
        "cold_seconds": cold.get("seconds")}})
    compiled = CompiledModel(plan, dict(zip(names, loaded)), constants)
    compiled.set_num_threads(threads)
    log.info("compiled %s from the model cache in %.3f s", plan.name, seconds)
    return compiled

"""The one place Kiln reads its environment variables (but KILN_DUMP_IR, which the loop-IR
pipeline below codegen reads, and KILN_CACHE_DIR, read where the cache folder is chosen):
the thread count, the parallel runtime, the loop hints, the C compiler and the tuning log."""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

from ..te.errors import KernelArgumentError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeConfig:
    """Settings a kernel applies when it is loaded."""

    num_threads: int


def num_threads_from_env() -> int:
    """KILN_NUM_THREADS if set (a positive integer), else os.cpu_count()."""
    raw = os.environ.get("KILN_NUM_THREADS", "").strip()
    if not raw:
        return os.cpu_count() or 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise KernelArgumentError(f"KILN_NUM_THREADS={raw!r} is not a positive integer; "
                                  "set it to e.g. 2, or unset it to use every core")
    return value


def resolve_threads(threads: int | None) -> int:
    """`threads` if given, else KILN_NUM_THREADS, else every core: what the API boundary
    (kiln.compile/tune/build, codegen.build, the CLI, a Runner's options) turns a thread
    count it was not given into, once; the functions below it take the int."""
    return num_threads_from_env() if threads is None else threads


def parallel_runtime_setting() -> str:
    """KILN_PARALLEL_RUNTIME, lower-case ("" when unset): kiln, gomp or serial."""
    return os.environ.get("KILN_PARALLEL_RUNTIME", "").strip().lower()


def loop_hints_setting() -> str:
    """KILN_LOOP_HINTS, lower-case (default "all")."""
    return os.environ.get("KILN_LOOP_HINTS", "all").strip().lower()


def c_compiler_setting() -> str | None:
    """CC: the C compiler driver to link shared libraries with, if set."""
    return os.environ.get("CC")


def tuning_db_setting() -> str | None:
    """KILN_TUNING_DB: where new measurements go, if set."""
    return os.environ.get("KILN_TUNING_DB") or None


def data_home() -> str | None:
    """XDG_DATA_HOME, if set."""
    return os.environ.get("XDG_DATA_HOME") or None


def runtime_config() -> RuntimeConfig:
    return RuntimeConfig(num_threads=num_threads_from_env())


@contextlib.contextmanager
def threads_env(n: int | None):
    """KILN_NUM_THREADS=n inside the block (None: unchanged), restored after: the thread count
    for measurement workers started and kernels loaded meanwhile."""
    if n is None:
        yield
        return
    before = os.environ.get("KILN_NUM_THREADS")
    os.environ["KILN_NUM_THREADS"] = str(n)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KILN_NUM_THREADS", None)
        else:
            os.environ["KILN_NUM_THREADS"] = before

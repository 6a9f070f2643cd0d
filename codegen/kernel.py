"""The compiled-kernel callable: argument checking, the ctypes call, inspection, timing.

Calls go through the generated checked entry of codegen/pyentry.py; only when it reports a
problem does Python look at the arguments (to raise a precise KernelArgumentError).
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..te.errors import CodegenError, KernelArgumentError
from .jit import assembly
from .pyentry import fill_table
from .runtime import pool_address
from .target import Target


@dataclass(frozen=True)
class ParamSpec:
    """What a kernel expects for one parameter."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    written: bool

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "written": self.written}

    @staticmethod
    def from_json(d: dict) -> ParamSpec:
        return ParamSpec(d["name"], d["dtype"], tuple(d["shape"]), bool(d["written"]))


class Kernel:
    """A compiled kernel: `kernel(*arrays)` writes its outputs in place.

    Arrays must be C-contiguous numpy arrays of exactly the parameter dtypes and shapes;
    written parameters must be writeable. Parameters are assumed not to alias each other.
    """

    def __init__(self, name: str, symbol: str, params: tuple[ParamSpec, ...], target: Target,
                 address: int, threads_address: int, *, entry: tuple[int, int] | None = None,
                 func=None, optimized_ir: str | Callable[[], str] | None = None,
                 keepalive=None,
                 compile_seconds: float = 0.0, pool_slot: int | None = None,
                 num_threads: int):
        self.name, self.symbol, self.params, self.target = name, symbol, params, target
        self.func = func
        self.compile_seconds = compile_seconds
        self.cache_key: str | None = None     # its entry in the kernel cache (codegen.cache)
        self._optimized_ir = optimized_ir
        self._keepalive = keepalive
        self._threads = ctypes.c_int32.from_address(threads_address)
        if pool_slot:      # the kernel's PARALLEL loops run on the process's pool
            ctypes.c_void_p.from_address(pool_slot).value = pool_address()
        self.set_num_threads(num_threads)
        n = len(params)
        self.address = address        # the raw entry: void(ptr...), no argument checks
        self._raw = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n))(address)
        self._entry = None
        if entry is not None:
            fill_table(entry[1], params)
            self._entry = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.py_object] * n))(entry[0])
        self._checks = tuple((np.dtype(p.dtype), p.shape, p.written) for p in params)

    # ------------------------------------------------------------------ calling
    def __call__(self, *arrays) -> None:
        if self._entry is not None and len(arrays) == len(self._checks) and not self._entry(
                *arrays):
            return
        self._checked_call(arrays)

    def _checked_call(self, arrays) -> None:
        if len(arrays) != len(self._checks):
            raise KernelArgumentError(
                f"kernel '{self.name}' takes {len(self._checks)} arrays "
                f"({', '.join(p.name for p in self.params)}), got {len(arrays)}")
        for k, (a, (dtype, shape, written)) in enumerate(zip(arrays, self._checks)):
            if (type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape
                    or not a.flags.c_contiguous or (written and not a.flags.writeable)):
                self._argument_error(k, a)
        pointers = [a.ctypes.data for a in arrays]
        for k, p in enumerate(self.params):
            if p.written and any(pointers[k] == q for j, q in enumerate(pointers) if j != k):
                raise KernelArgumentError(
                    f"argument '{p.name}' of kernel '{self.name}' shares memory with another "
                    "argument; kernels assume parameters do not alias (pass a copy, "
                    f"{p.name}.copy())")
        self._raw(*pointers)

    def _argument_error(self, k: int, a) -> None:
        p = self.params[k]
        where = f"argument '{p.name}' of kernel '{self.name}'"
        if not isinstance(a, np.ndarray):
            raise KernelArgumentError(
                f"{where}: expected a numpy array {p.describe()}, got {type(a).__name__}. "
                f"Pass np.asarray(x, dtype=np.{p.dtype}).")
        got = f"{a.dtype}{list(a.shape)}"
        if a.dtype != np.dtype(p.dtype):
            raise KernelArgumentError(f"{where}: expected {p.describe()}, got {got}. Cast with "
                                      f"{p.name}.astype(np.{p.dtype}).")
        if a.shape != p.shape:
            raise KernelArgumentError(f"{where}: expected {p.describe()}, got {got}: the shape "
                                      f"differs. Pass an array of shape {p.shape}.")
        if not a.flags.c_contiguous:
            raise KernelArgumentError(f"{where}: the array is not C-contiguous (a view or "
                                      f"transpose?). Pass np.ascontiguousarray({p.name}).")
        if p.written and not a.flags.writeable:
            raise KernelArgumentError(f"{where}: the kernel writes this array but it is "
                                      f"read-only. Pass a writeable copy ({p.name}.copy()).")
        raise KernelArgumentError(f"{where}: ndarray subclasses ({type(a).__name__}) are not "
                                  "accepted; pass np.asarray(...)")

    # ------------------------------------------------------------------ threads and timing
    def set_num_threads(self, n: int) -> None:
        """Threads for PARALLEL loops (normally KILN_NUM_THREADS, read when loaded)."""
        if n < 1:
            raise KernelArgumentError(f"kernel '{self.name}': thread count must be >= 1, got {n}")
        self._threads.value = n

    @property
    def num_threads(self) -> int:
        return self._threads.value

    def benchmark(self, args, number: int = 10, repeat: int = 3) -> list[float]:
        """Mean seconds per call over `number` calls, for each of `repeat` rounds."""
        self(*args)  # warm up (page faults, lazy binding)
        out = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                self(*args)
            out.append((time.perf_counter() - start) / number)
        return out

    def time_evaluator(self, number: int = 10, repeat: int = 3):
        """TVM-style: returns f(*args) -> list of mean seconds per call, one per repeat."""
        return lambda *args: self.benchmark(args, number, repeat)

    # ------------------------------------------------------------------ inspection
    def ir(self) -> str:
        """The loop IR this kernel was compiled from, printed."""
        return str(self._need("func"))

    def llvm_ir(self) -> str:
        """The optimized LLVM IR."""
        return self._need("_optimized_ir")

    def asm(self) -> str:
        """Assembly for the target."""
        return assembly(self._need("_optimized_ir"), self.target)

    def _need(self, attr: str):
        value = getattr(self, attr)
        if callable(value):          # read on first use (kernels loaded from the cache)
            value = value()
            setattr(self, attr, value)
        if value is None:
            raise CodegenError(f"kernel '{self.name}' was loaded from a library and carries no "
                               f"{attr.strip('_')}; rebuild it with kiln.codegen.build() to "
                               "inspect it")
        return value

    def export(self, path) -> "Path":
        """Write this kernel to a shared library (see export.export_library)."""
        from .export import export_library  # export builds on Kernel
        return export_library([self], path)

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        return f"<Kernel {self.name}({params}) target='{self.target}'>"

"""Tiered compilation: a model that runs at once on kernels built fast, while its optimised
kernels are built in the background and swapped in between runs.

Tier 1 ("fast") is each task's default schedule with the window taps' and (but in convs)
the register tiles' unrolling off (FAST_OFF_KNOBS, CONV_ONLY_KNOBS: LLVM keeps those loops)
through LLVM's O1 pipeline (FAST_PIPELINE, FAST_CODEGEN_OPT). Its kernels never enter the
kernel cache or the model cache: only the optimised tier does, so no later compile is ever
served a tier-1 kernel. Tier 2 ("optimized") is exactly what an untiered compile builds
(the database's schedules, O3), made from the same graph and tasks in a background thread
(its own compile workers); `TieredModel` swaps it in atomically between runs.

kiln.compile is tiered by default (KILN_TIERED=0 or `kiln.compile(..., tiered=False)` turns it
off); a tiered compile's first tier is graph/generic's generic kernels where they cover the
model, else tier 1 below. See benchmarks/RESULTS.md for what each tier costs. A process that ends while a tier-2 build
runs waits for it at exit (so the model cache is filled and the next compile is warm).
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Callable, Mapping

from ...autotune.dispatch import Selection
from ...autotune.space.rules import SearchSpace
from ...codegen.jit import compile_object
from ...codegen.target import Target
from ...schedule import create_schedule, lower
from ...schedule.ir import PrimFunc
from ...te.errors import KilnError
from ...te.workload import topo_ops
from . import parallel_build
from ..runtime.executor import CompiledModel
from .tasks import ModelTask

log = logging.getLogger(__name__)

GENERIC, FAST, OPTIMIZED = "generic", "fast", "optimized"
FAST_PIPELINE = "o1"      # codegen.jit.PIPELINES
FAST_CODEGEN_OPT = 3      # 0 (FastISel) ran tier-1 kernels 1.3-3.4x slower for ~15% less CPU
FAST_SOURCE = "default (fast tier)"
ENV = "KILN_TIERED"
# On: a tiered compile starts on generic kernels (graph/generic) where the library covers the
# model, so its first result comes in a few times onnxruntime's session time instead of 20x
# or more (benchmarks/RESULTS.md, "the generic tier"); its first runs are slower until the
# optimised kernels are swapped in. Where the generic tier cannot serve, the first tier is
# the fast one (per-model kernels at O1).
DEFAULT_TIERED = True


def tiered_setting(tiered: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """`tiered` if given, else KILN_TIERED ("1"/"on"/"true" or "0"/"off"/"false"), else
    DEFAULT_TIERED."""
    if tiered is not None:
        return bool(tiered)
    value = (os.environ if environ is None else environ).get(ENV, "").strip().lower()
    if value in ("", "default"):
        return DEFAULT_TIERED
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise KilnError(f"{ENV}={value!r}: use 1 (tiered compilation on) or 0 (off)")



# The knobs tier 1 turns off: window taps stay loops for LLVM. A conv's register tile
# (`unroll`) stays unrolled: tier 1 then ran the CNNs 0.54-0.84x the time it took with it
# off (mobilenetv2_like 0.56x, resnet18_like 0.54x, default_cnn 0.80-0.84x) for 0-21% more
# tier-1 compile CPU; a matmul's register tile is rolled (the transformers ran the same,
# 0.96-1.09x, and their IR emission took twice the CPU with it unrolled). benchmarks/
# RESULTS.md, "the fixed costs of a cold compile".
FAST_OFF_KNOBS = ("window",)
CONV_ONLY_KNOBS = ("unroll",)


def _has_conv(task) -> bool:
    """A direct or Winograd convolution is part of the task (its ops' tags say so)."""
    return any("conv" in tag or "winograd" in tag
               for tag in (getattr(op, "tag", "") or "" for op in topo_ops(list(task.outputs))))


def fast_config(space: SearchSpace) -> dict:
    """The space's default config with the window taps' unrolling off, and the register
    tile's too but in convolutions (FAST_OFF_KNOBS, CONV_ONLY_KNOBS)."""
    config = space.default_config()
    off = FAST_OFF_KNOBS + (() if _has_conv(space.task) else CONV_ONLY_KNOBS)
    for name in config:
        if name.split("/")[-1] in off:
            config[name] = 0
    return config


def fast_object(func: PrimFunc, target: Target) -> parallel_build.ObjectKernel:
    """`func` to an object file through the fast pipeline; not cached."""
    start = time.perf_counter()
    text, symbol, params = parallel_build.kernel_text(func, target)
    optimized_ir, code, _ = compile_object(text, target, FAST_PIPELINE, FAST_CODEGEN_OPT)
    return parallel_build.ObjectKernel(func, symbol, params, optimized_ir, code,
                                       time.perf_counter() - start, None)


def fast_func(mt: ModelTask, target: Target, threads: int | None = None) -> PrimFunc:
    """The task lowered with the fast config of its space (the unrolled default if that
    fails to build)."""
    if all(0 in t.shape for t in mt.task.outputs):
        sch = create_schedule(list(mt.task.outputs))
        return lower(sch, list(mt.task.args), name=mt.name)
    space = SearchSpace(mt.task.retargeted(target), threads, target)
    try:
        sch, args = space.apply(fast_config(space))
        return lower(sch, args, name=mt.name)
    except KilnError as exc:
        log.warning("%s: its fast-tier schedule failed to build (%s); using the default",
                    mt.name, exc)
        sch, args = space.apply(space.default_config())
        return lower(sch, args, name=mt.name)


def build_fast_task(mt: ModelTask, target: Target, selection: Selection,
                    build: Callable | None = None, threads: int | None = None):
    """graph/compile/model._build_task's signature for tier 1: the fast config of the task's
    space, whatever the selection, to an ObjectKernel (`build` is ignored: the fast tier
    never goes through the kernel cache); the unrolled default if that fails to build.
    (A tiered compile builds its tasks several to a module: fast_batch.py.)"""
    return fast_object(fast_func(mt, target, threads), target), FAST_SOURCE


def no_record(mt: ModelTask) -> Selection:
    """The fast tier reads no database."""
    return Selection(None)


# ---------------------------------------------------------------------------- the model
_RUNNING: "weakref.WeakSet[TieredModel]" = weakref.WeakSet()


class TieredModel(CompiledModel):
    """A CompiledModel that starts on tier-1 kernels and moves to the optimised ones when
    their background build ends: `run` serialises calls under a lock (so, unlike a plain
    CompiledModel, it is safe to call from several threads) and the swap takes the same
    lock, so every run uses one tier from start to end. `optimized()` waits for the swap
    and returns the optimised CompiledModel; `kernel_tiers()` and `summary()` say which tier
    each kernel is on. A failed optimised build is logged; the model stays on tier 1 and
    `optimized()` raises its error."""

    def __init__(self, first: CompiledModel, build_optimized: Callable[[], CompiledModel],
                 *, background: bool = True):
        # (no CompiledModel.__init__: every attribute is read from the current tier)
        self._current = first
        self._first_seconds = first.plan.meta.get("compile", {}).get("seconds")
        self._first_tier = first.plan.meta.get("compile", {}).get("tier", FAST)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._threads: int | None = None
        self._build = build_optimized
        self.optimized_seconds: float | None = None
        self._pid = os.getpid()
        self._started = False
        self._start_lock = threading.Lock()
        _RUNNING.add(self)
        if not background:
            self._start(wait=True)

    def _start(self, wait: bool = False) -> None:
        """Start the optimised build (once): after the first run, or when something waits
        for it (optimized(), export, the process's exit), so it never competes with the
        compile's first result for the CPU."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
        if wait:
            self._background()
            return
        self._thread = threading.Thread(target=self._background, daemon=True,
                                        name=f"kiln-tier2-{self._current.plan.name}")
        self._thread.start()

    def _background(self) -> None:
        start = time.perf_counter()
        try:
            optimized = self._build()
        except BaseException as exc:    # noqa: BLE001 - kept for optimized() to raise
            self._error = exc
            log.warning("model '%s': building the optimised kernels failed (%s); it stays on "
                        "the fast tier", self._current.plan.name, exc)
        else:
            self.optimized_seconds = time.perf_counter() - start
            with self._lock:            # between two runs
                if self._threads is not None:
                    optimized.set_num_threads(self._threads)
                self._current = optimized
            log.info("model '%s': optimised kernels swapped in after %.2f s",
                     optimized.plan.name, self.optimized_seconds)
        finally:
            self._build = None
            self._done.set()

    # ------------------------------------------------------------------ tiers
    @property
    def run_lock(self) -> threading.Lock:
        """The lock every run holds (the optimised build's thread choice takes it while it
        times the model, so no first-tier run shares the cores with the timings)."""
        return self._lock

    @property
    def tier(self) -> str:
        """OPTIMIZED once swapped, else the first tier's name: GENERIC (graph/generic's
        shape-generic kernels) or FAST."""
        if self._done.is_set() and self._error is None:
            return OPTIMIZED
        return self._first_tier

    def optimized(self, timeout: float | None = None) -> CompiledModel:
        """Wait for the optimised tier (at most `timeout` seconds) and return it."""
        self._start()
        if not self._done.wait(timeout):
            raise KilnError(f"model '{self._current.plan.name}': the optimised kernels were "
                            f"not ready within {timeout} s")
        if self._error is not None:
            raise KilnError(f"model '{self._current.plan.name}': building the optimised "
                            f"kernels failed: {self._error}") from self._error
        return self._current

    def kernel_tiers(self) -> dict[str, str]:
        tier = self.tier
        own = getattr(self._current, "kernel_tiers", None)     # a GenericModel's mix
        if tier != OPTIMIZED and own is not None:
            return own()
        return {name: tier for name in self._current.kernels}

    # ------------------------------------------------------------------ CompiledModel's face
    def run(self, inputs):
        try:
            with self._lock:
                return self._current.run(inputs)
        finally:
            if not self._started:
                self._start()

    __call__ = run

    def set_num_threads(self, n: int) -> None:
        with self._lock:
            self._threads = n
            self._current.set_num_threads(n)

    def benchmark(self, inputs=None, repeat: int = 20, number: int = 1) -> float:
        """The optimised model's time (waits for it): the tier a caller keeps running."""
        self.optimized()
        with self._lock:
            return self._current.benchmark(inputs, repeat, number)

    def profile(self, inputs=None, repeat: int = 10) -> list[dict]:
        """The optimised model's profile (waits for it)."""
        self.optimized()
        with self._lock:
            return self._current.profile(inputs, repeat)

    def export(self, path):
        """Exports the optimised model (waits for it)."""
        return self.optimized().export(path)

    def summary(self) -> str:
        state = ("optimised kernels in use" + (f" (built in {self.optimized_seconds:.2f} s in "
                                               "the background)" if self.optimized_seconds
                                               else "")
                 if self.tier == OPTIMIZED else
                 f"optimised build failed: {self._error}" if self._error is not None else
                 "optimised kernels building in the background")
        lines = [f"tiered compile: every kernel on tier '{self.tier}'; {state}"]
        lines.append(self._current.summary())
        return "\n".join(lines)

    def __getattr__(self, name):
        # plan, kernels, buffers, arena, input_names, ...: the current tier's
        if name.startswith("__") or name in ("_current", "_lock", "_done"):
            raise AttributeError(name)
        return getattr(self._current, name)

    @property
    def plan(self):
        return self._current.plan

    @property
    def kernels(self):
        return self._current.kernels

    @property
    def buffers(self):
        return self._current.buffers

    @property
    def input_names(self):
        return self._current.input_names

    @property
    def output_names(self):
        return self._current.output_names

    def __repr__(self) -> str:
        return f"<TieredModel {self._current.plan.name}: tier '{self.tier}'>"


def wait_all(timeout: float | None = None) -> None:
    """Wait for every optimised build still running in this process (at exit: the model
    cache gets them). A forked child (a compile worker, which also runs this at its exit)
    inherits the set but not the threads: it waits for nothing."""
    for model in list(_RUNNING):
        if model._pid == os.getpid():
            model._start()      # a model never run nor waited for: built (and cached) now
            model._done.wait(timeout)


def _at_exit() -> None:
    wait_all()


def _hold_llvm_across_fork() -> None:
    """No fork while another thread is inside LLVM: a compile worker forked by a tier-2 build
    (or by any compile while one runs) would inherit llvmlite's lock held by a thread that
    does not exist in the child, and hang on its first LLVM call."""
    from llvmlite.binding import ffi
    lock = getattr(getattr(ffi.lib, "_lock", None), "_lock", None)
    if lock is not None and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=lock.acquire, after_in_parent=lock.release,
                            after_in_child=lock.release)


_hold_llvm_across_fork()

# Before concurrent.futures' own exit hook (registered when parallel_build imported it; these
# run in reverse order, before non-daemon threads are joined and before atexit): a tier-2
# build still running finishes (its worker pool still usable) and fills the model cache.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_at_exit)

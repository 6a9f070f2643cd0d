"""The worker side: `kiln worker SCHEDULER_ADDRESS` runs a Dask worker that measures one
candidate at a time for tuners on the cluster.

Why this shape: Dask cannot cancel a running task, so each candidate runs in Kiln's own
measuring subprocess (measure.Runner) with the tuner's timeout: a hang or a segfault costs
that subprocess, never the worker. The worker has one task thread and one unit of the
RESOURCE resource, which every measurement asks for, so two measurements never share its
cores. Its thread environment is set here, explicitly (a Dask nanny would set
OMP/MKL/OPENBLAS to 1 behind our back; there is no nanny). The fingerprint (fingerprint.py)
is held by a worker plugin that the tuner queries before it sends anything.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from dataclasses import replace

try:
    from distributed import WorkerPlugin
except ImportError:         # the cluster extra is not installed: the runner says what to do
    WorkerPlugin = object

from ..measure import MeasureOptions, MeasureResult, MeasureStatus, Runner
from .fingerprint import Fingerprint

log = logging.getLogger(__name__)

RESOURCE = "kiln-measure"        # one unit per worker: one measurement at a time
PLUGIN = "kiln"
THREAD_VARIABLES = ("KILN_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_NUM_THREADS")


def set_thread_environment(threads: int) -> None:
    """Every thread-count variable a kernel or a library may read, set to `threads`."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


class KilnPlugin(WorkerPlugin):
    """What makes a Dask worker a Kiln measuring worker: its fingerprint (made at setup,
    named after the worker) and its measuring subprocess (a Runner). `kiln worker` installs
    it; a LocalCluster gets it through Client.register_plugin."""

    name = PLUGIN
    idempotent = True

    def __init__(self, threads: int = 1, advertise_isa: tuple[str, ...] | None = None):
        self.threads = int(threads)
        self.advertise_isa = advertise_isa

    def setup(self, worker) -> None:
        # (the state hangs on the worker: in-process workers of a LocalCluster may share
        # one plugin object)
        worker.kiln_state = _WorkerState(
            Fingerprint.local(str(worker.name), self.threads, self.advertise_isa),
            self.threads)

    def teardown(self, worker) -> None:
        state = getattr(worker, "kiln_state", None)
        if state is not None:
            state.runner.close()


class _WorkerState:
    """One worker's fingerprint and measuring subprocess."""

    def __init__(self, fingerprint: Fingerprint, threads: int):
        self.fingerprint = fingerprint
        self.runner = Runner(MeasureOptions(threads=threads))
        self.lock = threading.Lock()        # belt and braces: one measurement at a time
        self.held: OrderedDict = OrderedDict()      # token -> the first copy of a task

    def hold(self, shared: dict) -> dict:
        """The copy of this task kept from earlier (a task sent inline arrives as a new
        object with every candidate; the Runner keeps one copy per object it is given)."""
        token = shared.get("token")
        kept = self.held.setdefault(token, shared)
        self.held.move_to_end(token)
        while len(self.held) > 4:
            self.held.popitem(last=False)
        return kept

    def _options(self, options: MeasureOptions) -> None:
        """The tuner's measurement settings, at this worker's thread count."""
        wanted = replace(options, threads=self.fingerprint.threads)
        if wanted != self.runner.options:
            self.runner.options = wanted

    def measure(self, shared: dict, config: dict, target: str, options: MeasureOptions,
                best_seconds: float, timeout: float, test_fault: str | None) -> dict:
        with self.lock:
            start = time.time()
            shared = self.hold(shared)
            self._options(options)
            try:
                result = self.runner.run(shared["task"], shared["data"], config, target,
                                         test_fault=test_fault, best_seconds=best_seconds,
                                         timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - e.g. the subprocess cannot start
                result = MeasureResult(MeasureStatus.RUNTIME_ERROR,
                                       error_text=f"worker {self.fingerprint.name}: {exc}")
            end = time.time()
        return {"result": result, "worker": self.fingerprint.name,
                "fingerprint": self.fingerprint.to_json(), "start": start, "end": end}

    def compare(self, shared: dict, configs: list[dict], target: str, options: MeasureOptions,
                rounds: int, rotate_bytes: int | None) -> list[MeasureResult]:
        with self.lock:
            shared = self.hold(shared)
            self._options(options)
            return self.runner.compare(shared["task"], shared["data"], configs, target,
                                       rounds=rounds, rotate_bytes=rotate_bytes)


def _plugin() -> "_WorkerState":
    from distributed import get_worker
    worker = get_worker()
    plugin = getattr(worker, "kiln_state", None)
    if plugin is None:
        raise RuntimeError(f"worker {worker.name} is not a `kiln worker` (no Kiln plugin); "
                           "start workers with `kiln worker SCHEDULER_ADDRESS`")
    return plugin


# ------------------------------------------------------------------ tasks the tuner submits

def fingerprint_of(dask_worker=None) -> dict | None:
    """This worker's fingerprint (None: a plain Dask worker, which gets no measurement)."""
    state = getattr(dask_worker, "kiln_state", None)
    return state.fingerprint.to_json() if state is not None else None


def measure_candidate(shared: dict, config: dict, target: str, options: MeasureOptions,
                      best_seconds: float, timeout: float, test_fault: str | None = None
                      ) -> dict:
    """Measure one candidate on this worker: {"result", "worker", "fingerprint", "start",
    "end"} (wall-clock stamps of the measurement, for provenance and overlap checks)."""
    if test_fault == "kill-worker":     # test hook: a candidate that takes the worker down
        os.kill(os.getpid(), signal.SIGKILL)
    return _plugin().measure(shared, config, target, options, best_seconds, timeout, test_fault)


def compare_configs(shared: dict, configs: list[dict], target: str, options: MeasureOptions,
                    rounds: int, rotate_bytes: int | None) -> list[MeasureResult]:
    """Time `configs` side by side on this worker (a confirmation, autotune/confirm.py)."""
    return _plugin().compare(shared, configs, target, options, rounds, rotate_bytes)


# ------------------------------------------------------------------ `kiln worker`

async def _serve(address: str, name: str, plugin: KilnPlugin, host: str | None,
                 stop: asyncio.Event) -> None:
    from distributed import Worker
    async with Worker(address, name=name, nthreads=1, resources={RESOURCE: 1},
                      plugins={plugin}, host=host, dashboard=False) as worker:
        fingerprint = worker.kiln_state.fingerprint
        print(f"kiln worker {name} at {worker.address}: {fingerprint.cpu} "
              f"({','.join(fingerprint.isa)}), {fingerprint.threads} thread(s), scheduler "
              f"{address}", flush=True)
        finished = asyncio.ensure_future(worker.finished())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([finished, stopped], return_when=asyncio.FIRST_COMPLETED)
        for pending in (finished, stopped):
            pending.cancel()
        worker.kiln_state.runner.close()


def run_worker(address: str, name: str, threads: int, advertise_isa: tuple[str, ...] | None,
               host: str | None = None) -> None:
    """Run a Kiln measuring worker until the scheduler goes away or SIGTERM/SIGINT."""
    from . import require_distributed
    require_distributed()
    set_thread_environment(threads)
    plugin = KilnPlugin(threads, advertise_isa)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await _serve(address, name, plugin, host, stop)

    asyncio.run(main())

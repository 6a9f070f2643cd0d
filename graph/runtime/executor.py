"""CompiledModel: runs a model's fused kernels from a prepared plan, and its export format.

A `Plan` is plain data (JSON-able): the buffers (graph inputs, constants, outputs, arena
slices, aliases) and the steps (kernel name + argument buffer names). `CompiledModel` turns
it once into a flat list of (callable, argument arrays) with every intermediate preallocated
in one arena laid out by the memory plan, so `run` walks no graph. `export` writes the
kernels as one shared library plus the plan (JSON) and constants (npz); `load_compiled`
rebuilds the model from those files without the ONNX model. Since every buffer's address is
fixed once the plan is prepared, `run` calls one native function that calls the kernels in
order (codegen.sequence), not each kernel from Python.
"""
from __future__ import annotations

import json
import logging
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ...codegen import Kernel, export_library, load_library
from ...codegen.runtime import prewake_address
from ...codegen.sequence import CallSequence
from ...te.errors import InternalError, KernelArgumentError, ModelFormatError
from ..ops.index_bounds import RunChecks

log = logging.getLogger(__name__)

PLAN_FORMAT = "kiln-compiled-model"
PLAN_VERSION = 1
ARENA_ALIGNMENT = 64
HUGE_PAGE = 2 << 20     # a transparent huge page on x86-64


@dataclass(frozen=True)
class BufferSpec:
    """Where a value lives at run time. kind: "input" (copied in per call), "constant",
    "output" (own array), "arena" (`offset` bytes into the arena), "alias" (a reshaped view
    of buffer `of`, read as this spec's dtype: a bitcast_int8x4 views uint8 bytes as int32)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    offset: int = 0
    of: str = ""


@dataclass(frozen=True)
class Step:
    """One kernel call: `kernel` (a name in the kernel table) on the buffers `args`.
    `source` says where the schedule came from ("database", "similar CPU", "zero-shot" or
    "default")."""

    group: str
    kernel: str
    args: tuple[str, ...]
    ops: tuple[str, ...] = ()
    source: str = "default"


@dataclass(frozen=True)
class Plan:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    buffers: tuple[BufferSpec, ...]
    steps: tuple[Step, ...]
    arena_bytes: int
    aliases: tuple[str, ...] = ()          # groups that became views, for the summary
    naive_bytes: int = 0                   # one allocation per intermediate (for the summary)
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        d = asdict(self)
        d["format"], d["version"] = PLAN_FORMAT, PLAN_VERSION
        return d

    @staticmethod
    def from_json(d: dict, source: str = "<plan>") -> "Plan":
        if d.get("format") != PLAN_FORMAT or d.get("version") != PLAN_VERSION:
            raise ModelFormatError(f"{source}: not a Kiln compiled-model plan (format "
                                   f"{d.get('format')!r} v{d.get('version')!r}; expected "
                                   f"{PLAN_FORMAT!r} v{PLAN_VERSION}). Re-export the model.")
        buffers = tuple(BufferSpec(b["name"], tuple(b["shape"]), b["dtype"], b["kind"],
                                   b["offset"], b["of"]) for b in d["buffers"])
        steps = tuple(Step(s["group"], s["kernel"], tuple(s["args"]), tuple(s["ops"]),
                           s["source"]) for s in d["steps"])
        return Plan(d["name"], tuple(d["inputs"]), tuple(d["outputs"]), buffers, steps,
                    d["arena_bytes"], tuple(d["aliases"]), d["naive_bytes"], d["meta"])


def _aligned_empty(nbytes: int, alignment: int = ARENA_ALIGNMENT) -> np.ndarray:
    """A uint8 array of `nbytes` whose data pointer is `alignment`-aligned and, as it is one
    of a model's two big blocks (the arena, the packed weights), HUGE_PAGE-aligned too.
    Why: numpy asks Linux for transparent huge pages on large blocks (madvise), which back
    only the whole 2 MB pages inside a block, so where a block starts decides which of its
    bytes they back. Two compiles of the same kernels can differ in speed by several percent;
    in one measurement 2 MB alignment cut that spread and ran ConvNeXt-atto faster, in
    another it did not (benchmarks/RESULTS.md, 2026-11-29, issue 33 item 4: unsettled).
    The rest of the over-allocation is never touched."""
    alignment = max(alignment, HUGE_PAGE)
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def _packed_constants(plan: Plan, constants: Mapping[str, np.ndarray],
                      alignment: int = ARENA_ALIGNMENT) -> Mapping[str, np.ndarray]:
    """`constants` as they are when each starts `alignment`-aligned (a model from the cache:
    views of one file), else copied into one aligned block, each at an aligned offset.
    Weights a compile has just transformed sit wherever numpy's allocator put them
    (16-byte aligned, scattered): AVX-512 loads of a misaligned weight straddle cache lines,
    and a freshly compiled ConvNeXt-atto ran 1.08-1.16x the time of the same model loaded
    from the cache (1.0-1.04x packed; benchmarks/RESULTS.md)."""
    specs = [b for b in plan.buffers if b.kind == "constant" and b.name in constants]
    arrays = {b.name: np.ascontiguousarray(constants[b.name], dtype=np.dtype(b.dtype))
              for b in specs}
    if all(a.nbytes == 0 or a.ctypes.data % alignment == 0 for a in arrays.values()):
        return constants
    return {**constants, **pack_aligned(arrays, alignment)}


def pack_aligned(arrays: Mapping[str, np.ndarray], alignment: int = ARENA_ALIGNMENT
                 ) -> dict[str, np.ndarray]:
    """Copies of the C-contiguous `arrays`, in their order, each `alignment`-aligned in one
    block (see _packed_constants; a compile packs its weights so while its workers build
    kernels, and the executor then finds them aligned)."""
    sizes = {name: -(-a.nbytes // alignment) * alignment for name, a in arrays.items()}
    block = _aligned_empty(max(sum(sizes.values()), 1), alignment)
    packed, offset = {}, 0
    for name, arr in arrays.items():
        view = block[offset:offset + arr.nbytes].view(arr.dtype).reshape(arr.shape)
        view[...] = arr
        packed[name] = view
        offset += sizes[name]
    return packed


def _fast_entry(kernel: Kernel):
    """The kernel's unchecked entry point when it has one (arguments are validated once when
    the plan is prepared), else the checked callable."""
    # NOTE: Kernel has no public unchecked call yet; `_entry` skips ~1 us/argument of checks.
    entry = getattr(kernel, "_entry", None)
    return entry if entry is not None else kernel


def _check_step(model: str, step: Step, kernel: Kernel, args: tuple[np.ndarray, ...]) -> None:
    """What Kernel.__call__ checks per call, checked once here (without running the kernel:
    zero-filled buffers could divide by zero)."""
    if len(args) != len(kernel.params):
        raise ModelFormatError(f"compiled model '{model}': step '{step.group}' passes "
                               f"{len(args)} buffers to kernel '{kernel.name}', which takes "
                               f"{len(kernel.params)}; re-export the model")
    for name, arr, p in zip(step.args, args, kernel.params):
        if (arr.dtype != np.dtype(p.dtype) or arr.shape != p.shape
                or not arr.flags.c_contiguous or (p.written and not arr.flags.writeable)):
            raise ModelFormatError(
                f"compiled model '{model}': buffer '{name}' ({arr.dtype}{list(arr.shape)}) "
                f"does not fit parameter '{p.name}' ({p.describe()}) of kernel "
                f"'{kernel.name}'; re-export the model")
    # (zero-size buffers hold nothing and may share an address)
    written = {a.ctypes.data for a, p in zip(args, kernel.params) if p.written and a.size}
    if any(a.ctypes.data in written for a, p in zip(args, kernel.params)
           if not p.written and a.size):
        raise InternalError(f"step '{step.group}' of model '{model}' passes an output buffer "
                            "also as an input; this is a bug in Kiln")


def given_inputs(model: str, names, constants: Mapping, inputs) -> dict:
    """`inputs` (one array, a list in input order, or a dict by name) as a dict by name: a
    list may leave out the inputs given to constants=; an unknown name or a wrong count is an
    error naming the model's inputs."""
    names = list(names)
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise KernelArgumentError(
                f"model '{model}' has no input named {', '.join(map(repr, unknown))}; "
                f"its inputs are {', '.join(names)}")
        return dict(inputs)
    values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    free = [n for n in names if n not in constants]
    order = free if len(values) == len(free) else names
    if len(values) != len(order):
        raise KernelArgumentError(
            f"model '{model}' takes {len(names)} inputs ({', '.join(names)}), got {len(values)}")
    return dict(zip(order, values))


def bind_input(model: str, name: str, buf: np.ndarray, value,
               pinned: Mapping[str, np.ndarray], dtype: str | None = None) -> None:
    """Copy `value` into input `name`'s buffer `buf` once its dtype and shape fit; an input
    whose value decided shapes (in `pinned`) must hold that value. `dtype`: the input's
    dtype as the model names it (default: the buffer's)."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    dtype = dtype or str(buf.dtype)
    if arr.dtype != buf.dtype or arr.shape != buf.shape:
        raise KernelArgumentError(
            f"input '{name}' of model '{model}': expected {dtype}{list(buf.shape)}, got "
            f"{arr.dtype}{list(arr.shape)}. Pass an array of that shape (cast with "
            f".astype(np.{dtype})).")
    np.copyto(buf, arr)
    if name in pinned and not np.array_equal(buf, pinned[name]):
        raise KernelArgumentError(
            f"input '{name}' of model '{model}' decides a shape, and the model was compiled "
            f"for its value {_preview(pinned[name])}; got {_preview(buf)}. Compile for that "
            f"value (kiln.compile(..., constants={{'{name}': ...}}), or without constants= to "
            "specialise at run time).")


def median_run_seconds(run, repeat: int = 20, number: int = 1) -> float:
    """Median seconds of one call of `run` over `repeat` timings of `number` calls each,
    after one warm-up call."""
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            run()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


class CompiledModel:
    """A model compiled to Kiln kernels. Not thread-safe: one run at a time (the arena and
    the input buffers are shared between calls)."""

    def __init__(self, plan: Plan, kernels: Mapping[str, Kernel],
                 constants: Mapping[str, np.ndarray], checked_calls: bool = False):
        self.plan = plan
        self.kernels = dict(kernels)
        self._specs = {b.name: b for b in plan.buffers}
        self.arena = _aligned_empty(max(plan.arena_bytes, 1))
        constants = _packed_constants(plan, constants)
        self.buffers: dict[str, np.ndarray] = {}
        for spec in plan.buffers:
            self.buffers[spec.name] = self._allocate(spec, constants)
        self._inputs = [(name, self.buffers[name], self._specs[name]) for name in plan.inputs]
        self._input_names = set(plan.inputs)
        # inputs whose values decided shapes at compile time: run checks them (and fills them
        # in when they are left out)
        self._pinned = pinned_arrays(plan.meta.get("pinned", {}))
        # low-bit element formats at the boundary (graph/ops/lowbit.py): run takes and returns
        # the ml_dtypes arrays onnx uses and converts them from/to Kiln's storage
        formats = plan.meta.get("io_formats") or ((), ())
        self._in_formats = dict(zip(plan.inputs, formats[0]))
        self._out_formats = list(formats[1])
        self._steps = []
        for step in plan.steps:
            kernel = self._kernel(step)
            args = tuple(self.buffers[a] for a in step.args)
            _check_step(self.plan.name, step, kernel, args)
            self._steps.append((kernel if checked_calls else _fast_entry(kernel), args))
        self._outputs = [self.buffers[name] for name in plan.outputs]
        # (min, max) of run-time indices per checked node (graph/index_checks.py)
        self._index_checks = RunChecks(plan.meta.get("index_checks", ()), self.buffers)
        # checked calls (debugging) go through Python; otherwise one native call per run,
        # with the pool's workers woken ahead of forks where the thread choice says so
        self._native = not checked_calls and bool(self._steps)
        self._sequences: dict[frozenset, CallSequence] = {}
        self._sequence = self._call_sequence(True)
        # kernels measured faster on one thread when the model was built (thread_choice.py)
        for name in self.serial_kernels:
            if name in self.kernels:
                self.kernels[name].set_num_threads(1)

    # ------------------------------------------------------------------ preparation
    def _kernel(self, step: Step) -> Kernel:
        if step.kernel not in self.kernels:
            raise ModelFormatError(f"compiled model '{self.plan.name}': step '{step.group}' "
                                   f"needs kernel '{step.kernel}', which the kernel library "
                                   "lacks; re-export the model")
        return self.kernels[step.kernel]

    def _call_sequence(self, prewake: bool) -> CallSequence | None:
        """The native sequence of the plan's calls, with a PREWAKE call (codegen/runtime.py)
        before each step thread_choice listed if `prewake` (built on first use)."""
        if not self._native:
            return None
        at = frozenset(self.plan.meta.get("thread_choice", {}).get("prewake", ())
                       ) if prewake else frozenset()
        key = at
        if key not in self._sequences:
            calls = []
            for k, (step, (_, args)) in enumerate(zip(self.plan.steps, self._steps)):
                if k in at:
                    calls.append((prewake_address(), []))
                calls.append((self._kernel(step).address, [a.ctypes.data for a in args]))
            self._sequences[key] = CallSequence(calls, name=self.plan.name)
        return self._sequences[key]

    def _allocate(self, spec: BufferSpec, constants: Mapping[str, np.ndarray]) -> np.ndarray:
        dtype = np.dtype(spec.dtype)
        if spec.kind == "constant":
            if spec.name not in constants:
                raise ModelFormatError(f"compiled model '{self.plan.name}': constant "
                                       f"'{spec.name}' is missing; re-export the model")
            arr = np.ascontiguousarray(constants[spec.name], dtype=dtype)
            if arr.shape != spec.shape:
                arr = arr.reshape(spec.shape)
            return arr
        if spec.kind in ("input", "output"):
            return np.zeros(spec.shape, dtype)
        if spec.kind == "arena":
            nbytes = int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize
            return self.arena[spec.offset:spec.offset + nbytes].view(dtype).reshape(spec.shape)
        if spec.kind == "alias":     # a view; of another dtype for a bitcast (tasks.py)
            return self.buffers[spec.of].view(dtype).reshape(spec.shape)
        raise InternalError(f"buffer '{spec.name}' has unknown kind {spec.kind!r}; this is a "
                            "bug in Kiln")

    # ------------------------------------------------------------------ running
    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def _bind(self, inputs) -> None:
        """Check `inputs` (list in input order or dict by name) and copy them in."""
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - self._input_names)
            if unknown:
                raise KernelArgumentError(
                    f"model '{self.plan.name}' has no input named {', '.join(map(repr, unknown))}"
                    f"; its inputs are {', '.join(self.plan.inputs)}")
            missing = [n for n in self.plan.inputs if n not in inputs and n not in self._pinned]
            if missing:
                spec = self._specs[missing[0]]
                raise KernelArgumentError(
                    f"model '{self.plan.name}': input '{spec.name}' ({spec.dtype}"
                    f"{list(spec.shape)}) was not given")
            values = [inputs[n] if n in inputs else self._pinned[n] for n in self.plan.inputs]
        else:
            values = list(inputs) if not isinstance(inputs, np.ndarray) else [inputs]
            if self._pinned and len(values) == len(self._inputs) - len(self._pinned):
                rest = iter(values)    # the pinned inputs may be left out
                values = [self._pinned[n] if n in self._pinned else next(rest)
                          for n in self.plan.inputs]
            if len(values) != len(self._inputs):
                raise KernelArgumentError(
                    f"model '{self.plan.name}' takes {len(self._inputs)} inputs "
                    f"({', '.join(self.plan.inputs)}), got {len(values)}")
        for value, (name, buf, spec) in zip(values, self._inputs):
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            if self._in_formats.get(name):
                from ..ops.lowbit import np_dtype, to_storage
                fmt = self._in_formats[name]
                if arr.dtype != np_dtype(fmt):
                    raise KernelArgumentError(
                        f"input '{name}' of model '{self.plan.name}': expected an array of "
                        f"{np_dtype(fmt)} (ml_dtypes){list(spec.shape)}, got {arr.dtype}"
                        f"{list(arr.shape)}")
                arr = to_storage(arr, fmt)
            bind_input(self.plan.name, name, buf, arr, self._pinned, spec.dtype)

    def run(self, inputs) -> list[np.ndarray]:
        """Run the model; returns fresh arrays in graph-output order. An index out of its
        data's bounds (Gather, ScatterND, ...) raises IndexOutOfRangeError naming the node."""
        self._bind(inputs)
        if self._sequence is not None:
            self._sequence()
        else:
            for fn, args in self._steps:
                fn(*args)
        if self._index_checks:
            self._index_checks()
        if any(self._out_formats):
            from ..ops.lowbit import from_storage
            return [out.copy() if not fmt else from_storage(out.copy(), fmt)
                    for out, fmt in zip(self._outputs, self._out_formats)]
        return [out.copy() for out in self._outputs]

    __call__ = run

    def optimized(self, timeout: float | None = None) -> "CompiledModel":
        """This model: its kernels are the optimised ones (a tiered compile's model,
        graph/compile/tiers.TieredModel, waits for them)."""
        return self

    @property
    def serial_kernels(self) -> frozenset[str]:
        """Kernels that run on one thread whatever the model's count: measured no faster on
        more when the model was built (graph/runtime/thread_choice.py)."""
        return frozenset(self.plan.meta.get("thread_choice", {}).get("serial", ()))

    def set_num_threads(self, n: int, choice: bool = True) -> None:
        """Threads for the kernels' parallel loops (default: the count compiled for), but
        one for serial_kernels unless `choice` is False (every kernel at `n`, for A/B
        measurements). The schedules stay those chosen for `plan.meta["threads"]`; to run
        best at another count, compile for it (compile_model(threads=...))."""
        serial = self.serial_kernels if choice else frozenset()
        for name, kernel in self.kernels.items():
            kernel.set_num_threads(1 if name in serial else n)
        self._sequence = self._call_sequence(choice and n > 1)

    def step_times(self, inputs, clock=time.perf_counter) -> list[float]:
        """Run the model one step at a time from `inputs` (in plan order, so every kernel
        sees the data of a real run) and return clock() differences per step: seconds with
        the default clock, fork/joins with codegen.runtime.fork_count."""
        self._bind(inputs)
        out = []
        for fn, args in self._steps:
            start = clock()
            fn(*args)
            out.append(clock() - start)
        return out

    def _example_inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        out = []
        for name, buf, spec in self._inputs:
            if name in self._pinned:
                out.append(self._pinned[name])
            elif buf.dtype.kind == "f":
                out.append(rng.standard_normal(spec.shape).astype(buf.dtype))
            else:
                out.append(np.zeros(spec.shape, buf.dtype))  # valid for indices, masks, ids
            if self._in_formats.get(name):           # a low-bit input: as ml_dtypes
                from ..ops.lowbit import from_storage
                out[-1] = from_storage(out[-1], self._in_formats[name])
        return out

    def benchmark(self, inputs=None, repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one `run` (over `repeat` timings of `number` runs each)."""
        inputs = self._example_inputs() if inputs is None else inputs
        return median_run_seconds(lambda: self.run(inputs), repeat, number)

    def profile(self, inputs=None, repeat: int = 10) -> list[dict]:
        """Median time of every kernel call: [{name, kernel, ms, share}] in execution order,
        plus a final "(python overhead)" entry: the median time of `run` not spent inside
        kernels (input copies, output copies, calls; each kernel's time is taken by calling
        it alone, so this is a lower bound)."""
        inputs = self._example_inputs() if inputs is None else inputs
        self.run(inputs)
        per_step = [[] for _ in self._steps]
        totals = []
        clock = time.perf_counter
        for _ in range(repeat):
            self._bind(inputs)
            for k, (fn, args) in enumerate(self._steps):
                start = clock()
                fn(*args)
                per_step[k].append(clock() - start)
            begin = clock()
            self.run(inputs)
            totals.append(clock() - begin)
        medians = [statistics.median(t) for t in per_step]
        # kernels timed one by one include their call; the native run may beat their sum
        total = max(statistics.median(totals), sum(medians))
        rows = [{"name": s.group, "kernel": s.kernel, "ms": m * 1e3,
                 "share": m / total if total else 0.0}
                for s, m in zip(self.plan.steps, medians)]
        rest = max(0.0, total - sum(medians))
        rows.append({"name": "(python overhead)", "kernel": "", "ms": rest * 1e3,
                     "share": rest / total if total else 0.0})
        return rows

    # ------------------------------------------------------------------ reporting
    def summary(self) -> str:
        """Groups, their kernels and where each schedule came from; memory plan numbers."""
        steps = self.plan.steps
        from_db = sum(1 for s in steps if s.source == "database")
        similar = sum(1 for s in steps if s.source == "similar CPU")
        ranked = sum(1 for s in steps if s.source == "zero-shot")
        borrowed = (f"{similar} from another CPU's records (same vector ISA), "
                    if similar else "") + (f"{ranked} zero-shot (cost model's pick), "
                                           if ranked else "")
        lines = [f"compiled model '{self.plan.name}': {len(steps)} kernel calls, "
                 f"{len(set(s.kernel for s in steps))} distinct kernels, "
                 f"{len(self.plan.aliases)} alias groups; schedules: {from_db} from the "
                 f"database, {borrowed}{len(steps) - from_db - similar - ranked} default"
                 + self._skipped_note(),
                 f"arena {self.plan.arena_bytes} bytes (one buffer each: "
                 f"{self.plan.naive_bytes} bytes)"]
        choice = self.plan.meta.get("thread_choice")
        if choice and choice.get("kernels"):
            lines.append(f"threads: {len(choice['serial'])} of {len(choice['kernels'])} "
                         f"forking kernels run on one thread (measured no faster on "
                         f"{choice['threads']}); workers woken ahead of "
                         f"{len(choice.get('prewake', ()))} steps")
        if self._pinned:
            lines.append("compiled for the values of the inputs that decide shapes: " + ", ".join(
                f"{name} = {_preview(arr)}" for name, arr in self._pinned.items()))
        for s in steps:
            lines.append(f"  {s.group:<32} {'+'.join(s.ops):<28} kernel {s.kernel:<34} "
                         f"{s.source}")
        for name in self.plan.aliases:
            lines.append(f"  {name:<32} (view, no kernel)")
        return "\n".join(lines)

    def _skipped_note(self) -> str:
        skipped = self.plan.meta.get("compile", {}).get("skipped_records", 0)
        return (f"; {skipped} stored record(s) skipped: they do not fit today's search space"
                if skipped else "")

    def __repr__(self) -> str:
        return (f"<CompiledModel {self.plan.name}: {len(self.plan.steps)} kernels, inputs "
                f"{list(self.plan.inputs)}>")

    # ------------------------------------------------------------------ export
    def export(self, path: str | os.PathLike) -> Path:
        """Write `path` (shared library of all kernels, with its .json kernel table),
        `path`.plan.json and `path`.npz (constants); load with `load_compiled(path)`."""
        path = Path(path)
        used = sorted({s.kernel for s in self.plan.steps})
        if used:
            export_library([self.kernels[k] for k in used], path)
        constants = {b.name: self.buffers[b.name] for b in self.plan.buffers
                     if b.kind == "constant"}
        keys = {name: f"c{k}" for k, name in enumerate(sorted(constants))}
        np.savez(_sidecar(path, ".npz"), **{keys[n]: a for n, a in constants.items()})
        doc = self.plan.to_json()
        doc["constant_keys"] = keys
        _sidecar(path, ".plan.json").write_text(json.dumps(doc, indent=1))
        log.info("exported %s: %d kernels, %d constants", path, len(used), len(constants))
        return path


def pinned_json(pinned: Mapping[str, np.ndarray]) -> dict:
    """Pinned input values as plain data for Plan.meta["pinned"]."""
    return {name: {"dtype": str(arr.dtype), "shape": list(arr.shape), "value": arr.tolist()}
            for name, arr in pinned.items()}


def pinned_arrays(doc: Mapping[str, dict]) -> dict[str, np.ndarray]:
    """The arrays of Plan.meta["pinned"] (see pinned_json)."""
    return {name: np.array(d["value"], dtype=d["dtype"]).reshape(d["shape"])
            for name, d in doc.items()}


def _preview(arr: np.ndarray, limit: int = 8) -> str:
    flat = arr.reshape(-1)
    items = ", ".join(str(v) for v in flat[:limit].tolist())
    more = f", ... ({flat.size} values)" if flat.size > limit else ""
    return f"{arr.dtype}{list(arr.shape)} [{items}{more}]"


def _sidecar(path: Path, suffix: str) -> Path:
    return Path(str(path) + suffix)


def load_compiled(path: str | os.PathLike) -> CompiledModel:
    """Load a model written by CompiledModel.export (no ONNX file, no recompilation)."""
    path = Path(path)
    plan_path, npz_path = _sidecar(path, ".plan.json"), _sidecar(path, ".npz")
    for p in (plan_path, npz_path):
        if not p.exists():
            raise ModelFormatError(f"cannot load compiled model {path}: {p} does not exist "
                                   "(CompiledModel.export writes the .so, .plan.json and .npz)")
    try:
        doc = json.loads(plan_path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{plan_path} is not valid JSON: {exc}") from exc
    plan = Plan.from_json(doc, str(plan_path))
    kernels = load_library(path) if plan.steps else {}
    with np.load(npz_path) as data:
        constants = {name: data[key] for name, key in doc["constant_keys"].items()}
    return CompiledModel(plan, kernels, constants)


def build_plan(name: str, inputs: Sequence, outputs: Sequence, buffers: Sequence[BufferSpec],
               steps: Sequence[Step], arena_bytes: int, aliases: Sequence[str] = (),
               naive_bytes: int = 0, meta: dict | None = None) -> Plan:
    """A Plan from its parts (inputs/outputs are value names)."""
    return Plan(name, tuple(inputs), tuple(outputs), tuple(buffers), tuple(steps), arena_bytes,
                tuple(aliases), naive_bytes, dict(meta or {}))

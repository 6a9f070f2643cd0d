"""`kiln.jit`: a Python function of arrays, traced per signature into a graph, compiled into
fused kernels and run on the caller's arrays.

The in-memory cache of a JitFunction is keyed on (the function's code, every array
argument's shape and dtype, the kinds of Python-scalar arguments, the static arguments'
values, the target, the thread count). A new key traces and compiles again; past
`max_traces` keys a warning says so. Kernels go through the persistent kernel cache
(codegen/cache.py), so a new process re-traces but compiles no kernel it has built before.
Array values a function closes over are compile-time constants of the trace.
"""
from __future__ import annotations

import functools
import inspect
import logging
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codegen.runtime_config import resolve_threads
from ..codegen.target import Target
from ..graph.compile.model import compile_model, prepare_graph
from ..graph.runtime.executor import CompiledModel
from ..graph.ir import Graph, Value
from ..schedule.printer import func_str
from . import methods  # noqa: F401 - binds numpy's operators and methods on Tracer
from .dtypes import SUPPORTED, check_dtype
from .errors import JitError
from .patterns import fuse_compositions
from .runner import DirectRunner
from .trace import Trace, Tracer

log = logging.getLogger(__name__)

DEFAULT_MAX_TRACES = 8


class JitRetraceWarning(UserWarning):
    """A jitted function was traced for more signatures than its `max_traces`."""


@dataclass
class _Compiled:
    traced: Graph        # as the function's operations built it
    graph: Graph         # with compositions as single ops (patterns.py): what compiles
    model: CompiledModel
    runner: DirectRunner
    out_tree: Any
    trace_seconds: float
    compile_seconds: float


@dataclass
class JitStats:
    """What the function's calls cost: traces (= compiles of a new signature) and calls."""
    traces: int = 0
    calls: int = 0
    trace_seconds: float = 0.0
    compile_seconds: float = 0.0
    signatures: list = field(default_factory=list)


# -- argument trees ----------------------------------------------------------------------------

_SUPPORTED = frozenset(np.dtype(name) for name in SUPPORTED)


def _leaf_spec(value, where: str):
    """(key part, array or None) of one non-static argument leaf."""
    if type(value) is np.ndarray and value.dtype in _SUPPORTED:     # the common case, fast
        return ("array", value.shape, value.dtype.str), (
            value if value.flags.c_contiguous else np.ascontiguousarray(value))
    if isinstance(value, np.generic):      # numpy scalars are strongly typed 0-d arrays
        value = np.asarray(value)
    if isinstance(value, bool):
        return ("scalar", "bool"), np.array(value)
    if isinstance(value, int):
        return ("scalar", "int"), np.array(value, dtype=np.int64)
    if isinstance(value, float):
        return ("scalar", "float"), np.array(value, dtype=np.float64)
    if isinstance(value, Tracer):
        raise JitError(f"argument '{where}': a traced value passed to a jitted function from inside "
                       "another trace; call the inner function directly (nesting kiln.jit "
                       "is not supported)")
    arr = np.asarray(value)
    if arr.dtype == object:
        raise JitError(f"argument '{where}': a {type(value).__name__} is neither an array nor a number; "
                       "mark the argument static (static_argnames=[...]) if it configures "
                       "the function")
    dtype = check_dtype(arr.dtype, f"argument '{where}'")
    if dtype != arr.dtype:
        raise JitError(f"argument '{where}': dtype {arr.dtype} is not supported by kiln.jit; "
                       "cast it (to float32)")
    # (np.ascontiguousarray would make a 0-d array 1-d)
    return ("array", arr.shape, arr.dtype.str), (arr if arr.flags.c_contiguous else
                                                 np.ascontiguousarray(arr))


def _flatten(value, where: str, leaves: list, specs: list):
    """A key part for an argument (tuples, lists and dicts of arrays are walked)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(
            _flatten(v, f"{where}[{k}]", leaves, specs) for k, v in enumerate(value))
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _flatten(value[k], f"{where}[{k!r}]", leaves, specs))
                                 for k in sorted(value))
    if value is None:
        return ("none",)
    spec, arr = _leaf_spec(value, where)
    leaves.append(arr)
    specs.append((where, spec))
    return spec


def _unflatten(key, tracers):
    kind = key[0]
    if kind in ("tuple", "list"):
        items = [_unflatten(k, tracers) for k in key[1:]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: _unflatten(sub, tracers) for k, sub in key[1:]}
    if kind == "none":
        return None
    return next(tracers)


def _name(where: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]+", "_", where).strip("_") or "arg"


class JitFunction:
    """A function compiled by Kiln per signature; call it like the function. Like a
    CompiledModel, one call at a time (a signature's intermediates share one arena)."""

    def __init__(self, fn: Callable, static_argnames: Sequence[str] | str = (),
                 static_argnums: Sequence[int] | int = (), target: str = "native",
                 db="default", threads: int | None = None,
                 max_traces: int = DEFAULT_MAX_TRACES, jobs: int = 1):
        if not callable(fn):
            raise JitError(f"kiln.jit takes a function, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        if not hasattr(self, "__name__"):     # a functools.partial, a callable object
            self.__name__ = getattr(getattr(fn, "func", fn), "__name__", type(fn).__name__)
        self.fn = fn
        # (a callable without code, such as a functools.partial, is keyed by itself)
        self._code = getattr(fn, "__code__", fn)
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        for n in nums:
            if not -len(params) <= n < len(params):
                raise JitError(f"kiln.jit({fn.__name__}): static_argnums {n} is out of range "
                               f"for parameters {params}")
            names += (params[n],)
        unknown = [n for n in names if n not in params]
        if unknown:
            raise JitError(f"kiln.jit({fn.__name__}): static_argnames {unknown} are not "
                           f"parameters of the function; its parameters are {params}")
        self.static_argnames = frozenset(names)
        plain = [p.name for p in self.signature.parameters.values()
                 if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
        self._plain = tuple(plain) if len(plain) == len(params) else None
        self.target = Target.from_string(target)     # parsed once: below, a Target
        if threads is not None and threads < 1:
            raise JitError(f"kiln.jit(threads={threads}): give a thread count >= 1")
        self.threads = resolve_threads(threads)
        self.db = db
        self.jobs = jobs
        self.max_traces = max_traces
        self.stats = JitStats()
        self._cache: dict[tuple, _Compiled] = {}

    # ------------------------------------------------------------------ signatures
    def _signature(self, args, kwargs):
        """(cache key, dynamic leaf arrays, bound arguments, per-argument key parts)."""
        if not kwargs and self._plain is not None and len(args) == len(self._plain):
            # every parameter positional, without a default: no need for inspect's bind
            bound = inspect.BoundArguments(self.signature, dict(zip(self._plain, args)))
        else:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{self.__name__}(): {exc}") from None
            bound.apply_defaults()
        parts, leaves, specs = [], [], []
        for name, val in bound.arguments.items():
            if name in self.static_argnames:
                try:
                    hash(val)
                except TypeError:
                    raise JitError(
                        f"static argument '{name}' of {self.__name__} must be hashable (it is "
                        f"part of the cache key), got a {type(val).__name__}; pass a tuple "
                        "instead of a list, or make it a regular argument") from None
                if isinstance(val, (Tracer, np.ndarray)):
                    raise JitError(f"static argument '{name}' of {self.__name__} is an array;"
                                   " static arguments are Python values (ints, strings, tuples)")
                parts.append((name, "static", type(val).__name__, val))
            else:
                parts.append((name, _flatten(val, name, leaves, specs)))
        key = (self._code, tuple(parts), self.target, self.threads)
        return key, leaves, bound, specs

    def _trace(self, bound, parts, specs) -> tuple[Graph, Any]:
        trace = Trace(_name(self.__name__))
        tracers = []
        for where, spec in specs:
            if spec[0] == "scalar":
                dtype = {"bool": "bool", "int": "int64", "float": "float64"}[spec[1]]
                tracers.append(trace.input(_name(where), (), dtype, weak=spec[1] != "bool"))
            else:
                tracers.append(trace.input(_name(where), spec[1], np.dtype(spec[2]).name))
        it = iter(tracers)
        arguments = {}
        for (name, *rest) in parts:
            arguments[name] = rest[2] if rest[0] == "static" else _unflatten(rest[0], it)
        bound.arguments.update(arguments)
        result = self.fn(*bound.args, **bound.kwargs)
        outputs: list[Value] = []
        tree = self._output_tree(trace, result, outputs)
        return trace.graph(outputs), tree

    def _output_tree(self, trace: Trace, result, outputs: list):
        if isinstance(result, (tuple, list)):
            items = [self._output_tree(trace, r, outputs) for r in result]
            return (type(result).__name__, items)
        if isinstance(result, dict):
            return ("dict", [(k, self._output_tree(trace, v, outputs)) for k, v in result.items()])
        if isinstance(result, Tracer):
            if result.trace is not trace:
                raise JitError(f"{self.__name__} returned a traced value of another call")
            v = result.value
        elif result is None:
            return ("none",)
        else:
            arr = np.asarray(result)
            if arr.dtype == object:
                raise JitError(f"{self.__name__} returned a {type(result).__name__}; a jitted "
                               "function returns arrays (or tuples, lists, dicts of them)")
            v = trace.const(arr)
        if any(v.name == o.name for o in outputs) or any(v.name == i.name for i in trace.inputs):
            v = trace.emit("identity", [v])   # each output its own buffer
        outputs.append(v)
        return ("leaf", len(outputs) - 1)

    def _compiled(self, args, kwargs) -> tuple[_Compiled, list]:
        key, leaves, bound, specs = self._signature(args, kwargs)
        hit = self._cache.get(key)
        if hit is not None:
            return hit, leaves
        start = time.perf_counter()
        traced_graph, tree = self._trace(bound, key[1], specs)
        graph = fuse_compositions(traced_graph)
        traced = time.perf_counter()
        model = compile_model(graph, self.target, self.db, jobs=self.jobs,
                              threads=self.threads, cache_model=False)
        done = time.perf_counter()
        entry = _Compiled(traced_graph, graph, model, DirectRunner(model), tree, traced - start,
                          done - traced)
        self._cache[key] = entry
        self.stats.traces += 1
        self.stats.trace_seconds += entry.trace_seconds
        self.stats.compile_seconds += entry.compile_seconds
        shown = ", ".join(f"{w}: {np.dtype(s[2]).name if s[0] == 'array' else s[1]}"
                          f"{list(s[1]) if s[0] == 'array' else ''}" for w, s in specs)
        self.stats.signatures.append(shown)
        log.info("kiln.jit %s: traced and compiled (%s) in %.3f s", self.__name__, shown,
                 done - start)
        if len(self._cache) > self.max_traces:
            warnings.warn(JitRetraceWarning(
                f"kiln.jit: {self.__name__} has been traced and compiled for "
                f"{len(self._cache)} signatures (limit max_traces={self.max_traces}); the "
                f"newest: ({shown}). Each new shape, dtype or static value compiles again: "
                "pad inputs to a few shapes, or raise max_traces if this is intended."),
                stacklevel=3)
        return entry, leaves

    # ------------------------------------------------------------------ public
    def __call__(self, *args, **kwargs):
        entry, leaves = self._compiled(args, kwargs)
        self.stats.calls += 1
        return _build_tree(entry.out_tree, entry.runner(leaves))

    def trace(self, *args, **kwargs) -> Graph:
        """The graph these arguments compile (traced, compositions such as softmax as single
        ops), without compiling it."""
        key, _, bound, specs = self._signature(args, kwargs)
        if key in self._cache:
            return self._cache[key].graph
        return fuse_compositions(self._trace(bound, key[1], specs)[0])

    def lower(self, *args, **kwargs) -> Lowered:
        """The traced graph, the optimised and fused graph and each kernel's loop IR for these
        arguments (compiled, so the kernels are those a call runs); print() it."""
        entry, _ = self._compiled(args, kwargs)
        optimized, _ = prepare_graph(entry.graph, target=self.target)
        return Lowered(entry.traced, optimized, entry.model)

    def compile(self, *args, **kwargs) -> CompiledModel:
        """The CompiledModel for these arguments' signature: run/benchmark/export it like one
        from kiln.compile (its inputs are named after the function's parameters)."""
        return self._compiled(args, kwargs)[0].model

    def clear_cache(self) -> None:
        """Forget compiled signatures (after tuning, the next call uses the new records)."""
        self._cache.clear()

    def __repr__(self) -> str:
        return f"<kiln.jit {self.__name__}: {len(self._cache)} compiled signature(s)>"


def _build_tree(tree, outputs):
    kind = tree[0]
    if kind == "leaf":
        return outputs[tree[1]]
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _build_tree(t, outputs) for k, t in tree[1]}
    items = [_build_tree(t, outputs) for t in tree[1]]
    return tuple(items) if kind == "tuple" else items


@dataclass
class Lowered:
    """What a jitted function compiles to, as text: str() or as_text()."""

    graph: Graph
    optimized: Graph
    model: CompiledModel

    def as_text(self) -> str:
        lines = ["# traced graph", str(self.graph), "", "# after graph passes",
                 str(self.optimized), "", "# kernels (loop IR)"]
        for step in self.model.plan.steps:
            kernel = self.model.kernels[step.kernel]
            lines.append(f"## {step.group}: {'+'.join(step.ops)} "
                         f"(schedule: {step.source})")
            lines.append(func_str(kernel.func) if kernel.func is not None else
                         "(loop IR not kept for this kernel)")
        return "\n".join(lines)

    __str__ = as_text


def jit(fn: Callable | None = None, *, static_argnames: Sequence[str] | str = (),
        static_argnums: Sequence[int] | int = (), target: str = "native", db="default",
        threads: int | None = None, max_traces: int = DEFAULT_MAX_TRACES):
    """Compile `fn` with Kiln on its first call per signature: `kiln.jit(f)` or `@kiln.jit`
    (with options: `@kiln.jit(static_argnames=["axis"])`).

    static_argnames/static_argnums: arguments that change the program (axes, flags, sizes):
    hashable Python values, part of the cache key; Python control flow may branch on them.
    db: the tuning records schedules come from ("default", a path, a Database or None), as
    kiln.compile's. threads: the thread count the kernels run and are scheduled for
    (default KILN_NUM_THREADS, else every core). max_traces: signatures compiled before a
    JitRetraceWarning."""
    options = dict(static_argnames=static_argnames, static_argnums=static_argnums,
                   target=target, db=db, threads=threads, max_traces=max_traces)
    if fn is None:
        return lambda f: JitFunction(f, **options)
    return JitFunction(fn, **options)

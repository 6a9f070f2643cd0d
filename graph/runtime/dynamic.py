"""Models compiled per input shape: symbolic dims and graph inputs that decide shapes.

Kiln compiles static shapes. `compile_specialized` (what `kiln.compile` calls) returns a
CompiledModel when every input shape is known (fixed in the model or pinned by
`input_shapes`) and every graph input that decides a shape (a Reshape's shape, a Slice's
starts, ...) has a value in `constants`. Otherwise it returns a `DynamicModel`: on `run` it
compiles the model for the input shapes it is given and the values of the inputs that decide
shapes (a *specialisation*), caches it by them and reuses it, so a later run at a cached shape
costs one dictionary lookup more than a model compiled for that shape. The tuning database is
opened once and shared by every specialisation.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx

from ...codegen.target import Target
from ...te.errors import KernelArgumentError, KilnError, ModelFormatError
from ..compile.model import open_db, compile_model, requested
from .executor import CompiledModel, given_inputs
from ..compile.model_cache import DigestedProto
from ..onnx.checked import check_model_once
from ..onnx.load import InputValueNeeded, onnx_elem_dtype, read_model
from ..ir import Graph
from ..ops.lowbit import ONNX_FORMATS
from ..onnx import sequence as _seq
from .staged import StagedModel, has_data_dependent_ops

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputSpec:
    """A graph input as the model declares it: `dims` holds ints (fixed) and strings (a
    symbolic dim's name, "?" when it has none); None when the model gives no shape."""

    name: str
    dtype: str
    dims: tuple[int | str, ...] | None
    # 'tensor', or a structured input (onnx_ops_sequence): 'sequence', 'optional' (a tensor
    # or None), 'optional_sequence'; dtype and dims are then its elements'
    kind: str = "tensor"

    @property
    def is_static(self) -> bool:
        return self.kind == "tensor" and self.dims is not None and all(
            isinstance(d, int) for d in self.dims)

    def describe(self) -> str:
        elem = f"{self.dtype}[any shape]" if self.dims is None else \
            f"{self.dtype}[{', '.join(str(d) for d in self.dims)}]"
        return elem if self.kind == "tensor" else f"{self.kind}({elem})"

    def check(self, arr, model: str) -> None:
        """KernelArgumentError naming this input if `arr` cannot be fed to it."""
        where = f"input '{self.name}' of model '{model}'"
        if self.kind != "tensor":
            if arr is None and self.kind.startswith("optional"):
                return
            if self.kind.endswith("sequence"):
                if not isinstance(arr, (list, tuple)):
                    raise KernelArgumentError(f"{where} is a sequence: pass a list of arrays "
                                              f"({self.describe()}), got {type(arr).__name__}")
                for a in arr:
                    InputSpec(self.name, self.dtype, self.dims).check(np.asarray(a), model)
                return
            arr = np.asarray(arr)
        if arr.dtype != np.dtype(self.dtype):
            raise KernelArgumentError(
                f"{where}: expected {self.describe()}, got {arr.dtype}{list(arr.shape)}. "
                f"Cast it with .astype(np.{self.dtype}).")
        if self.dims is None:
            return
        if arr.ndim != len(self.dims):
            raise KernelArgumentError(
                f"{where}: expected rank {len(self.dims)} ({self.describe()}), got "
                f"{arr.dtype}{list(arr.shape)}")
        for axis, (want, got) in enumerate(zip(self.dims, arr.shape)):
            if isinstance(want, int) and want != got:
                raise KernelArgumentError(
                    f"{where}: dim {axis} must be {want} ({self.describe()}), got "
                    f"{arr.dtype}{list(arr.shape)}")


def input_specs(proto: onnx.ModelProto,
                input_shapes: Mapping[str, Sequence[int]]) -> list[InputSpec]:
    """The model's graph inputs (initializers excluded), with `input_shapes` pinned."""
    init = {t.name for t in proto.graph.initializer}
    real = [i for i in proto.graph.input if i.name not in init]
    unknown = sorted(set(input_shapes) - {i.name for i in real})
    if unknown:
        raise ModelFormatError(f"input_shapes names {unknown}, which are not model inputs; "
                               f"the inputs are {[i.name for i in real]}")
    specs = []
    for inp in real:
        if _seq.is_structured_type(inp.type):
            kind = _seq.type_kind(inp.type)
            if kind == "other":
                raise ModelFormatError(f"input '{inp.name}' has a type (a map, or a sequence "
                                       "of sequences) which Kiln does not support")
            tt = _seq.element_type(inp.type)
            dims = None if not tt.HasField("shape") else tuple(
                int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                for d in tt.shape.dim)
            specs.append(InputSpec(inp.name, onnx_elem_dtype(tt.elem_type, f"input '{inp.name}'"),
                                   dims, kind))
            continue
        tt = inp.type.tensor_type
        dtype = (ONNX_FORMATS[tt.elem_type][0] if tt.elem_type in ONNX_FORMATS  # ml_dtypes'
                 else onnx_elem_dtype(tt.elem_type, f"input '{inp.name}'"))
        dims = None
        if tt.HasField("shape"):
            dims = tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                         for d in tt.shape.dim)
        spec = InputSpec(inp.name, dtype, dims)
        if inp.name in input_shapes:
            want = tuple(int(d) for d in input_shapes[inp.name])
            if dims is not None and (len(want) != len(dims) or any(
                    isinstance(d, int) and d != w for d, w in zip(dims, want))):
                raise ModelFormatError(f"input '{inp.name}': given shape {list(want)} does "
                                       f"not match the model's {spec.describe()}")
            spec = InputSpec(inp.name, dtype, want)
        specs.append(spec)
    return specs


def compile_specialized(model, target: Target | str = "native", db=None,
                        input_shapes: Mapping[str, Sequence[int]] | None = None,
                        jobs: int | None = None, layout: str = "nchwc",
                        threads: int | None = None, winograd: bool = True,
                        constants: Mapping[str, np.ndarray] | None = None,
                        zero_shot: bool = False,
                        tiered: bool = False) -> "CompiledModel | DynamicModel | StagedModel":
    """A CompiledModel if the model's shapes are all known ahead of time, else a
    DynamicModel that compiles a specialisation per input shape at run time (module doc); a
    StagedModel (graph/runtime/staged.py) if the main graph has an op whose output size depends on
    the data."""
    options = dict(target=target, db=open_db(db), jobs=jobs, layout=layout, threads=threads,
                   winograd=winograd, zero_shot=zero_shot, tiered=tiered)
    if isinstance(model, Graph):
        return compile_model(model, input_shapes=input_shapes, constants=constants, **options)
    request = None
    if not constants and isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        # compiled before with these options: loaded without parsing the file
        hit, request = requested(model, input_shapes, target, options["db"], threads, layout,
                                 winograd, zero_shot)
        if hit is not None:
            return hit
    proto = read_model(model, "<ModelProto>" if isinstance(model, onnx.ModelProto)
                        else str(model))
    constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
    _check_constant_names(proto, constants)
    if has_data_dependent_ops(proto):   # NonZero/Unique/NMS: compiled around them
        def stage(part, shapes, consts):
            return compile_specialized(part, input_shapes=shapes, constants=consts,
                                       **options)
        return StagedModel(proto, stage, options, input_shapes, constants)
    shapes = dict(input_shapes or {})
    for name, arr in constants.items():      # a pinned value pins its input's shape
        shapes.setdefault(name, arr.shape)
    specs = input_specs(proto, shapes)
    needed: list[str] = []
    structured = any(_seq.is_structured_type(o.type) for o in proto.graph.output)
    if all(s.is_static for s in specs) and not structured:
        try:
            # (the path itself when given one: the model cache identifies a file cheaply)
            compiled = compile_model(proto if isinstance(model, onnx.ModelProto) else model,
                                     input_shapes={s.name: s.dims for s in specs},
                                     constants=constants, proto=proto, request=request,
                                     **options)
        except InputValueNeeded as exc:
            needed.append(exc.input_name)
        else:
            _note_unused_constants(constants, compiled)
            return compiled
    return DynamicModel(proto, specs, constants, options, needed)


def _check_constant_names(proto: onnx.ModelProto, constants: Mapping[str, np.ndarray]) -> None:
    init = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in init]
    unknown = sorted(set(constants) - set(names))
    if unknown:
        raise ModelFormatError(f"constants names {unknown}, which are not inputs of the model; "
                               f"its inputs are {names}")


def _note_unused_constants(constants: Mapping[str, np.ndarray], compiled: CompiledModel):
    unused = sorted(set(constants) - set(compiled.plan.meta.get("pinned", {})))
    if unused:
        log.warning("constants=%s: these inputs decide no shape, so their values stay runtime "
                    "inputs (the values given are still checked at run)", unused)


class DynamicModel:
    """A model compiled on `run` for each new input shape and each new value of the inputs
    that decide shapes; each specialisation is a CompiledModel, cached by them. Not
    thread-safe (one run at a time, as CompiledModel)."""

    def __init__(self, proto: onnx.ModelProto, specs: list[InputSpec],
                 constants: Mapping[str, np.ndarray], options: dict,
                 value_inputs: Sequence[str] = ()):
        # unsupported ops and an invalid model fail now, not at run (skipped for bytes that
        # passed before); the digest identifies the model in its specialisations' cache keys
        self._model = DigestedProto(proto, check_model_once(proto))
        self.name = proto.graph.name or "model"
        self._proto = proto
        self._specs = specs
        self._names = tuple(s.name for s in specs)
        self._constants = dict(constants)
        self._options = options
        self._value_inputs = [n for n in value_inputs if n not in self._constants]
        self._warned: set[str] = set()
        self._cache: dict[tuple, CompiledModel] = {}
        self._threads: int | None = None
        # sequence/optional inputs or outputs: fed and returned through onnx_ops_sequence
        self._structured = any(s.kind != "tensor" for s in specs) or any(
            _seq.is_structured_type(o.type) for o in proto.graph.output)
        self.compiles = 0     # specialisations compiled so far

    # ------------------------------------------------------------------ running
    @property
    def input_names(self) -> list[str]:
        return list(self._names)

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self._proto.graph.output]

    def run(self, inputs) -> list[np.ndarray]:
        """Run the model, compiling a specialisation first if these input shapes (or values
        of shape-deciding inputs) are new; returns fresh arrays in graph-output order (a
        sequence output: a list of arrays; an empty optional: None)."""
        if self._structured:
            return self._run_structured(inputs)
        try:        # the usual call: a dict of arrays at a cached shape (it checks them)
            compiled = self._cache[self._key(inputs)]
        except (KeyError, TypeError, AttributeError, IndexError):
            feeds = self._feeds(inputs)     # anything else: check, and compile if new
            return self._specialization(feeds).run(feeds)
        return compiled.run(inputs)

    __call__ = run

    def specialize(self, inputs) -> CompiledModel:
        """The CompiledModel for these inputs' shapes (and shape-deciding values), compiled
        now if it is not cached: export, profile or inspect it like any CompiledModel."""
        return self._specialization(self._feeds(inputs))

    @property
    def specializations(self) -> list[CompiledModel]:
        """The specialisations compiled so far, oldest first."""
        return list(self._cache.values())

    def optimized(self, timeout: float | None = None) -> "DynamicModel":
        """Waits until every specialisation compiled so far runs its optimised kernels (a
        tiered compile's; graph/compile/tiers.py); returns this model."""
        for compiled in self._cache.values():
            compiled.optimized(timeout)
        return self

    def set_num_threads(self, n: int) -> None:
        """Threads for every specialisation's kernels, compiled or to come."""
        self._threads = n
        for compiled in self._cache.values():
            compiled.set_num_threads(n)

    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        """`inputs` (list in input order, or dict by name) checked against the declared
        shapes, as a dict; inputs given to constants= may be left out."""
        given = given_inputs(self.name, self._names, self._constants, inputs)
        feeds = {}
        for spec in self._specs:
            if spec.name not in given and spec.name not in self._constants:
                raise KernelArgumentError(f"model '{self.name}': input '{spec.name}' "
                                          f"({spec.describe()}) was not given")
            value = given.get(spec.name, self._constants.get(spec.name))
            if spec.kind != "tensor":   # a list of arrays, or None (an empty optional)
                spec.check(value, self.name)
                feeds[spec.name] = value
                continue
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            spec.check(arr, self.name)
            feeds[spec.name] = arr
        return feeds

    def _flat(self, feeds: Mapping[str, object]):
        """(tensor feeds by flat name, shapes by graph input) of a structured model."""
        types = {i.name: i.type for i in self._proto.graph.input}
        return _seq.flat_inputs(types, feeds)

    def _run_structured(self, inputs) -> list:
        flat, _ = self._flat(self._feeds(inputs))
        compiled = self._specialization(flat)
        outputs = compiled.run(flat)
        return _seq.pack_outputs([(o.name, o.type) for o in self._proto.graph.output],
                                 compiled.output_names, outputs)

    def _key(self, feeds: Mapping[str, np.ndarray]) -> tuple:
        if self._structured:    # flat feeds: their names say the sequences' lengths
            return (tuple([(n, a.shape) for n, a in feeds.items()]),
                    tuple([feeds[n].tobytes() if n in feeds else None
                           for n in self._value_inputs]))
        return (tuple([feeds[n].shape for n in self._names]),
                tuple([feeds[n].tobytes() for n in self._value_inputs]))   # C-order bytes

    def _specialization(self, feeds: Mapping[str, np.ndarray]) -> CompiledModel:
        compiled = self._cache.get(self._key(feeds))
        if compiled is None:
            compiled = self._compile(feeds)
            # keyed after compiling: the compile may have found more shape-deciding inputs
            self._cache[self._key(feeds)] = compiled
        return compiled

    def _compile(self, feeds: Mapping[str, np.ndarray]) -> CompiledModel:
        start = time.perf_counter()
        shapes = {n: a.shape for n, a in feeds.items()}
        if self._structured:   # shapes by graph input: lists for sequences, None: empty
            shapes = self._structured_shapes(feeds)
        try:
            compiled = compile_model(self._model, input_shapes=shapes,
                                     constants={**feeds, **self._constants}, **self._options)
        except ModelFormatError as exc:
            raise KernelArgumentError(
                f"model '{self.name}' cannot run with the input shapes "
                f"{_describe_shapes(feeds)}: {exc}") from exc
        self.compiles += 1
        for name in compiled.plan.meta.get("pinned", {}):
            if name not in self._constants and name not in self._value_inputs:
                self._value_inputs.append(name)
            if name not in self._constants and name not in self._warned:
                self._warned.add(name)
                log.warning("model '%s': input '%s' decides a shape, so the model is compiled "
                            "for its value (%s here) and again for each new value; pass "
                            "kiln.compile(..., constants={'%s': ...}) to fix it ahead of time",
                            self.name, name, feeds[name].reshape(-1)[:8].tolist(), name)
        if self._threads is not None:
            compiled.set_num_threads(self._threads)
        log.info("model '%s': compiled for %s in %.2f s (%d specialisations)", self.name,
                 _describe_shapes(feeds), time.perf_counter() - start, len(self._cache) + 1)
        return compiled

    def _structured_shapes(self, flat: Mapping[str, np.ndarray]) -> dict:
        shapes = {}
        for spec in self._specs:
            if spec.kind.endswith("sequence"):
                items = [a.shape for n, a in flat.items() if n.startswith(spec.name + "[")
                         and n[len(spec.name) + 1:-1].isdigit()]
                shapes[spec.name] = items if items or spec.kind == "sequence" else None
            elif spec.name in flat:
                shapes[spec.name] = flat[spec.name].shape
            # (an empty optional: no shape; load_onnx binds the input to an empty optional)
        return {n: s for n, s in shapes.items() if s is not None}

    # ------------------------------------------------------------------ what needs one shape
    def _why_dynamic(self) -> str:
        parts = [f"input '{s.name}' has the shape {s.describe()}" for s in self._specs
                 if not s.is_static]
        parts += [f"input '{n}' decides a shape" for n in self._value_inputs]
        if self._structured:
            parts.append("it has sequence or optional inputs or outputs (a specialisation "
                         "per sequence length and element shapes)")
        return "; ".join(parts) or "its inputs decide shapes"

    def _needs_one(self, what: str) -> KilnError:
        pins = ", ".join(f"'{s.name}': ({', '.join(str(d) for d in s.dims or ('...',))})"
                         for s in self._specs if not s.is_static)
        fixes = []
        if pins:
            fixes.append(f"input_shapes={{{pins}}}")
        if self._value_inputs:
            fixes.append("constants={" + ", ".join(f"'{n}': ..." for n in self._value_inputs)
                         + "}")
        return KilnError(
            f"model '{self.name}' is compiled per input shape at run time ({self._why_dynamic()})"
            f", so {what} needs one fixed shape: compile it with kiln.compile(model, "
            f"{', '.join(fixes) or 'input_shapes=...'}), or use "
            "model.specialize(inputs), the CompiledModel for the inputs given.")

    def export(self, path):
        raise self._needs_one("export()")

    def __getattr__(self, name: str):
        # CompiledModel's per-shape state (plan, kernels, buffers, arena) has no one value here
        if name in ("plan", "kernels", "buffers", "arena"):
            raise AttributeError(str(self._needs_one(f"'{name}'")))
        raise AttributeError(f"'DynamicModel' object has no attribute '{name}'")

    def benchmark(self, inputs=None, repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one `run` on `inputs` (required: they choose the shape)."""
        if inputs is None:
            raise self._needs_one("benchmark() without inputs=")
        return self.specialize(inputs).benchmark(inputs, repeat, number)

    def profile(self, inputs=None, repeat: int = 10) -> list[dict]:
        """CompiledModel.profile of the specialisation for `inputs` (required)."""
        if inputs is None:
            raise self._needs_one("profile() without inputs=")
        return self.specialize(inputs).profile(inputs, repeat)

    def summary(self) -> str:
        head = (f"dynamic model '{self.name}' ({self._why_dynamic()}): "
                f"{len(self._cache)} specialisations compiled")
        lines = [head]
        for (shapes, _), compiled in self._cache.items():
            desc = ", ".join(f"{n}: {list(s)}" for n, s in zip(self._names, shapes))
            lines.append(f"- {desc}")
            lines += ["    " + line for line in compiled.summary().splitlines()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<DynamicModel {self.name}: inputs "
                f"{[s.describe() for s in self._specs]}, {len(self._cache)} specialisations>")


def _describe_shapes(feeds: Mapping[str, np.ndarray]) -> str:
    return "{" + ", ".join(f"'{n}': {list(a.shape)}" for n, a in feeds.items()) + "}"

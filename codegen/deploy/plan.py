"""What a deployed model is, as plain data: its C-visible tensors, the kernel calls over a
static memory plan, the weights blob, and the ABI's error codes and dtype codes.

The graph layer turns a CompiledModel into a DeployPlan (kiln/deploy.py); everything under
codegen/deploy works from this and the Kernels alone, so the export never reads a graph.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...te.errors import CodegenError

ABI_VERSION = 1
WEIGHT_ALIGNMENT = 64           # each constant starts on a cache line (and AVX-512 width)
WORKSPACE_ALIGNMENT = 64        # run aligns the caller's workspace pointer up to this

# (name, C macro suffix, message). Codes are the index; 0 is success. Append only.
ERRORS = (
    ("ok", "OK", "success"),
    ("null", "NULL_ARGUMENT", "a null pointer was passed: the inputs or outputs array, one of "
     "their entries (for a tensor of at least one byte), or the workspace (when "
     "workspace_bytes() is not 0)"),
    ("input_size", "INPUT_SIZE", "an input's byte size differs from the model's "
     "(<PREFIX>_INPUTk_BYTES)"),
    ("output_size", "OUTPUT_SIZE", "an output's byte size differs from the model's "
     "(<PREFIX>_OUTPUTk_BYTES)"),
    ("workspace_size", "WORKSPACE_SIZE", "the workspace is smaller than workspace_bytes()"),
    ("shut_down", "SHUT_DOWN", "the library was shut down (shutdown()); it runs no more"),
    ("threads", "THREAD_COUNT", "the thread count must be at least 1"),
    ("overlap", "OVERLAP", "an output buffer overlaps an input or another output"),
    ("pinned", "PINNED_VALUE", "an input that decides a shape differs from the value the model "
     "was compiled for"),
    ("busy", "BUSY", "shutdown() was called while a run was in progress; nothing was shut "
     "down"),
    ("no_weights", "NO_WEIGHTS", "the weights live in a side file and set_weights() has not "
     "been given them"),
    ("weights", "WEIGHTS", "set_weights() got a blob of the wrong size or one not aligned to "
     "64 bytes"),
    ("index", "INDEX_OUT_OF_RANGE", "an input holds an index outside its data's bounds (a "
     "Gather, GatherND, ScatterND, ... of the model: indices element out of data bounds); the "
     "outputs are not valid"),
)
CODE = {name: k for k, (name, _, _) in enumerate(ERRORS)}

# dtype codes of the header's tables (append only)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "uint16",
          "int32", "uint32", "int64", "uint64", "bool")
DTYPE_CODE = {name: k + 1 for k, name in enumerate(DTYPES)}


@dataclass(frozen=True)
class Tensor:
    """An input or output of the C API: C-contiguous, `dtype` as Kiln stores it."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Ref:
    """Where a kernel argument lives: `kind` "input"/"output" (the caller's buffer number
    `index`), "weight" or "arena" (`offset` bytes into the weights blob or the aligned
    workspace)."""

    kind: str
    index: int = 0
    offset: int = 0


@dataclass(frozen=True)
class Call:
    symbol: str
    args: tuple[Ref, ...]


@dataclass(frozen=True)
class Copy:
    """After the calls: copy `nbytes` from `source` into output `output` (an output that is
    a view of another buffer, a constant or an input)."""

    output: int
    source: Ref
    nbytes: int


@dataclass(frozen=True)
class IndexCheck:
    """After the calls: the (~min, max) int64 pairs a model's index_range kernel wrote at
    `offset` in the arena, one per index column, each checked against its (low, high)."""

    offset: int
    bounds: tuple[tuple[int, int], ...]


@dataclass
class DeployPlan:
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    calls: tuple[Call, ...]
    copies: tuple[Copy, ...]
    weights: bytes
    arena_bytes: int
    threads: int = 1
    pinned: dict[int, bytes] = field(default_factory=dict)   # input index -> its fixed value
    index_checks: tuple[IndexCheck, ...] = ()
    # kernels (symbols) that run on one thread whatever the count: measured no faster on
    # more when the model was compiled (graph/runtime/thread_choice.py)
    serial: frozenset[str] = frozenset()

    def workspace_bytes(self) -> int:
        return self.arena_bytes + WORKSPACE_ALIGNMENT - 1 if self.arena_bytes else 0

    def validate(self) -> None:
        for t in self.inputs + self.outputs:
            if t.dtype not in DTYPE_CODE:
                raise CodegenError(f"model '{self.name}': tensor '{t.name}' has dtype "
                                   f"{t.dtype}, which the C ABI has no code for "
                                   f"(supported: {', '.join(DTYPES)})")
        for call in self.calls:
            for ref in call.args:
                limit = {"input": len(self.inputs), "output": len(self.outputs)}.get(ref.kind)
                if ref.kind not in ("input", "output", "weight", "arena") or (
                        limit is not None and not 0 <= ref.index < limit):
                    raise CodegenError(f"model '{self.name}': call of '{call.symbol}' has a "
                                       f"bad argument {ref}")


def c_identifier(text: str) -> str:
    """`text` as a C identifier (a prefix or a macro suffix)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return ident if ident and not ident[0].isdigit() else "_" + ident


def check_prefix(prefix: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix or ""):
        raise CodegenError(f"C API prefix {prefix!r} is not a C identifier (letters, digits "
                           "and '_', not starting with a digit)")
    return prefix

"""ONNX sequence and optional values as compile-time structure.

Kiln compiles static graphs, so a sequence is a Python list of graph Values in the converter
context: its length and its elements' shapes are known when the model is specialised for its
inputs. SequenceConstruct/Empty/Insert/Erase/At/Length, ConcatFromSequence, SplitToSequence
and SequenceMap (its body inlined once per element, as Loop bodies are) manipulate lists; a
position must be known at compile time (a constant, or a graph input read like a Reshape's
shape: the model is specialised per value). An optional is a Value or a list when it holds
one, and EMPTY when it holds none, also known at compile time.

At the model boundary (load.load_onnx, graph/runtime/dynamic.py) a sequence-typed graph
input `s` given as n arrays becomes the tensor inputs `s[0]` .. `s[n-1]` (an optional tensor input
`o`: the tensor input `o`, or no input when empty), and a sequence-typed graph output `y`
becomes the tensor outputs `y[0]` .. `y[n-1]`; `pack_outputs` turns them back into lists.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from ...te.errors import ModelFormatError
from ..ir import Value
from .core import unsupported_error, converter


class _Empty:
    """The value of an optional that holds nothing."""

    def __repr__(self) -> str:
        return "<empty optional>"


EMPTY = _Empty()

# ops that take or make sequence/optional values (every other op refuses them)
STRUCTURED_OPS = frozenset({
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
    "SequenceLength", "ConcatFromSequence", "SplitToSequence", "SequenceMap", "Optional",
    "OptionalHasElement", "OptionalGetElement", "Identity", "If", "Loop"})


def is_structured(v: Any) -> bool:
    return isinstance(v, list) or v is EMPTY


def describe(v: Any) -> str:
    if v is EMPTY:
        return "an empty optional"
    if isinstance(v, list):
        return f"a sequence of {len(v)} tensors"
    return f"{v.dtype}{list(v.shape)}"


def check_inputs(ctx, key: str, inputs: Sequence[Any]) -> None:
    """UnsupportedOperatorError naming the node if an op that only takes tensors is given a
    sequence or an optional."""
    if key in STRUCTURED_OPS:
        return
    for k, v in enumerate(inputs):
        if is_structured(v):
            raise unsupported_error(ctx, f"input {k} being {describe(v)} (sequences and optionals "
                                    "are taken only by the Sequence*/Optional* ops, Identity, "
                                    "If and Loop)")


# -- the model boundary ------------------------------------------------------------------------

def type_kind(t: onnx.TypeProto) -> str:
    """'tensor', 'sequence', 'optional' (of a tensor), 'optional_sequence' or 'other'."""
    which = t.WhichOneof("value")
    if which == "tensor_type" or which is None:
        return "tensor"
    if which == "sequence_type":
        inner = t.sequence_type.elem_type.WhichOneof("value")
        return "sequence" if inner in ("tensor_type", None) else "other"
    if which == "optional_type":
        inner = type_kind(t.optional_type.elem_type)
        return {"tensor": "optional", "sequence": "optional_sequence"}.get(inner, "other")
    return "other"


def element_type(t: onnx.TypeProto) -> onnx.TypeProto.Tensor:
    """The tensor type inside a sequence/optional type (the type itself for a tensor)."""
    while True:
        which = t.WhichOneof("value")
        if which == "sequence_type":
            t = t.sequence_type.elem_type
        elif which == "optional_type":
            t = t.optional_type.elem_type
        else:
            return t.tensor_type


def is_structured_type(t: onnx.TypeProto) -> bool:
    return type_kind(t) != "tensor"


_ABSENT = object()


def resolve_input(inp: onnx.ValueInfoProto, given: Any, dtype: str):
    """(the value bound to structured graph input `inp`, its flat tensor Values) for the
    shapes `given`: a list of shapes for a sequence, a shape (or list of shapes) for an
    optional, which is empty when given None or no shape."""
    kind = type_kind(inp.type)
    name = inp.name
    if kind == "other":
        raise ModelFormatError(f"input '{name}' has a type (a map, or a sequence of "
                               "sequences) which Kiln does not support")
    if given is _ABSENT and kind.startswith("optional"):
        given = None        # an optional input without a shape: empty
    if given is _ABSENT:
        how = "[shape, ...] (one shape per element)" if kind.endswith("sequence") else \
            "(...) or None (empty)"
        raise ModelFormatError(f"input '{name}' is {kind.replace('_', ' of a ')}-typed: its "
                               f"shapes must be given, input_shapes={{'{name}': {how}}}")
    if given is None:
        if kind.startswith("optional"):
            return EMPTY, []
        raise ModelFormatError(f"input '{name}' is a sequence; None is given for it")
    seq = kind.endswith("sequence")
    if seq:
        shapes = list(given)
        if any(isinstance(s, (int, np.integer)) for s in shapes):
            raise ModelFormatError(f"input '{name}' is a sequence: give a list of shapes, "
                                   f"one per element, not {list(shapes)}")
        values = [Value(f"{name}[{k}]", tuple(int(d) for d in s), dtype)
                  for k, s in enumerate(shapes)]
        return values, list(values)
    v = Value(name, tuple(int(d) for d in given), dtype)
    return v, [v]


def flat_inputs(inp_types: Mapping[str, onnx.TypeProto],
                feeds: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Feeds by graph input (arrays, lists of arrays, None for an empty optional) as
    (tensor feeds by flat name, shapes by graph input for load_onnx's input_shapes)."""
    flat, shapes = {}, {}
    for name, value in feeds.items():
        kind = type_kind(inp_types[name]) if name in inp_types else "tensor"
        if value is None:
            shapes[name] = None
        elif kind.endswith("sequence"):
            arrays = [np.asarray(a) for a in value]
            flat.update({f"{name}[{k}]": a for k, a in enumerate(arrays)})
            shapes[name] = [a.shape for a in arrays]
        else:
            flat[name] = np.asarray(value)
            shapes[name] = flat[name].shape
    return flat, shapes


def flat_output_names(name: str, value: Any) -> list[str]:
    """The tensor outputs that graph output `name` holding `value` becomes."""
    if value is EMPTY:
        return []
    if isinstance(value, list):
        return [f"{name}[{k}]" for k in range(len(value))]
    return [name]


def pack_outputs(out_types: Sequence[tuple[str, onnx.TypeProto]], names: Sequence[str],
                 arrays: Sequence[np.ndarray]) -> list[Any]:
    """The flat outputs (`names`, `arrays`) of a compiled model as the graph's outputs:
    arrays, lists of arrays (sequences) and None (empty optionals). An optional sequence
    that holds an empty sequence comes back as None."""
    by_name = dict(zip(names, arrays))
    out = []
    for name, t in out_types:
        kind = type_kind(t)
        if kind in ("tensor", "optional"):
            out.append(by_name.get(name) if kind == "optional" else by_name[name])
            continue
        pattern = re.compile(re.escape(name) + r"\[(\d+)\]")
        items = sorted((int(m.group(1)), a) for n, a in by_name.items()
                       if (m := pattern.fullmatch(n)))
        if not items and kind == "optional_sequence":
            out.append(None)
        else:
            out.append([a for _, a in items])
    return out


# -- converters --------------------------------------------------------------------------------

def _sequence(ctx, s, what: str = "sequence") -> list:
    if not isinstance(s, list):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): its {what} input is "
                               f"{describe(s) if s is not None else 'missing'}; expected a "
                               "sequence")
    return s


def _position(ctx, pos: Value, length: int, end_ok: bool) -> int:
    """A compile-time position in a sequence of `length` (negative counts from the end)."""
    if is_structured(pos):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): its position is "
                               f"{describe(pos)}; expected an integer scalar")
    arr = ctx.static(pos, "position")
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): its position is "
                               f"{arr.dtype}{list(arr.shape)}; expected one integer")
    p = int(arr.reshape(-1)[0])
    hi = length if end_ok else length - 1
    if not -length <= p <= hi:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): position {p} is out "
                               f"of range for a sequence of {length} (allowed {-length}.."
                               f"{hi})")
    return p + length if p < 0 else p


@converter("SequenceEmpty")
def _sequence_empty(ctx, dtype=None):
    return []


@converter("SequenceConstruct")
def _sequence_construct(ctx, *inputs):
    if not inputs or any(not isinstance(v, Value) for v in inputs):
        raise ModelFormatError(f"node '{ctx.node_name}' (SequenceConstruct): takes one or "
                               "more tensors")
    if len({v.dtype for v in inputs}) > 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (SequenceConstruct): its tensors "
                               f"have different element types {[v.dtype for v in inputs]}")
    return list(inputs)


@converter("SequenceInsert")
def _sequence_insert(ctx, seq, tensor, position=None):
    items = _sequence(ctx, seq)
    if items and items[0].dtype != tensor.dtype:
        raise ModelFormatError(f"node '{ctx.node_name}' (SequenceInsert): inserts a "
                               f"{tensor.dtype} tensor into a sequence of {items[0].dtype}")
    p = len(items) if position is None else _position(ctx, position, len(items), True)
    return items[:p] + [tensor] + items[p:]


@converter("SequenceErase")
def _sequence_erase(ctx, seq, position=None):
    items = _sequence(ctx, seq)
    if not items:
        raise ModelFormatError(f"node '{ctx.node_name}' (SequenceErase): erases from an "
                               "empty sequence")
    p = len(items) - 1 if position is None else _position(ctx, position, len(items), False)
    return items[:p] + items[p + 1:]


@converter("SequenceAt")
def _sequence_at(ctx, seq, position):
    items = _sequence(ctx, seq)
    if not items:
        raise ModelFormatError(f"node '{ctx.node_name}' (SequenceAt): reads an empty "
                               "sequence")
    p = _position(ctx, position, len(items), False)
    return ctx.emit("identity", [items[p]], final=True)


@converter("SequenceLength")
def _sequence_length(ctx, seq):
    return ctx.const(np.array(len(_sequence(ctx, seq)), dtype=np.int64), final=True)


@converter("ConcatFromSequence")
def _concat_from_sequence(ctx, seq, axis, new_axis=0):
    items = _sequence(ctx, seq)
    if not items:
        raise ModelFormatError(f"node '{ctx.node_name}' (ConcatFromSequence): concatenates "
                               "an empty sequence")
    rank = len(items[0].shape) + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise ModelFormatError(f"node '{ctx.node_name}' (ConcatFromSequence): axis {axis} is "
                               f"out of range for rank {rank}")
    axis %= rank
    if new_axis:
        items = [ctx.emit("reshape", [v], {"shape": v.shape[:axis] + (1,) + v.shape[axis:]})
                 for v in items]
    return ctx.emit("concat" if len(items) > 1 else "identity", items,
                    {"axis": axis} if len(items) > 1 else None, final=True)


@converter("SplitToSequence")
def _split_to_sequence(ctx, x, split=None, axis=0, keepdims=1):
    rank = len(x.shape)
    if not -rank <= axis < rank:
        raise ModelFormatError(f"node '{ctx.node_name}' (SplitToSequence): axis {axis} is "
                               f"out of range for rank {rank}")
    axis %= rank
    n = x.shape[axis]
    if split is None:
        sizes, squeeze = [1] * n, not keepdims
    else:
        arr = ctx.static(split, "split")
        if arr.ndim == 0:
            step = int(arr)
            if step <= 0:
                raise ModelFormatError(f"node '{ctx.node_name}' (SplitToSequence): split "
                                       f"{step} must be positive")
            sizes = [min(step, n - s) for s in range(0, n, step)]
        else:
            sizes = [int(s) for s in arr.reshape(-1)]
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise ModelFormatError(f"node '{ctx.node_name}' (SplitToSequence): split "
                                       f"{sizes} does not add up to dim {axis} ({n})")
        squeeze = False
    out, start = [], 0
    for size in sizes:
        starts, ends = [0] * rank, list(x.shape)
        starts[axis], ends[axis] = start, start + size
        piece = ctx.emit("slice", [x], {"starts": tuple(starts), "ends": tuple(ends),
                                        "steps": (1,) * rank})
        if squeeze:
            piece = ctx.emit("reshape", [piece],
                             {"shape": x.shape[:axis] + x.shape[axis + 1:]})
        out.append(piece)
        start += size
    return out


@converter("SequenceMap")
def _sequence_map(ctx, seq, *extra, body):
    from .control import inline_graph
    items = _sequence(ctx, seq)
    for k, e in enumerate(extra):
        if isinstance(e, list) and len(e) != len(items):
            raise ModelFormatError(f"node '{ctx.node_name}' (SequenceMap): additional input "
                                   f"{k} has {len(e)} elements, the sequence {len(items)}")
        if e is EMPTY or e is None:
            raise ModelFormatError(f"node '{ctx.node_name}' (SequenceMap): additional input "
                                   f"{k} is {'missing' if e is None else describe(e)}")
    outs: list[list] = [[] for _ in body.output]
    for i, item in enumerate(items):
        args = [item] + [e[i] if isinstance(e, list) else e for e in extra]
        for k, v in enumerate(inline_graph(ctx, body, args, f"{ctx.node_name}/{i}")):
            if is_structured(v):
                raise unsupported_error(ctx, "a SequenceMap body whose outputs are sequences")
            outs[k].append(v)
    return tuple(outs)


@converter("Optional")
def _optional(ctx, x=None, type=None):  # noqa: A002 - the ONNX attribute's name
    return EMPTY if x is None else x


@converter("OptionalHasElement")
def _optional_has_element(ctx, x=None):
    return ctx.const(np.array(x is not None and x is not EMPTY), final=True)


@converter("OptionalGetElement")
def _optional_get_element(ctx, x):
    if x is EMPTY:
        raise ModelFormatError(f"node '{ctx.node_name}' (OptionalGetElement): the optional "
                               "holds no element")
    if isinstance(x, list):
        return x
    return ctx.emit("identity", [x], final=True)

"""Matrix products: matmul, dense (a fully connected layer) and broadcasting batch_matmul."""
from __future__ import annotations

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ..tensor import sum as te_sum
from ._common import broadcast_shape, check_tensor
from .broadcast import add
from .tags import BATCH_MATMUL, MATMUL


def _reader(t: Tensor, out_dtype: str | None):
    def read(*indices):
        value = t(*indices)
        return value if out_dtype is None else E.cast(value, out_dtype)
    return read


def _check_dtypes(op_name: str, a: Tensor, b: Tensor, out_dtype: str | None) -> None:
    if out_dtype is None and a.dtype != b.dtype:
        raise TEError(f"{op_name}(): '{a.name}' is {a.dtype} but '{b.name}' is {b.dtype}; "
                      "cast one of them or pass out_dtype=")


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
           out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """a @ b for 2-D operands (other ranks go to batch_matmul); out_dtype casts the
    operands before they are multiplied (int8 inputs with an int32 accumulator)."""
    check_tensor("matmul", a)
    check_tensor("matmul", b)
    if a.ndim != 2 or b.ndim != 2:
        return batch_matmul(a, b, transpose_a, transpose_b, out_dtype, name)
    _check_dtypes("matmul", a, b, out_dtype)
    m, k_a = a.shape[::-1] if transpose_a else a.shape
    k_b, n = b.shape[::-1] if transpose_b else b.shape
    if k_a != k_b:
        raise TEError(f"matmul(): the reduction dimensions differ: '{a.name}'{list(a.shape)}"
                      f"{'^T' if transpose_a else ''} @ '{b.name}'{list(b.shape)}"
                      f"{'^T' if transpose_b else ''} ({k_a} vs {k_b})")
    read_a, read_b = _reader(a, out_dtype), _reader(b, out_dtype)
    k = reduce_axis(k_a, "k")

    def body(i, j):
        x = read_a(k, i) if transpose_a else read_a(i, k)
        y = read_b(j, k) if transpose_b else read_b(k, j)
        return te_sum(x * y, axis=k)

    return compute((m, n), body, name=name or "matmul", tag=MATMUL)


def dense(x: Tensor, weight: Tensor, bias: Tensor | None = None, out_dtype: str | None = None,
          name: str | None = None) -> Tensor:
    """x[batch, in] @ weight[out, in]^T (+ bias[out] as a separate broadcast stage)."""
    check_tensor("dense", x)
    check_tensor("dense", weight, "weight")
    if x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[1]:
        raise TEError(f"dense(): expects x[batch, in] and weight[out, in], got "
                      f"'{x.name}'{list(x.shape)} and '{weight.name}'{list(weight.shape)}")
    out = matmul(x, weight, transpose_b=True, out_dtype=out_dtype, name=name or "dense")
    if bias is None:
        return out
    check_tensor("dense", bias, "bias")
    if bias.shape not in ((weight.shape[0],), (1,)):
        raise TEError(f"dense(): bias '{bias.name}'{list(bias.shape)} must have shape "
                      f"[{weight.shape[0]}] (one value per output feature)")
    return add(out, bias, name=f"{out.name}_bias")


def batch_matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
                 out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """numpy/ONNX MatMul: batch dims broadcast; a 1-D operand gains (then loses) a unit dim."""
    check_tensor("batch_matmul", a)
    check_tensor("batch_matmul", b)
    _check_dtypes("batch_matmul", a, b, out_dtype)
    if a.ndim == 0 or b.ndim == 0:
        raise TEError(f"batch_matmul(): operands must have at least 1 dimension, got "
                      f"'{a.name}'{list(a.shape)} and '{b.name}'{list(b.shape)}")
    a_rows = a.ndim >= 2
    b_cols = b.ndim >= 2
    a_mat = (a.shape[-1], a.shape[-2]) if transpose_a and a_rows else (
        a.shape[-2:] if a_rows else (1, a.shape[0]))
    b_mat = (b.shape[-1], b.shape[-2]) if transpose_b and b_cols else (
        b.shape[-2:] if b_cols else (b.shape[0], 1))
    (m, k_a), (k_b, n) = a_mat, b_mat
    if k_a != k_b:
        raise TEError(f"batch_matmul(): the reduction dimensions differ: '{a.name}'"
                      f"{list(a.shape)} @ '{b.name}'{list(b.shape)} ({k_a} vs {k_b})")
    a_batch, b_batch = a.shape[:-2] if a_rows else (), b.shape[:-2] if b_cols else ()
    batch = broadcast_shape("batch_matmul", _Shaped(a_batch, a.name), _Shaped(b_batch, b.name))
    shape = batch + ((m,) if a_rows else ()) + ((n,) if b_cols else ())
    read_a, read_b = _reader(a, out_dtype), _reader(b, out_dtype)
    k = reduce_axis(k_a, "k")

    def body(*idx):
        bidx, rest = idx[:len(batch)], list(idx[len(batch):])
        i = rest.pop(0) if a_rows else None
        j = rest.pop(0) if b_cols else None
        a_idx = _batch_index(a_batch, bidx)
        b_idx = _batch_index(b_batch, bidx)
        x = read_a(*a_idx, *((k, i) if transpose_a else (i, k))) if a_rows else read_a(k)
        y = read_b(*b_idx, *((j, k) if transpose_b else (k, j))) if b_cols else read_b(k)
        return te_sum(x * y, axis=k)

    tag = MATMUL if not batch else BATCH_MATMUL
    return compute(shape, body, name=name or "batch_matmul", tag=tag)


def _batch_index(own_batch: tuple[int, ...], out_batch_idx) -> tuple:
    offset = len(out_batch_idx) - len(own_batch)
    return tuple(0 if e == 1 else out_batch_idx[offset + d] for d, e in enumerate(own_batch))


class _Shaped:
    """A name and a shape, for reusing broadcast_shape on the batch part of a tensor."""

    def __init__(self, shape, name):
        self.shape, self.name = tuple(shape), name

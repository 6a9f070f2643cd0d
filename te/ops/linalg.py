"""Matrix products: matmul, dense (a fully connected layer), broadcasting batch_matmul, and
matmul_prepacked (a constant right operand laid out as column panels at compile time)."""
from __future__ import annotations

import numpy as np

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


# the tag of matmul_prepacked: a matmul (fusion class and anchor) whose right operand is
# column panels, which the search space recognises by the second item
MATMUL_PREPACKED = f"{MATMUL},prepacked"


def pack_matmul_weight(weight, block: int):
    """W[K, N] -> Wp[ceil(N / block), K, block]: each panel holds `block` columns, k-major,
    so a register tile of `block` columns reads one contiguous run per k (row-major W puts
    consecutive k a whole row apart). A tail panel (block not dividing N) is zero-padded."""
    weight = np.asarray(weight)
    if weight.ndim != 2 or block < 1:
        raise TEError(f"pack_matmul_weight(): expects weight[K, N] and block >= 1, got shape "
                      f"{list(weight.shape)} and block={block}")
    k, n = weight.shape
    panels = -(-n // block)
    padded = np.zeros((k, panels * block), weight.dtype)
    padded[:, :n] = weight
    return np.ascontiguousarray(padded.reshape(k, panels, block).transpose(1, 0, 2))


def unpack_matmul_weight(packed, n: int):
    """The inverse of pack_matmul_weight: [panels, K, block] -> W[K, n] (padding dropped)."""
    packed = np.asarray(packed)
    if packed.ndim != 3 or not (packed.shape[0] - 1) * packed.shape[2] < n <= (
            packed.shape[0] * packed.shape[2]):
        raise TEError(f"unpack_matmul_weight(): expects packed[panels, K, block] holding "
                      f"n={n} columns, got shape {list(packed.shape)}")
    panels, k, block = packed.shape
    return np.ascontiguousarray(packed.transpose(1, 0, 2).reshape(k, panels * block)[:, :n])


def matmul_prepacked(a: Tensor, packed: Tensor, n: int, name: str | None = None) -> Tensor:
    """a[..., M, K] @ W[K, n] with W given as pack_matmul_weight panels [P, K, block]:
    out[..., i, j] = sum_k a[..., i, k] * packed[j // block, k, j % block]. The leading
    dims of `a` are kept (BERT's [1, seq, hidden] @ W needs no reshape)."""
    check_tensor("matmul_prepacked", a)
    check_tensor("matmul_prepacked", packed, "packed")
    _check_dtypes("matmul_prepacked", a, packed, None)
    if a.ndim < 2 or packed.ndim != 3:
        raise TEError(f"matmul_prepacked(): expects a[..., M, K] and packed[panels, K, block], "
                      f"got '{a.name}'{list(a.shape)} and '{packed.name}'"
                      f"{list(packed.shape)}")
    panels, k_w, block = packed.shape
    if a.shape[-1] != k_w or not (panels - 1) * block < n <= panels * block:
        raise TEError(f"matmul_prepacked(): '{a.name}'{list(a.shape)} @ '{packed.name}'"
                      f"{list(packed.shape)} with n={n}: the reduction dims must match and "
                      f"the panels must hold exactly ceil(n / block) = {-(-n // block)} panels")
    k = reduce_axis(k_w, "k")

    def body(*idx):
        j = idx[-1]
        return te_sum(a(*idx[:-1], k) * packed(j // block, k, j % block), axis=k)

    return compute(tuple(a.shape[:-1]) + (n,), body, name=name or "matmul",
                   tag=MATMUL_PREPACKED)

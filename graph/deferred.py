"""Constants whose values are computed after the compile's serial start.

A compile needs a transformed weight's shape and dtype to build and key its kernels, but
its values only when the model is assembled. Computing them while the parent process waits
for its compile workers (graph/compile/parallel_build.py) instead of in a graph pass starts the
workers sooner: ResNet-50's Winograd weights cost the parent 0.3-0.6 s of serial CPU.

`DeferredArray(shape, dtype, fn, *args)` stands in the graph's constants for `fn(*args)`; its
shape, dtype, ndim, size and nbytes are known now; `np.asarray` (or any numpy conversion)
computes it on first use. `resolve_pending()` computes every one not yet used: the compile
calls it while the workers build kernels, and before assembling the model. Every value is
computed in this thread, once.
"""
from __future__ import annotations

import math
import weakref
from typing import Callable

import numpy as np

from ..te.errors import KilnError

# not yet computed, in creation order (weak: a graph dropped mid-compile drops its constants)
_pending: "weakref.WeakValueDictionary[int, DeferredArray]" = weakref.WeakValueDictionary()
_counter = [0]


class DeferredArray:
    """`fn(*args)`, an array of `shape` and `dtype`, computed on first use."""

    def __init__(self, shape, dtype, fn: Callable[..., np.ndarray], *args):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._fn, self._args = fn, args
        self._value: np.ndarray | None = None
        _counter[0] += 1
        _pending[_counter[0]] = self

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    @property
    def ready(self) -> bool:
        return self._value is not None

    def value(self) -> np.ndarray:
        if self._value is None:
            arr = np.asarray(self._fn(*self._args))
            if arr.shape != self.shape or arr.dtype != self.dtype:
                raise KilnError(f"a deferred constant computed {arr.dtype}{list(arr.shape)}, "
                                f"not the {self.dtype}{list(self.shape)} it promised; this is "
                                "a bug in Kiln")
            self._value, self._fn, self._args = arr, None, ()
        return self._value

    def __array__(self, dtype=None, copy=None):
        arr = self.value()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __repr__(self) -> str:
        state = "computed" if self.ready else "pending"
        return f"DeferredArray({self.dtype}{list(self.shape)}, {state})"


def resolve_pending() -> int:
    """Compute every deferred constant not yet computed; returns how many were."""
    done = 0
    for key in sorted(_pending.keys()):
        arr = _pending.pop(key, None)
        if arr is not None and not arr.ready:
            arr.value()
            done += 1
    return done


def resolve(constants) -> dict:
    """`constants` with every DeferredArray replaced by its value."""
    return {k: v.value() if isinstance(v, DeferredArray) else v for k, v in constants.items()}

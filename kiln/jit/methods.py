"""numpy's operators, array methods and dispatch protocols on Tracer, bound to kiln.numpy's
implementations: `x + y`, `x @ w`, `x[1:, None]`, `x.sum(axis=-1)`, `np.exp(x)` (through
__array_ufunc__) and `np.mean(x)` (through __array_function__) all trace."""
from __future__ import annotations

import numpy as np

from . import elementwise as ew
from . import linalg, reductions, shapes
from .errors import unsupported
from .trace import Tracer

FUNCTIONS: dict = {}        # numpy function object -> traced implementation (filled by kiln.numpy)


def _binary(fn):
    return (lambda a, b: fn(a, b)), (lambda a, b: fn(b, a))


for _name, _fn in (("add", ew.add), ("sub", ew.subtract), ("mul", ew.multiply),
                   ("truediv", ew.true_divide), ("floordiv", ew.floor_divide),
                   ("mod", ew.remainder), ("pow", ew.power), ("matmul", linalg.matmul),
                   ("and", ew.bitwise_and), ("or", ew.bitwise_or), ("xor", ew.bitwise_xor)):
    _fwd, _rev = _binary(_fn)
    setattr(Tracer, f"__{_name}__", _fwd)
    setattr(Tracer, f"__r{_name}__", _rev)

Tracer.__lt__ = lambda a, b: ew.less(a, b)
Tracer.__le__ = lambda a, b: ew.less_equal(a, b)
Tracer.__gt__ = lambda a, b: ew.greater(a, b)
Tracer.__ge__ = lambda a, b: ew.greater_equal(a, b)
Tracer.__eq__ = lambda a, b: ew.equal(a, b)
Tracer.__ne__ = lambda a, b: ew.not_equal(a, b)
Tracer.__neg__ = lambda a: ew.negative(a)
Tracer.__pos__ = lambda a: a
Tracer.__abs__ = lambda a: ew.absolute(a)
Tracer.__invert__ = lambda a: ew.invert(a)
Tracer.__getitem__ = lambda a, key: shapes.getitem(a, key)


def _shape_args(args):
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


Tracer.astype = lambda a, dtype, copy=True: ew.astype(a, dtype)
Tracer.reshape = lambda a, *shape, order="C": shapes.reshape(a, _shape_args(shape), order)
Tracer.transpose = lambda a, *axes: shapes.transpose(a, _shape_args(axes) if axes else None)
Tracer.T = property(lambda a: shapes.transpose(a))
Tracer.mT = property(lambda a: shapes.swapaxes(a, -1, -2))
Tracer.ravel = lambda a, order="C": shapes.ravel(a, order)
Tracer.flatten = Tracer.ravel
Tracer.squeeze = lambda a, axis=None: shapes.squeeze(a, axis)
Tracer.swapaxes = lambda a, i, j: shapes.swapaxes(a, i, j)
Tracer.take = lambda a, indices, axis=None: shapes.take(a, indices, axis)
Tracer.copy = lambda a: a
Tracer.sum = lambda a, axis=None, dtype=None, keepdims=False: reductions.sum(a, axis, dtype,
                                                                            keepdims)
Tracer.mean = lambda a, axis=None, dtype=None, keepdims=False: reductions.mean(a, axis, dtype,
                                                                              keepdims)
Tracer.prod = lambda a, axis=None, dtype=None, keepdims=False: reductions.prod(a, axis, dtype,
                                                                              keepdims)
Tracer.max = lambda a, axis=None, keepdims=False: reductions.max(a, axis, keepdims)
Tracer.min = lambda a, axis=None, keepdims=False: reductions.min(a, axis, keepdims)
Tracer.any = lambda a, axis=None, keepdims=False: reductions.any(a, axis, keepdims)
Tracer.all = lambda a, axis=None, keepdims=False: reductions.all(a, axis, keepdims)
Tracer.argmax = lambda a, axis=None, keepdims=False: reductions.argmax(a, axis, keepdims)
Tracer.argmin = lambda a, axis=None, keepdims=False: reductions.argmin(a, axis, keepdims)
Tracer.var = lambda a, axis=None, dtype=None, ddof=0, keepdims=False: reductions.var(
    a, axis, dtype, ddof, keepdims)
Tracer.std = lambda a, axis=None, dtype=None, ddof=0, keepdims=False: reductions.std(
    a, axis, dtype, ddof, keepdims)
Tracer.cumsum = lambda a, axis=None, dtype=None: reductions.cumsum(a, axis, dtype)
Tracer.clip = lambda a, min=None, max=None: ew.clip(a, min, max)
Tracer.round = lambda a, decimals=0: ew.round_(a, decimals)
Tracer.dot = lambda a, b: linalg.dot(a, b)
Tracer.item = lambda a, *args: a._concrete("a Python scalar (.item())")
Tracer.tolist = lambda a: a._concrete("a Python list (.tolist())")


_UFUNC_REDUCE = {"add": reductions.sum, "multiply": reductions.prod,
                 "maximum": reductions.max, "minimum": reductions.min,
                 "logical_and": reductions.all, "logical_or": reductions.any}


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    name = ufunc.__name__
    if kwargs.get("out") is not None:
        raise unsupported(f"{name}", "out=: traced arrays are immutable")
    kwargs.pop("out", None)
    if method == "__call__" and name in ew.UFUNCS and not kwargs:
        return ew.UFUNCS[name](*inputs)
    if method == "reduce" and name in _UFUNC_REDUCE and len(inputs) == 1:
        return _UFUNC_REDUCE[name](inputs[0], kwargs.get("axis", 0),
                                   keepdims=kwargs.get("keepdims", False))
    what = name if method == "__call__" else f"{name}.{method}"
    raise unsupported(what, f"keyword arguments {sorted(kwargs)}" if kwargs and
                      name in ew.UFUNCS else "")


def _array_function(self, func, types, args, kwargs):
    impl = FUNCTIONS.get(func)
    if impl is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        prefix = "" if module.startswith("numpy._core") or module == "numpy" else \
            module.removeprefix("numpy.") + "."
        raise unsupported(prefix + func.__name__)
    return impl(*args, **kwargs)


Tracer.__array_ufunc__ = _array_ufunc
Tracer.__array_function__ = _array_function
np_ndarray = np.ndarray     # (for kiln.numpy's isinstance checks)

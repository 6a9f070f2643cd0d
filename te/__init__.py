"""Tensor expressions: declare what to compute (placeholders, computes, reductions)."""
from .dtype import DTYPES
from .errors import (CodegenError, InternalError, KernelArgumentError, KilnError, LoweringError,
                     ModelFormatError, ScheduleError, TargetError, TEError, TuningDatabaseError,
                     UnsupportedOperatorError)
from .expr import (Expr, FloatImm, IntImm, IterKind, IterVar, Reduce, Var, abs, all_of, any_of,
                   call, cast, ceil, const, cos, erf, exp, floor, floordiv, floormod, if_then_else,
                   log, maximum, minimum, pow, power, reinterpret, round, rsqrt, select, sigmoid,
                   sin, sqrt, tanh, var)
from .tensor import (ComputeOp, PlaceholderOp, Tensor, TensorLoad, comm_reducer, compute, max,
                     min, placeholder, prod, reduce_axis, sum, thread_axis)
from .workload import canonical_form, canonical_text, describe, topo_ops, workload_key

__all__ = [name for name in dir() if not name.startswith("_")]

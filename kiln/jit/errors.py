"""Errors of traced code, and where in the user's code they happened.

A traced function runs once on abstract values; an error raised inside Kiln's own frames
would point at Kiln. `user_line()` finds the innermost frame outside Kiln and numpy, so every
message names the user's file, line and source text.
"""
from __future__ import annotations

import linecache
import os
import sys

import numpy as np

from ..te.errors import KilnError, UnsupportedOperatorError

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIPPED = (_KILN_DIR + os.sep, os.path.dirname(np.__file__) + os.sep)


def user_line() -> str:
    """'file:line (function): source' of the innermost frame outside Kiln and numpy."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
        frame = frame.f_back
    if frame is None:
        return "<unknown location>"
    code = frame.f_code
    source = linecache.getline(code.co_filename, frame.f_lineno).strip()
    where = f"{code.co_filename}:{frame.f_lineno} ({code.co_name})"
    return f"{where}: {source}" if source else where


class JitError(KilnError):
    """A traced function does something Kiln cannot compile; the message says what to do."""


class TracerBoolError(JitError, TypeError):
    """Python control flow (if/while/and/or/bool()) on a traced value."""


class TracerConversionError(JitError, TypeError):
    """A traced value converted to a concrete Python number or numpy array."""


class JitShapeError(JitError, ValueError):
    """Operand shapes that do not fit an operation (broadcasting, matmul, reshape, axes)."""


class UnsupportedNumpyError(UnsupportedOperatorError):
    """A numpy function (or form of one) that kiln.numpy does not implement."""


def unsupported(name: str, why: str = "") -> UnsupportedNumpyError:
    detail = f" ({why})" if why else ""
    return UnsupportedNumpyError(
        f"numpy.{name} is not supported in kiln.jit{detail}, at {user_line()}. Write it with "
        "the kiln.numpy functions that are (elementwise math, where, reductions, matmul, "
        "einsum, reshape/transpose/slicing/concatenate), or compute it outside the jitted "
        "function.")


def shape_error(op: str, message: str) -> JitShapeError:
    return JitShapeError(f"{op}: {message}, at {user_line()}")

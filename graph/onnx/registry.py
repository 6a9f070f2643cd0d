"""The ONNX converter registry: one converter per op type, and the module that registered it.

A converter receives the conversion context, the node's inputs as graph Values and its ONNX
attributes as keyword arguments (see core.py). Every converter module is imported in one
place (converters.py); registering an op type a second time is an error naming both modules,
so what an op means never depends on the order modules happen to be imported in. Where an
op's forms are converted in several modules (Conv: 1-D in spatial.py, 3-D in conv3d.py), one
converter composes them and dispatches on the input's rank inside.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable

from ...te.errors import InternalError

Converter = Callable[..., object]

_CONVERTERS: dict[str, Converter] = {}
_MODULES: dict[str, str] = {}
CONVERTERS = MappingProxyType(_CONVERTERS)   # read-only: register() is the way in


class DuplicateConverterError(InternalError):
    """A second converter for an op type (a programming error, raised at import)."""


def register(op_type: str, fn: Converter, module: str | None = None) -> Converter:
    """Register `fn` as the converter of `op_type` ("<domain>.<op>" outside the default
    domain); `module` names the registering module (default: where `fn` was defined)."""
    module = module or getattr(fn, "__module__", "?")
    if op_type in _CONVERTERS:
        raise DuplicateConverterError(
            f"ONNX op {op_type!r} has a converter from {_MODULES[op_type]} already; {module} "
            "registers a second one. Give the op one converter that handles every form "
            "(dispatch on rank or opset inside it).")
    _CONVERTERS[op_type] = fn
    _MODULES[op_type] = module
    return fn


def converter(*op_types: str):
    """Decorator: register the function as the converter of each of `op_types`."""
    def deco(fn: Converter) -> Converter:
        for t in op_types:
            register(t, fn)
        return fn
    return deco


def module_of(op_type: str) -> str:
    """The module that registered the converter of `op_type`."""
    return _MODULES[op_type]


def registered() -> dict[str, str]:
    """{op type: registering module} of every converter."""
    return dict(_MODULES)

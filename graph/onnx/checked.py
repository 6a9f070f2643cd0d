"""ONNX models that passed Kiln's up-front checks, remembered by the sha256 of their bytes.

A model with symbolic dims (a DynamicModel) is checked when `kiln.compile` returns (every op
supported, onnx.checker), before its first specialisation is compiled. Those checks cost
15-50 ms on a transformer: more than loading its compiled specialisation from the model
cache. Their verdict is a function of the model's bytes, Kiln's sources (the supported ops;
make_key's environment covers them) and the onnx version, so a pass is stored in the
persistent cache (KILN_CACHE_DIR, kind "checked") under exactly those, and a later compile of
the same bytes skips the checks. A failure is never stored: it is raised every time.
"""
from __future__ import annotations

import hashlib

import onnx

from ...codegen.cache_store import make_key, open_store
from ...te.errors import ModelFormatError
from .load import check_supported, model_opset


def _key(digest: str) -> str:
    return make_key("onnx-checked", model=digest, onnx=onnx.__version__)


def check_model_once(proto: onnx.ModelProto) -> str:
    """Raise as the checks do (UnsupportedOperatorError, ModelFormatError) unless these bytes
    passed them before; returns the sha256 of the model's bytes (serialised once, for the
    digest and for onnx.checker, which would serialise the proto itself)."""
    data = proto.SerializeToString()
    digest = hashlib.sha256(data).hexdigest()
    store = open_store("checked", "ok")
    if store is not None and (found := store.read(_key(digest))) is not None:
        found[0].close()
        return digest
    check_supported(proto, model_opset(proto))      # unsupported ops fail now, not at run
    try:
        onnx.checker.check_model(data)
    except onnx.checker.ValidationError as exc:
        raise ModelFormatError(f"ONNX model is invalid: {exc}") from exc
    if store is not None:
        store.write(_key(digest), [b"ok"])
    return digest

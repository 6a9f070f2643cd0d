"""`kiln quantize`: a thin front to onnxruntime.quantization, the library made for the job.

static (default, CNNs): onnxruntime's pre-processing (its graph optimizer folds BatchNorm into
the convs), then quantize_static in the QDQ format, per-channel int8 weights, uint8
activations, calibrated on the .npy/.npz files of a directory or on random inputs.
dynamic (transformers): quantize_dynamic, int8 weights, activations quantized at run time
(DynamicQuantizeLinear + MatMulInteger).
Kiln then compiles the result into integer kernels (graph/passes/int8/quantize.py).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import onnx

from .te.errors import KilnError, ModelFormatError

MODES = ("static", "dynamic")


def _model_inputs(model: onnx.ModelProto) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(name, shape with symbolic dims as 1, numpy dtype) of the real inputs."""
    init = {t.name for t in model.graph.initializer}
    out = []
    for inp in model.graph.input:
        if inp.name in init:
            continue
        tt = inp.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
        out.append((inp.name, shape, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)))
    return out


def random_inputs(model: onnx.ModelProto, count: int, seed: int = 0) -> list[dict]:
    """`count` feeds of standard-normal floats (zeros for integer inputs)."""
    rng = np.random.default_rng(seed)
    return [{name: (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype,
                                                                           np.floating)
                    else np.zeros(shape, dtype))
             for name, shape, dtype in _model_inputs(model)} for _ in range(count)]


def calibration_inputs(model: onnx.ModelProto, directory: str | os.PathLike) -> list[dict]:
    """Feeds from DIR: each .npz holds arrays by input name; each .npy is the single input
    of a one-input model."""
    root = Path(directory)
    if not root.is_dir():
        raise KilnError(f"--calibrate {root}: not a directory; give a directory of .npy/.npz "
                        "files, one calibration sample each")
    inputs = _model_inputs(model)
    feeds = []
    for path in sorted(root.iterdir()):
        if path.suffix == ".npz":
            with np.load(path) as data:
                feeds.append({name: data[name].astype(dtype) for name, _, dtype in inputs
                              if name in data})
                missing = [name for name, _, _ in inputs if name not in data]
            if missing:
                raise KilnError(f"calibration file {path} lacks inputs {missing}")
        elif path.suffix == ".npy":
            if len(inputs) != 1:
                raise KilnError(f"calibration file {path} is a bare .npy but the model has "
                                f"{len(inputs)} inputs; save .npz files keyed by input name")
            name, _, dtype = inputs[0]
            feeds.append({name: np.load(path).astype(dtype)})
    if not feeds:
        raise KilnError(f"--calibrate {root}: no .npy or .npz files in it")
    for feed in feeds:
        for name, shape, _ in inputs:
            if tuple(feed[name].shape) != shape:
                raise KilnError(f"calibration input '{name}' has shape "
                                f"{list(feed[name].shape)}, the model wants {list(shape)}")
    return feeds


class _Reader:
    """onnxruntime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, feeds: list[dict]):
        self._it: Iterator[dict] = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def quantize_model(model: str | os.PathLike, output: str | os.PathLike, mode: str = "static",
                   calibrate: str | os.PathLike | None = None, random: int = 8,
                   per_channel: bool = True, quant_format: str = "qdq",
                   activation: str = "uint8") -> Path:
    """Write the int8 version of `model` to `output` and return its path. `quant_format`
    (static mode): "qdq" (QuantizeLinear/DequantizeLinear around float ops) or "qoperator"
    (QLinearConv, QLinearMatMul, QLinearAdd, ...); `activation` (static mode): the
    activations' type, "uint8" or "int8" (weights are int8 either way)."""
    if mode not in MODES:
        raise KilnError(f"quantize mode {mode!r} is unknown; use one of {', '.join(MODES)}")
    src = Path(model)
    if not src.exists():
        raise ModelFormatError(f"model file '{src}' does not exist")
    if quant_format not in ("qdq", "qoperator"):
        raise KilnError(f"quantize format {quant_format!r} is unknown; use qdq or qoperator")
    if activation not in ("uint8", "int8"):
        raise KilnError(f"quantize activation type {activation!r} is unknown; use uint8 or "
                        "int8")
    if random < 1:
        raise KilnError(f"--random {random}: give at least 1 random calibration input")
    from onnxruntime.quantization import (QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    out = Path(output)
    if mode == "dynamic":
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8,
                         per_channel=per_channel)
        return out
    proto = onnx.load(str(src))
    feeds = calibration_inputs(proto, calibrate) if calibrate else random_inputs(proto, random)
    with tempfile.TemporaryDirectory() as tmp:
        prepared = os.path.join(tmp, "prepared.onnx")
        quant_pre_process(str(src), prepared, skip_symbolic_shape=True)
        quantize_static(prepared, str(out), _Reader(feeds), quant_format=QuantFormat.QDQ if quant_format == "qdq"
                        else QuantFormat.QOperator,
                        per_channel=per_channel, activation_type=QuantType.QUInt8 if activation == "uint8"
                        else QuantType.QInt8, weight_type=QuantType.QInt8)
    return out

"""`kiln quantize`: run as a user would, then the int8 model compiled by Kiln into integer
kernels and checked against onnxruntime running the same int8 model."""
from __future__ import annotations

import numpy as np
import onnx

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.models import default_cnn, mlp
from kiln.graph.passes import optimize
from kiln.quantize import random_inputs

from ..graph.graph_helpers import ort_run
from .test_cli import kiln as run_kiln


def _integer_kernels(path) -> int:
    ops = optimize(load_onnx(str(path))).op_counts()
    return sum(ops.get(k, 0) for k in ("conv2d_int8x4", "conv2d_integer", "matmul_int8x4",
                                        "matmul_integer"))


def _close_to_onnxruntime(path, atol):
    model = onnx.load(str(path))
    feeds = random_inputs(model, 1, seed=3)[0]
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], atol=atol)


def test_static_calibrated_on_a_directory(tmp_path):
    src, out, cal = tmp_path / "cnn.onnx", tmp_path / "cnn.int8.onnx", tmp_path / "cal"
    onnx.save(default_cnn(), src)
    cal.mkdir()
    for k in range(2):
        np.save(cal / f"{k}.npy", np.random.default_rng(k).standard_normal(
            (1, 3, 32, 32)).astype(np.float32))
    code, text = run_kiln("quantize", str(src), "-o", str(out), "--calibrate", str(cal))
    assert code == 0, text
    assert "wrote" in text and out.exists()
    types = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= types
    assert _integer_kernels(out) >= 2
    _close_to_onnxruntime(out, atol=0.5)


def test_dynamic_for_matmuls(tmp_path):
    src, out = tmp_path / "mlp.onnx", tmp_path / "mlp.int8.onnx"
    onnx.save(mlp(), src)
    code, text = run_kiln("quantize", str(src), "-o", str(out), "--mode", "dynamic")
    assert code == 0, text
    types = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= types
    assert _integer_kernels(out) >= 2
    _close_to_onnxruntime(out, atol=0.1)


def test_bad_calibration_directory_is_a_clear_error(tmp_path):
    src = tmp_path / "cnn.onnx"
    onnx.save(default_cnn(), src)
    code, text = run_kiln("quantize", str(src), "-o", str(tmp_path / "q.onnx"),
                          "--calibrate", str(tmp_path / "missing"))
    assert code == 1 and "not a directory" in text, text
    (tmp_path / "empty").mkdir()
    code, text = run_kiln("quantize", str(src), "-o", str(tmp_path / "q.onnx"),
                          "--calibrate", str(tmp_path / "empty"))
    assert code == 1 and "no .npy or .npz" in text, text


def test_qoperator_format_and_int8_activations(tmp_path):
    """--format qoperator writes QLinear* ops; --activation int8 gives int8 zero points."""
    src = tmp_path / "cnn.onnx"
    onnx.save(default_cnn(), src)
    qop, s8 = tmp_path / "qop.onnx", tmp_path / "s8.onnx"
    code, text = run_kiln("quantize", str(src), "-o", str(qop), "--random", "2",
                          "--format", "qoperator")
    assert code == 0, text
    assert "QLinearConv" in {n.op_type for n in onnx.load(str(qop)).graph.node}
    code, text = run_kiln("quantize", str(src), "-o", str(s8), "--random", "2",
                          "--activation", "int8")
    assert code == 0, text
    model = onnx.load(str(s8))
    inits = {t.name: t for t in model.graph.initializer}
    first_q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear")
    assert inits[first_q.input[2]].data_type == onnx.TensorProto.INT8
    _close_to_onnxruntime(s8, atol=0.5)

"""Shared helpers for the graph tests: tiny onnx.helper models and an onnxruntime oracle."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference

_ELEM = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
         "int64": TensorProto.INT64, "int32": TensorProto.INT32, "bool": TensorProto.BOOL,
         "int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def make_model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """inputs: {name: array or (shape, dtype)}; outputs: names or (name, dtype) pairs."""
    ins = []
    for name, spec in inputs.items():
        shape, dtype = (spec.shape, spec.dtype.name) if isinstance(spec, np.ndarray) else spec
        ins.append(helper.make_tensor_value_info(name, _ELEM[dtype], list(shape)))
    outs = []
    for o in outputs:
        name, dtype = (o, "float32") if isinstance(o, str) else o
        outs.append(helper.make_tensor_value_info(name, _ELEM[dtype], None))
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "test", ins, outs, initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return _fill_output_shapes(model)


def _fill_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give graph outputs their inferred shapes (the checker wants a shape on every output)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        src = known.get(out.name)
        if src is not None and src.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(src.type)
        elif not out.type.tensor_type.HasField("shape"):
            out.type.tensor_type.shape.SetInParent()  # rank unknown: mark as scalar-free
    return model


def one_node_model(op, feeds, inits=None, opset=18, n_out=1, order=None, ir_version=9,
                   strict=True, **attrs) -> onnx.ModelProto:
    """A one-node model `op(feeds..., inits...)` (or the inputs named in `order`): `feeds`
    become graph inputs, `inits` initializers. Output types come from onnx's inference
    (`strict`: its strict mode); an output it cannot type takes the first input's type."""
    inits = inits or {}
    node = helper.make_node(op, order or list(feeds) + list(inits),
                            [f"y{k}" for k in range(n_out)], name=f"{op}_0", **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                         list(a.shape)) for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(f"y{k}", TensorProto.UNDEFINED, None)
            for k in range(n_out)]
    g = helper.make_graph([node], "t", ins, outs, initializer=[
        numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=strict)
    for out, src in zip(m.graph.output, inferred.graph.output):
        typed = src.type.tensor_type.elem_type != TensorProto.UNDEFINED
        out.type.CopyFrom(src.type if typed else ins[0].type)
    return m


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-5, graph=None):
    """Convert `model`, run the numpy reference and onnxruntime; outputs must agree."""
    graph = graph if graph is not None else load_onnx(model)
    ours = run_reference(graph, feeds)
    theirs = ort_run(model, feeds)
    assert len(ours) == len(theirs)
    for (name, got), want in zip(ours.items(), theirs):
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)
    return graph

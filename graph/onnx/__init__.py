"""The ONNX frontend: load.py reads a model into the graph IR; the converter modules map each
ONNX op onto graph ops (CONVERTERS); functions.py expands ops defined as ONNX functions."""

"""The graph layer: ONNX frontend, graph IR, passes, fusion, memory plan, numpy reference.

    graph = load_onnx("model.onnx")             # static shapes, Kiln's normalised op set
    graph = optimize(graph)                      # fold, simplify, CSE, DCE
    groups = fuse_operators(graph)               # one FusedGroup per future kernel
    plan = plan_memory(graph, groups)            # arena offsets for the intermediates
    outputs = run_reference(graph, {"input": x}) # the numpy baseline / test oracle
"""
from .onnx.load import load_onnx
from .ir import FrozenDict, Graph, Node, OpClass, Value
from .compile.memory_plan import MemoryPlan, plan_memory
from .ops.core import op_class
from .passes import FusedGroup, fuse_operators, optimize, verify_graph
from .reference import run_reference

__all__ = ["FrozenDict", "FusedGroup", "Graph", "MemoryPlan", "Node", "OpClass", "Value",
           "fuse_operators", "load_onnx", "op_class", "optimize", "plan_memory",
           "run_reference", "verify_graph"]

"""The cost of float16 arithmetic rounded per operation (2026-11-25 17:30 UTC): one 6-op
elementwise chain (x*x*0.044715 + 0.5, tanh, * x, + x) over 256 x 4096, compiled for float16
and for float32, timed in turns (1 thread via KILN_NUM_THREADS=1), median of 30.

    KILN_NUM_THREADS=1 python benchmarks/half_precision_cost.py
"""
import json
import time
import numpy as np
import kiln
from onnx import helper, TensorProto as TP
def model(dt):
    x = helper.make_tensor_value_info("x", dt, [256, 4096]); y = helper.make_tensor_value_info("y", dt, [256, 4096])
    c = lambda n, v: helper.make_node("Constant", [], [n], value=helper.make_tensor(n, dt, [], [v]))
    nodes = [c("a", 0.5), c("b", 0.044715), helper.make_node("Mul", ["x", "x"], ["x2"]), helper.make_node("Mul", ["x2", "b"], ["t"]),
             helper.make_node("Add", ["t", "a"], ["u"]), helper.make_node("Tanh", ["u"], ["v"]), helper.make_node("Mul", ["v", "x"], ["w"]),
             helper.make_node("Add", ["w", "x"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)]); m.ir_version = 9
    return m
res = {}
ms = {k: kiln.compile(model(dt), db=None, threads=1) for k, dt in (("fp32", TP.FLOAT), ("fp16", TP.FLOAT16))}
xs = {"fp32": np.random.default_rng(0).standard_normal((256, 4096)).astype(np.float32)}
xs["fp16"] = xs["fp32"].astype(np.float16)
t = {k: [] for k in ms}
for r in range(30):
    for k in ms:
        s = time.perf_counter(); ms[k].run([xs[k]]); t[k].append(time.perf_counter() - s)
med = {k: float(np.median(v)) * 1e3 for k, v in t.items()}
print(f"fp32 {med['fp32']:.3f} ms  fp16 {med['fp16']:.3f} ms  fp16/fp32 {med['fp16'] / med['fp32']:.3f}")
print(json.dumps({"bench": "half_precision_cost", "fp32_ms": med["fp32"], "fp16_ms": med["fp16"], "fp16_over_fp32": med["fp16"] / med["fp32"]}))

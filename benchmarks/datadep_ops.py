"""NonZero, Unique and NonMaxSuppression (graph/staged.py): Kiln-compiled staged models against
onnxruntime at 1 thread, interleaved rounds, medians; outputs must be equal. Prints a table
and, last, one JSON object.

    KILN_NUM_THREADS=1 python benchmarks/datadep_ops.py
"""
import time, json, numpy as np, onnxruntime as ort, kiln
from onnx import helper, TensorProto, numpy_helper
def mk(nodes, ins, outs, inits):
    g = helper.make_graph(nodes, "b", ins, [helper.make_empty_tensor_value_info(o) for o in outs],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
def ort_time(m, feeds, reps):
    o = ort.SessionOptions(); o.intra_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); r = s.run(None, feeds); ts.append(time.perf_counter() - t)
    return float(np.median(ts)), r
rng = np.random.default_rng(0)
rows, out = [], {}
cases = []
for n, k in ((200, 10), (1000, 20), (1000, 100)):
    xy = rng.uniform(0, 1, (1, n, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(0.02, 0.2, (1, n, 2)).astype(np.float32)], 2)
    feeds = {"boxes": boxes, "scores": rng.uniform(0, 1, (1, 1, n)).astype(np.float32)}
    m = mk([helper.make_node("NonMaxSuppression", ["boxes", "scores", "lim", "iou", "thr"], ["sel"])],
           [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, n, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, n])], ["sel"],
           {"lim": np.array([k], np.int64), "iou": np.array([0.5], np.float32), "thr": np.array([0.1], np.float32)})
    cases.append((f"NMS {n} boxes, keep {k}", m, feeds))
x = (rng.uniform(0, 1, (64, 64)) > 0.9).astype(np.float32)
cases.append(("NonZero 64x64 (10% set)", mk([helper.make_node("NonZero", ["x"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])], ["y"], {}), {"x": x}))
u = rng.integers(0, 50, (1024,)).astype(np.float32)
cases.append(("Unique 1024 (50 values)", mk([helper.make_node("Unique", ["x"], ["y", "i", "v", "c"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])], ["y", "i", "v", "c"], {}), {"x": u}))
for name, m, feeds in cases:
    t = time.perf_counter(); c = kiln.compile(m, db=None, jobs=1); got = c.run(feeds); comp = time.perf_counter() - t
    ko, oo = [], []
    for _ in range(5):   # interleaved rounds
        ko.append(c.benchmark(feeds, repeat=5)); oo.append(ort_time(m, feeds, 5)[0])
    want = ort_time(m, feeds, 1)[1]
    ok = all(np.array_equal(a, b) for a, b in zip(got, want))
    k_ms, o_ms = 1e3 * float(np.median(ko)), 1e3 * float(np.median(oo))
    rows.append((name, comp, k_ms, o_ms, o_ms / k_ms, ok))
    out[name] = {"compile_s": round(comp, 2), "kiln_ms": round(k_ms, 4), "ort_ms": round(o_ms, 4), "ort_over_kiln": round(o_ms / k_ms, 3), "equal": ok}
print(f"{'case':28} {'compile s':>9} {'kiln ms':>9} {'ort ms':>9} {'ort/kiln':>8} equal")
for r in rows:
    print(f"{r[0]:28} {r[1]:9.2f} {r[2]:9.3f} {r[3]:9.3f} {r[4]:8.2f} {r[5]}")
print(json.dumps(out))

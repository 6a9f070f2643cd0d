"""Deterministic ONNX model builders (opset 17) used by tests, benchmarks and the CLI demo.

Every builder seeds its own generator, so two calls give byte-identical models. Sizes are
parameters so tests can build small variants of the big models. Regenerate the bundled model
with `python -m kiln.graph.models` (writes kiln/models/default_cnn.onnx).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    """Accumulates nodes and initializers; names are generated from a per-kind counter."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def name(self, kind: str) -> str:
        k = self._count.get(kind, 0)
        self._count[kind] = k + 1
        return f"{kind}_{k}"

    def const(self, arr: np.ndarray, kind: str = "w") -> str:
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, *shape: int, fan_in: int | None = None) -> str:
        fan = fan_in or int(np.prod(shape[1:])) or 1
        return self.const((self.rng.standard_normal(shape) * math.sqrt(2.0 / fan))
                          .astype(np.float32))

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        name = self.name(op_type.lower())
        outs = [f"{name}_out{k}" if n_out > 1 else name for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    # -- composite layers --------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = False) -> str:
        w = self.weight(cout, cin // group, k, k)
        ins = [x, w] + ([self.const(self.rng.uniform(-0.1, 0.1, cout).astype(np.float32))]
                        if bias else [])
        p = k // 2
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[p, p, p, p], group=group)

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.uniform(-0.2, 0.2, c), r.uniform(-0.2, 0.2, c),
                  r.uniform(0.5, 1.5, c)]
        return self.op("BatchNormalization", [x] + [self.const(p.astype(np.float32), "bn")
                                                    for p in params], epsilon=1e-5)

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act: str | None = "relu") -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, group), cout)
        if act == "relu":
            return self.op("Relu", [y])
        if act == "relu6":
            return self.op("Clip", [y, self.const(np.float32(0), "c"),
                                    self.const(np.float32(6), "c")])
        return y

    def linear(self, x: str, cin: int, cout: int) -> str:
        """MatMul + bias Add (the transformer form)."""
        y = self.op("MatMul", [x, self.weight(cin, cout, fan_in=cin)])
        return self.op("Add", [y, self.const(self.rng.uniform(-0.1, 0.1, cout)
                                             .astype(np.float32), "b")])

    def gemm(self, x: str, cin: int, cout: int) -> str:
        w = self.weight(cout, cin, fan_in=cin)
        b = self.const(self.rng.uniform(-0.1, 0.1, cout).astype(np.float32), "b")
        return self.op("Gemm", [x, w, b], transB=1)

    def ints(self, *vals: int) -> str:
        return self.const(np.array(vals, dtype=np.int64), "shape")

    def model(self, name: str, inputs, output: str, out_dtype=TensorProto.FLOAT):
        ins = [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs]
        outs = [helper.make_tensor_value_info(output, out_dtype, None)]
        g = helper.make_graph(self.nodes, name, ins, outs, initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="kiln.graph.models")
        m.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(m)
        m.graph.output[0].CopyFrom(inferred.graph.output[0])
        onnx.checker.check_model(m)
        return m


def default_cnn(batch: int = 1, image_size: int = 32, width: int = 16,
                num_classes: int = 10) -> onnx.ModelProto:
    """conv-bn-relu x2, a residual block, maxpool, conv-bn-relu, global avg pool, Gemm."""
    b = _Builder(seed=1)
    x = b.conv_bn("input", 3, width, 3)
    y = b.conv_bn(x, width, width, 3)
    y = b.conv_bn(y, width, width, 3, act=None)
    y = b.op("Relu", [b.op("Add", [y, x])])
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.conv_bn(y, width, 2 * width, 3)
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.gemm(y, 2 * width, num_classes)
    return b.model("default_cnn", [("input", TensorProto.FLOAT,
                                    (batch, 3, image_size, image_size))], y)


def resnet18_like(batch: int = 1, image_size: int = 224, base_width: int = 64,
                  num_classes: int = 1000) -> onnx.ModelProto:
    """ResNet-18's layer shapes: 7x7/2 stem, maxpool, 4 stages of 2 basic blocks, GAP, FC."""
    b = _Builder(seed=18)
    x = b.conv_bn("input", 3, base_width, 7, stride=2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = base_width
    for stage in range(4):
        cout = base_width * 2 ** stage
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.conv_bn(x, cin, cout, 3, stride)
            y = b.conv_bn(y, cout, cout, 3, act=None)
            short = x if stride == 1 and cin == cout else b.conv_bn(x, cin, cout, 1, stride,
                                                                    act=None)
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.gemm(x, cin, num_classes)
    return b.model("resnet18_like", [("input", TensorProto.FLOAT,
                                      (batch, 3, image_size, image_size))], x)


def resnet50_like(batch: int = 1, image_size: int = 224, base_width: int = 64,
                  num_classes: int = 1000, blocks: tuple[int, ...] = (3, 4, 6, 3)
                  ) -> onnx.ModelProto:
    """ResNet-50's layer shapes: 7x7/2 stem, maxpool, 4 stages of bottleneck blocks
    (1x1 reduce, 3x3 with the stage's stride, 1x1 expand by 4), GAP, FC."""
    b = _Builder(seed=50)
    x = b.conv_bn("input", 3, base_width, 7, stride=2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = base_width
    for stage, count in enumerate(blocks):
        mid = base_width * 2 ** stage
        cout = 4 * mid
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.conv_bn(x, cin, mid, 1)
            y = b.conv_bn(y, mid, mid, 3, stride)
            y = b.conv_bn(y, mid, cout, 1, act=None)
            short = x if stride == 1 and cin == cout else b.conv_bn(x, cin, cout, 1, stride,
                                                                    act=None)
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.gemm(x, cin, num_classes)
    return b.model("resnet50_like", [("input", TensorProto.FLOAT,
                                      (batch, 3, image_size, image_size))], x)


_MBV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
         (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenetv2_like(batch: int = 1, image_size: int = 224, width_mult: float = 1.0,
                     num_classes: int = 1000, stages: int = 7) -> onnx.ModelProto:
    """MobileNetV2: inverted residuals with depthwise 3x3 convs and Clip(0, 6) as ReLU6."""
    b = _Builder(seed=2)

    def ch(c: int) -> int:
        return max(8, int(c * width_mult + 4) // 8 * 8)

    cin = ch(32)
    x = b.conv_bn("input", 3, cin, 3, stride=2, act="relu6")
    for t, c, n, s in _MBV2[:stages]:
        cout = ch(c)
        for k in range(n):
            stride = s if k == 0 else 1
            hidden = cin * t
            y = b.conv_bn(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = b.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act="relu6")
            y = b.conv_bn(y, hidden, cout, 1, act=None)
            x = b.op("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    last = max(1280, ch(1280)) if width_mult > 1 else ch(1280)
    x = b.conv_bn(x, cin, last, 1, act="relu6")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.gemm(x, last, num_classes)
    return b.model("mobilenetv2_like", [("input", TensorProto.FLOAT,
                                         (batch, 3, image_size, image_size))], x)


def _layer_norm(b: _Builder, x: str, hidden: int, decomposed: bool) -> str:
    scale = b.const(b.rng.uniform(0.8, 1.2, hidden).astype(np.float32), "ln")
    bias = b.const(b.rng.uniform(-0.1, 0.1, hidden).astype(np.float32), "ln")
    if not decomposed:
        return b.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)
    mean = b.op("ReduceMean", [x], axes=[-1])  # an attribute until opset 18
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.const(np.float32(2), "c")])], axes=[-1])
    std = b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-5), "c")])])
    return b.op("Add", [b.op("Mul", [b.op("Div", [d, std]), scale]), bias])


def _attention(b: _Builder, x: str, seq: int, hidden: int, heads: int) -> str:
    dh = hidden // heads
    split = b.ints(0, 0, heads, dh)

    def project(perm):
        y = b.op("Reshape", [b.linear(x, hidden, hidden), split])
        return b.op("Transpose", [y], perm=perm)

    q, k, v = project([0, 2, 1, 3]), project([0, 2, 3, 1]), project([0, 2, 1, 3])
    scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(np.float32(math.sqrt(dh)), "c")])
    ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), b.ints(0, -1, hidden)])
    return b.linear(ctx, hidden, hidden)


def _gelu(b: _Builder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, b.const(np.float32(math.sqrt(2.0)), "c")])])
    half = b.op("Mul", [x, b.const(np.float32(0.5), "c")])
    return b.op("Mul", [half, b.op("Add", [e, b.const(np.float32(1.0), "c")])])


def bert_like_encoder(seq: int = 128, hidden: int = 256, heads: int = 4, layers: int = 2,
                      vocab: int = 1000, ffn_mult: int = 4) -> onnx.ModelProto:
    """Token + position embeddings, then post-LN transformer layers (attention, Erf GELU FFN).

    Even layers use the LayerNormalization op, odd layers its ReduceMean/Sub/Pow/Sqrt/Div
    decomposition, so both forms are exercised.
    """
    b = _Builder(seed=3)
    emb = b.const((b.rng.standard_normal((vocab, hidden)) * 0.1).astype(np.float32), "emb")
    pos = b.const((b.rng.standard_normal((1, seq, hidden)) * 0.1).astype(np.float32), "emb")
    x = b.op("Add", [b.op("Gather", [emb, "input_ids"], axis=0), pos])
    x = _layer_norm(b, x, hidden, decomposed=False)
    for layer in range(layers):
        decomposed = layer % 2 == 1
        x = _layer_norm(b, b.op("Add", [x, _attention(b, x, seq, hidden, heads)]), hidden,
                        decomposed)
        h = _gelu(b, b.linear(x, hidden, hidden * ffn_mult))
        x = _layer_norm(b, b.op("Add", [x, b.linear(h, hidden * ffn_mult, hidden)]), hidden,
                        decomposed)
    return b.model("bert_like_encoder", [("input_ids", TensorProto.INT64, (1, seq))], x)


def mlp(batch: int = 1, sizes: tuple[int, ...] = (784, 256, 128, 10)) -> onnx.ModelProto:
    """Gemm + Relu, then MatMul + Add + Relu layers, Softmax at the end."""
    b = _Builder(seed=4)
    x = b.op("Relu", [b.gemm("input", sizes[0], sizes[1])])
    for cin, cout in zip(sizes[1:-1], sizes[2:]):
        x = b.linear(x, cin, cout)
        if cout != sizes[-1]:
            x = b.op("Relu", [x])
    x = b.op("Softmax", [x], axis=-1)
    return b.model("mlp", [("input", TensorProto.FLOAT, (batch, sizes[0]))], x)


# the model `kiln tune` and `kiln bench` use when given none (built at run time)
DEFAULT_MODEL = "resnet18_like"

MODELS = {"default_cnn": default_cnn, "resnet18_like": resnet18_like,
          "mobilenetv2_like": mobilenetv2_like, "bert_like_encoder": bert_like_encoder,
          "mlp": mlp}



def default_model_path() -> Path:
    """kiln/models/default_cnn.onnx, in the source tree (editable) or the installed package."""
    here = Path(__file__).resolve().parent.parent
    source_tree = here / "kiln" / "models"       # graph/ sits next to kiln/ in the repo
    return (source_tree if source_tree.parent.is_dir() else here / "models") / "default_cnn.onnx"


def save_default_model(path: str | os.PathLike | None = None) -> Path:
    """Write default_cnn() to `path` (default: the bundled kiln/models/default_cnn.onnx)."""
    out = Path(path) if path is not None else default_model_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(default_cnn(), out)
    return out


if __name__ == "__main__":
    import logging
    logging.basicConfig(level=logging.INFO)
    logging.getLogger(__name__).info("wrote %s", save_default_model())

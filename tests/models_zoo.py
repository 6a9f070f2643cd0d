"""Small public-architecture-shaped ONNX models (opset 17, random weights, batch 1).

Each builder reproduces the block structure of a well-known network at a reduced size, so
benchmarks/architectures.py can compare Kiln's default schedules with onnxruntime on the
operator patterns those networks are made of:

- regnetx_like: grouped 3x3 convs of group width 8 (groups > 1, not depthwise)
- rexnet_like: inverted residuals with depthwise 3x3 convs, squeeze-excite and SiLU
  (Sigmoid * x, as torch exports it)
- mobilenetv3_like: HardSwish, squeeze-excite with HardSigmoid, ReLU blocks
- vit_tiny_like: patch-embedding conv, class token (Concat), pre-LN encoder layers with
  batched MatMul attention + Softmax, Erf GELU
- densenet_like: dense blocks whose every layer concatenates onto its input (concat-heavy)

Every builder seeds its own generator: two calls give byte-identical models.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from kiln.graph.models import OPSET, _Builder, _gelu, _layer_norm


def _image_model(b: _Builder, name: str, x: str, image_size: int, batch: int):
    return b.model(name, [("input", TensorProto.FLOAT, (batch, 3, image_size, image_size))], x)


def _silu(b: _Builder, x: str) -> str:
    return b.op("Mul", [x, b.op("Sigmoid", [x])])


def _conv_bias(b: _Builder, x: str, cin: int, cout: int) -> str:
    return b.conv(x, cin, cout, 1, bias=True)


def _squeeze_excite(b: _Builder, x: str, c: int, reduced: int, gate: str = "sigmoid",
                    inner: str = "relu") -> str:
    """Global average pool -> 1x1 conv -> act -> 1x1 conv -> gate -> x * gate."""
    s = b.op("GlobalAveragePool", [x])
    s = _conv_bias(b, s, c, reduced)
    s = b.op("Relu", [s]) if inner == "relu" else _silu(b, s)
    s = _conv_bias(b, s, reduced, c)
    s = b.op("Sigmoid", [s]) if gate == "sigmoid" else b.op("HardSigmoid", [s],
                                                            alpha=1.0 / 6, beta=0.5)
    return b.op("Mul", [x, s])


def regnetx_like(batch: int = 1, image_size: int = 96, widths=(24, 56, 152, 368),
                 depths=(1, 1, 2, 2), group_width: int = 8,
                 num_classes: int = 1000) -> onnx.ModelProto:
    """RegNet-X's block (1x1, 3x3 grouped conv of group width 8, 1x1, residual) at RegNetX-200MF's
    widths with fewer blocks (the shape benchmarks/tune_budget.py uses)."""
    assert OPSET == 17
    b = _Builder(seed=7)
    x = b.conv_bn("input", 3, 32, 3, stride=2)
    cin = 32
    for width, depth in zip(widths, depths):
        for block in range(depth):
            stride = 2 if block == 0 else 1
            y = b.conv_bn(x, cin, width, 1)
            y = b.conv_bn(y, width, width, 3, stride, group=width // group_width)
            y = b.conv_bn(y, width, width, 1, act=None)
            short = x if stride == 1 and cin == width else b.conv_bn(x, cin, width, 1, stride,
                                                                     act=None)
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = width
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.gemm(x, cin, num_classes)
    return _image_model(b, "regnetx_like", x, image_size, batch)


# ReXNet-1.0-like stages: (expansion, out channels, blocks, stride, squeeze-excite)
_REXNET = ((1, 16, 1, 1, False), (6, 27, 2, 2, False), (6, 38, 2, 2, True),
           (6, 61, 2, 2, True), (6, 84, 2, 1, True), (6, 128, 2, 2, True))


def rexnet_like(batch: int = 1, image_size: int = 112, num_classes: int = 1000,
                stages=_REXNET) -> onnx.ModelProto:
    """ReXNet / EfficientNet's inverted residual: 1x1 expand + SiLU, depthwise 3x3 (+ SE),
    ReLU6 after the depthwise as ReXNet has, 1x1 project, partial residual. ReXNet's channel
    counts are not multiples of 8 (27, 38, 61, ...)."""
    b = _Builder(seed=11)
    cin = 32
    x = _silu(b, b.conv_bn("input", 3, cin, 3, stride=2, act=None))
    for t, cout, n, s, se in stages:
        for k in range(n):
            stride = s if k == 0 else 1
            hidden = cin * t
            y = _silu(b, b.conv_bn(x, cin, hidden, 1, act=None)) if t != 1 else x
            y = b.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act=None)
            if se:
                y = _squeeze_excite(b, y, hidden, max(8, hidden // 12))
            y = b.op("Clip", [y, b.const(np.float32(0), "c"), b.const(np.float32(6), "c")])
            y = b.conv_bn(y, hidden, cout, 1, act=None)
            x = b.op("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    x = _silu(b, b.conv_bn(x, cin, 1280, 1, act=None))
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.gemm(x, 1280, num_classes)
    return _image_model(b, "rexnet_like", x, image_size, batch)


# MobileNetV3-Large's bneck rows: (kernel, expanded, out, SE, activation, stride)
_MBV3 = ((3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
         (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (3, 240, 80, False, "HS", 2),
         (3, 200, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1),
         (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1))


def mobilenetv3_like(batch: int = 1, image_size: int = 128, num_classes: int = 1000,
                     rows=_MBV3) -> onnx.ModelProto:
    """MobileNetV3-Large's bneck blocks: ReLU or HardSwish, depthwise 3x3/5x5, squeeze-excite
    with a HardSigmoid gate; HardSwish stem and head."""
    b = _Builder(seed=13)

    def act(y: str, kind: str) -> str:
        return b.op("Relu", [y]) if kind == "RE" else b.op("HardSwish", [y])

    x = act(b.conv_bn("input", 3, 16, 3, stride=2, act=None), "HS")
    cin = 16
    for k, hidden, cout, se, kind, stride in rows:
        y = act(b.conv_bn(x, cin, hidden, 1, act=None), kind) if hidden != cin else x
        y = act(b.conv_bn(y, hidden, hidden, k, stride, group=hidden, act=None), kind)
        if se:
            y = _squeeze_excite(b, y, hidden, _make_div(hidden // 4), gate="hard")
        y = b.conv_bn(y, hidden, cout, 1, act=None)
        x = b.op("Add", [x, y]) if stride == 1 and cin == cout else y
        cin = cout
    x = act(b.conv_bn(x, cin, 960, 1, act=None), "HS")
    x = b.op("GlobalAveragePool", [x])
    x = b.op("HardSwish", [_conv_bias(b, x, 960, 1280)])
    x = b.op("Flatten", [x])
    x = b.gemm(x, 1280, num_classes)
    return _image_model(b, "mobilenetv3_like", x, image_size, batch)


def _make_div(c: int, divisor: int = 8) -> int:
    return max(divisor, (c + divisor // 2) // divisor * divisor)


def _vit_attention(b: _Builder, x: str, hidden: int, heads: int) -> str:
    """Fused QKV projection, split into heads, batched MatMuls, Softmax (timm's form)."""
    dh = hidden // heads
    qkv = b.linear(x, hidden, 3 * hidden)                                  # (1, T, 3D)
    qkv = b.op("Reshape", [qkv, b.ints(0, 0, 3, heads, dh)])
    qkv = b.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])                   # (3, 1, H, T, dh)
    q, k, v = b.op("Split", [qkv, b.ints(1, 1, 1)], n_out=3, axis=0)
    q, k, v = (b.op("Squeeze", [t, b.ints(0)]) for t in (q, k, v))          # (1, H, T, dh)
    q = b.op("Mul", [q, b.const(np.float32(dh ** -0.5), "c")])
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])           # (1, H, T, dh)
    ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), b.ints(0, 0, hidden)])
    return b.linear(ctx, hidden, hidden)


def vit_tiny_like(batch: int = 1, image_size: int = 96, patch: int = 16, hidden: int = 192,
                  heads: int = 3, layers: int = 4, mlp_mult: int = 4,
                  num_classes: int = 1000) -> onnx.ModelProto:
    """ViT-Tiny's encoder (width 192, 3 heads) with fewer layers: patch-embedding conv,
    class token and position embedding, pre-LN layers (attention, Erf GELU MLP), head on the
    class token. At 96 px with 16 px patches: 36 patches + the class token = 37 tokens."""
    b = _Builder(seed=17)
    n = (image_size // patch) ** 2
    x = b.op("Conv", ["input", b.weight(hidden, 3, patch, patch),
                      b.const(b.rng.uniform(-0.1, 0.1, hidden).astype(np.float32), "b")],
             kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.op("Transpose", [b.op("Reshape", [x, b.ints(0, hidden, n)])], perm=[0, 2, 1])
    cls = b.const((b.rng.standard_normal((batch, 1, hidden)) * 0.02).astype(np.float32), "emb")
    x = b.op("Concat", [cls, x], axis=1)
    pos = b.const((b.rng.standard_normal((1, n + 1, hidden)) * 0.02).astype(np.float32), "emb")
    x = b.op("Add", [x, pos])
    for _ in range(layers):
        x = b.op("Add", [x, _vit_attention(b, _layer_norm(b, x, hidden, False), hidden, heads)])
        h = _gelu(b, b.linear(_layer_norm(b, x, hidden, False), hidden, hidden * mlp_mult))
        x = b.op("Add", [x, b.linear(h, hidden * mlp_mult, hidden)])
    x = _layer_norm(b, x, hidden, False)
    x = b.op("Gather", [x, b.const(np.array(0, dtype=np.int64), "idx")], axis=1)  # (1, D)
    x = b.gemm(x, hidden, num_classes)
    return b.model("vit_tiny_like", [("input", TensorProto.FLOAT,
                                      (batch, 3, image_size, image_size))], x)


def densenet_like(batch: int = 1, image_size: int = 96, growth: int = 32,
                  blocks=(3, 6, 6), bottleneck: int = 4,
                  num_classes: int = 1000) -> onnx.ModelProto:
    """DenseNet-121's dense layers (BN-ReLU-1x1 conv to 4 x growth, BN-ReLU-3x3 conv to growth,
    concatenated onto the block's running feature map) and transitions (BN-ReLU-1x1 conv
    halving the channels, 2x2 average pool), with fewer layers and a 3x3/2 stem. growth=12
    (DenseNet-BC on CIFAR) gives channel counts that are not multiples of 8."""
    b = _Builder(seed=19)
    c = 2 * growth
    x = b.conv("input", 3, c, 3, stride=2)
    for i, count in enumerate(blocks):
        for _ in range(count):
            y = b.op("Relu", [b.bn(x, c)])
            y = b.conv_bn(y, c, bottleneck * growth, 1)
            y = b.conv(y, bottleneck * growth, growth, 3)
            x = b.op("Concat", [x, y], axis=1)
            c += growth
        if i + 1 < len(blocks):
            y = b.conv(b.op("Relu", [b.bn(x, c)]), c, c // 2, 1)
            x = b.op("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    x = b.op("Relu", [b.bn(x, c)])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.gemm(x, c, num_classes)
    return _image_model(b, "densenet_like", x, image_size, batch)


ARCHITECTURES = {"regnetx_like": regnetx_like, "rexnet_like": rexnet_like,
                 "mobilenetv3_like": mobilenetv3_like, "vit_tiny_like": vit_tiny_like,
                 "densenet_like": densenet_like}

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


# -- window attention, large-kernel depthwise + channel LayerNorm, transposed attention --------
# (issue 33 item 2's slow classes; timm's block structure, torch's export forms)

def _roll(b: _Builder, x: str, shift: int, axis: int, size: int) -> str:
    """torch.roll along one axis as torch exports it (ONNX has no Roll): two Slices + Concat."""
    s = shift % size
    if s == 0:
        return x
    tail = b.op("Slice", [x, b.ints(size - s), b.ints(size), b.ints(axis)])
    head = b.op("Slice", [x, b.ints(0), b.ints(size - s), b.ints(axis)])
    return b.op("Concat", [tail, head], axis=axis)


def _swin_mask(res: int, window: int, shift: int) -> np.ndarray:
    """Swin's shifted-window attention mask (nW, N, N): -100 between tokens of different
    regions of the rolled image, as timm computes it at build time."""
    img = np.zeros((res, res), np.float32)
    cuts = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for hs in cuts:
        for ws in cuts:
            img[hs, ws] = label
            label += 1
    n = res // window
    win = img.reshape(n, window, n, window).transpose(0, 2, 1, 3).reshape(n * n, window ** 2)
    diff = win[:, None, :] - win[:, :, None]
    return np.where(diff != 0, -100.0, 0.0).astype(np.float32)


def _swin_block(b: _Builder, x: str, res: int, dim: int, heads: int, window: int,
                shift: int) -> str:
    """One Swin block on an NHWC map (1, res, res, dim): LN, roll by -shift, window partition
    (Reshape/Transpose), window attention with the relative position bias (Gather of a
    table) and the shift mask, window reverse, roll back, residual; LN + GELU MLP."""
    n, nw, dh = window * window, (res // window) ** 2, dim // heads
    y = _layer_norm(b, x, dim, False)
    y = _roll(b, _roll(b, y, -shift, 1, res), -shift, 2, res)
    y = b.op("Reshape", [y, b.ints(1, res // window, window, res // window, window, dim)])
    y = b.op("Transpose", [y], perm=[0, 1, 3, 2, 4, 5])
    y = b.op("Reshape", [y, b.ints(-1, n, dim)])                               # (nW, N, C)
    qkv = b.op("Reshape", [b.linear(y, dim, 3 * dim), b.ints(nw, n, 3, heads, dh)])
    qkv = b.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])                     # (3, nW, h, N, dh)
    q, k, v = b.op("Split", [qkv, b.ints(1, 1, 1)], n_out=3, axis=0)
    q, k, v = (b.op("Squeeze", [t, b.ints(0)]) for t in (q, k, v))
    q = b.op("Mul", [q, b.const(np.float32(dh ** -0.5), "c")])
    attn = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])    # (nW, h, N, N)
    table = b.const((b.rng.standard_normal(((2 * window - 1) ** 2, heads)) * 0.02)
                    .astype(np.float32), "emb")
    coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing="ij"))
    coords = coords.reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + window - 1
    index = (rel[..., 0] * (2 * window - 1) + rel[..., 1]).reshape(-1).astype(np.int64)
    bias = b.op("Gather", [table, b.const(index, "idx")], axis=0)
    bias = b.op("Transpose", [b.op("Reshape", [bias, b.ints(n, n, heads)])], perm=[2, 0, 1])
    attn = b.op("Add", [attn, b.op("Unsqueeze", [bias, b.ints(0)])])
    if shift:
        attn = b.op("Reshape", [attn, b.ints(1, nw, heads, n, n)])
        mask = _swin_mask(res, window, shift)[None, :, None]                  # (1, nW, 1, N, N)
        attn = b.op("Reshape", [b.op("Add", [attn, b.const(mask, "mask")]),
                                b.ints(-1, heads, n, n)])
    ctx = b.op("MatMul", [b.op("Softmax", [attn], axis=-1), v])              # (nW, h, N, dh)
    ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), b.ints(nw, n, dim)])
    y = b.linear(ctx, dim, dim)
    y = b.op("Reshape", [y, b.ints(1, res // window, res // window, window, window, dim)])
    y = b.op("Transpose", [y], perm=[0, 1, 3, 2, 4, 5])
    y = b.op("Reshape", [y, b.ints(1, res, res, dim)])
    y = _roll(b, _roll(b, y, shift, 1, res), shift, 2, res)
    x = b.op("Add", [x, y])
    h = _gelu(b, b.linear(_layer_norm(b, x, dim, False), dim, 4 * dim))
    return b.op("Add", [x, b.linear(h, 4 * dim, dim)])


def swin_like(batch: int = 1, image_size: int = 112, embed: int = 96, depths=(2, 2, 2),
              heads=(3, 6, 12), window: int = 7, num_classes: int = 1000) -> onnx.ModelProto:
    """Swin-T's blocks (window 7, alternating shifts of 0 and window // 2, timm's NHWC form)
    with fewer stages: 4x4 patch embedding + LN, shifted-window blocks, patch merging
    (Reshape/Transpose of 2x2 neighbours, LN, Linear 4C -> 2C), LN, mean pool, head. At 112 px
    the maps are 28, 14, 7: the last stage's one window takes no shift, as in timm."""
    assert batch == 1, "the window reshapes are written for batch 1"
    b = _Builder(seed=23)
    x = b.op("Conv", ["input", b.weight(embed, 3, 4, 4),
                      b.const(b.rng.uniform(-0.1, 0.1, embed).astype(np.float32), "b")],
             kernel_shape=[4, 4], strides=[4, 4])
    x = _layer_norm(b, b.op("Transpose", [x], perm=[0, 2, 3, 1]), embed, False)
    res, dim = image_size // 4, embed
    for stage, (depth, h) in enumerate(zip(depths, heads)):
        if stage:
            x = b.op("Reshape", [x, b.ints(1, res // 2, 2, res // 2, 2, dim)])
            x = b.op("Transpose", [x], perm=[0, 1, 3, 4, 2, 5])
            res //= 2
            x = b.op("Reshape", [x, b.ints(1, res, res, 4 * dim)])
            x = _layer_norm(b, x, 4 * dim, False)
            x = b.op("MatMul", [x, b.weight(4 * dim, 2 * dim, fan_in=4 * dim)])
            dim *= 2
        win = min(window, res)
        for block in range(depth):
            shift = win // 2 if block % 2 and res > window else 0
            x = _swin_block(b, x, res, dim, h, win, shift)
    x = _layer_norm(b, x, dim, False)
    x = b.op("ReduceMean", [x], axes=[1, 2], keepdims=0)
    x = b.gemm(x, dim, num_classes)
    return _image_model(b, "swin_like", x, image_size, batch)


def _layer_norm_2d(b: _Builder, x: str, c: int, decomposed: bool) -> str:
    """LayerNorm over the channels of an NCHW map: timm's LayerNorm2d (Transpose to NHWC,
    LayerNormalization, Transpose back), or the ConvNeXt repo's channels_first form
    (ReduceMean over axis 1, Sub, Pow, Sqrt, Div, per-channel scale and shift)."""
    scale = b.rng.uniform(0.8, 1.2, c).astype(np.float32)
    shift = b.rng.uniform(-0.1, 0.1, c).astype(np.float32)
    if not decomposed:
        y = b.op("Transpose", [x], perm=[0, 2, 3, 1])
        y = b.op("LayerNormalization", [y, b.const(scale, "ln"), b.const(shift, "ln")],
                 axis=-1, epsilon=1e-6)
        return b.op("Transpose", [y], perm=[0, 3, 1, 2])
    mean = b.op("ReduceMean", [x], axes=[1])
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.const(np.float32(2), "c")])], axes=[1])
    y = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-6), "c")])])])
    y = b.op("Mul", [y, b.const(scale.reshape(c, 1, 1), "ln")])
    return b.op("Add", [y, b.const(shift.reshape(c, 1, 1), "ln")])


def _dwconv(b: _Builder, x: str, c: int, k: int) -> str:
    return b.conv(x, c, c, k, group=c, bias=True)


def convnext_like(batch: int = 1, image_size: int = 128, dims=(80, 160, 320, 640),
                  depths=(1, 1, 3, 1), kernel: int = 7,
                  num_classes: int = 1000) -> onnx.ModelProto:
    """ConvNeXt-Nano's widths with fewer blocks: 4x4 stem + channels-first LN; blocks of a
    7x7 depthwise conv, Transpose to NHWC, LayerNormalization, Linear 4C, Erf GELU, Linear C,
    layer scale, Transpose back, residual; downsampling by channels-first LN (the
    ReduceMean form) + 2x2/2 conv; mean pool, LN, head."""
    b = _Builder(seed=29)
    x = b.op("Conv", ["input", b.weight(dims[0], 3, 4, 4),
                      b.const(b.rng.uniform(-0.1, 0.1, dims[0]).astype(np.float32), "b")],
             kernel_shape=[4, 4], strides=[4, 4])
    x = _layer_norm_2d(b, x, dims[0], False)
    for stage, (dim, depth) in enumerate(zip(dims, depths)):
        if stage:
            x = _layer_norm_2d(b, x, dims[stage - 1], True)
            x = b.op("Conv", [x, b.weight(dim, dims[stage - 1], 2, 2),
                              b.const(b.rng.uniform(-0.1, 0.1, dim).astype(np.float32), "b")],
                     kernel_shape=[2, 2], strides=[2, 2])
        for _ in range(depth):
            y = b.op("Transpose", [_dwconv(b, x, dim, kernel)], perm=[0, 2, 3, 1])
            y = _gelu(b, b.linear(_layer_norm(b, y, dim, False), dim, 4 * dim))
            y = b.linear(y, 4 * dim, dim)
            y = b.op("Mul", [y, b.const(b.rng.uniform(0.5, 1.0, dim).astype(np.float32), "g")])
            x = b.op("Add", [x, b.op("Transpose", [y], perm=[0, 3, 1, 2])])
    x = b.op("ReduceMean", [x], axes=[2, 3], keepdims=0)
    x = _layer_norm(b, x, dims[-1], False)
    x = b.gemm(x, dims[-1], num_classes)
    return _image_model(b, "convnext_like", x, image_size, batch)


def _l2_normalize(b: _Builder, x: str, axis: int) -> str:
    """F.normalize as torch exports it: ReduceL2, clamp at eps (Max), Div."""
    norm = b.op("ReduceL2", [x], axes=[axis], keepdims=1)
    return b.op("Div", [x, b.op("Max", [norm, b.const(np.float32(1e-12), "c")])])


def _xca(b: _Builder, x: str, tokens: int, dim: int, heads: int) -> str:
    """XCiT's cross-covariance attention: q, k, v as (1, h, dh, N), q and k L2-normalised
    along the tokens, attention q k^T over channels (dh x dh) scaled by a per-head
    temperature, Softmax, times v, back to (1, N, C)."""
    dh = dim // heads
    qkv = b.op("Reshape", [b.linear(x, dim, 3 * dim), b.ints(1, tokens, 3, heads, dh)])
    qkv = b.op("Transpose", [qkv], perm=[2, 0, 3, 4, 1])                    # (3, 1, h, dh, N)
    q, k, v = b.op("Split", [qkv, b.ints(1, 1, 1)], n_out=3, axis=0)
    q, k, v = (b.op("Squeeze", [t, b.ints(0)]) for t in (q, k, v))
    q, k = _l2_normalize(b, q, -1), _l2_normalize(b, k, -1)
    attn = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])    # (1, h, dh, dh)
    temp = b.const(b.rng.uniform(0.5, 1.5, (heads, 1, 1)).astype(np.float32), "t")
    attn = b.op("Softmax", [b.op("Mul", [attn, temp])], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [attn, v])], perm=[0, 3, 1, 2])  # (1, N, h, dh)
    return b.linear(b.op("Reshape", [ctx, b.ints(1, tokens, dim)]), dim, dim)


def _lpi(b: _Builder, x: str, side: int, dim: int) -> str:
    """XCiT's local patch interaction: tokens to an NCHW map, depthwise 3x3, GELU, BN,
    depthwise 3x3, back to tokens."""
    y = b.op("Reshape", [b.op("Transpose", [x], perm=[0, 2, 1]), b.ints(1, dim, side, side)])
    y = b.bn(_gelu(b, _dwconv(b, y, dim, 3)), dim)
    y = _dwconv(b, y, dim, 3)
    return b.op("Transpose", [b.op("Reshape", [y, b.ints(1, dim, side * side)])], perm=[0, 2, 1])


def xcit_like(batch: int = 1, image_size: int = 160, dim: int = 128, depth: int = 4,
              heads: int = 4, num_classes: int = 1000) -> onnx.ModelProto:
    """XCiT-Nano's layers (width 128, 4 heads) with fewer of them: conv patch embedding
    (3x3/2 conv + BN + GELU, x4, to 16x16 patches), a constant positional encoding, blocks of
    LN + XCA, LN + LPI, LN + MLP with layer scale, then a class-attention layer on a class
    token, LN, head on the class token. At 160 px: 100 tokens."""
    assert batch == 1, "the token reshapes are written for batch 1"
    b = _Builder(seed=31)
    x, c = "input", 3
    for k, width in enumerate((dim // 8, dim // 4, dim // 2, dim)):
        x = b.bn(b.conv(x, c, width, 3, stride=2), width)
        x = _gelu(b, x) if k < 3 else x
        c = width
    side = image_size // 16
    n = side * side
    x = b.op("Transpose", [b.op("Reshape", [x, b.ints(1, dim, n)])], perm=[0, 2, 1])
    x = b.op("Add", [x, b.const((b.rng.standard_normal((1, n, dim)) * 0.02)
                                .astype(np.float32), "emb")])

    def scaled(y: str) -> str:
        return b.op("Mul", [y, b.const(b.rng.uniform(0.5, 1.0, dim).astype(np.float32), "g")])

    for _ in range(depth):
        x = b.op("Add", [x, scaled(_xca(b, _layer_norm(b, x, dim, False), n, dim, heads))])
        x = b.op("Add", [x, scaled(_lpi(b, _layer_norm(b, x, dim, False), side, dim))])
        h = _gelu(b, b.linear(_layer_norm(b, x, dim, False), dim, 4 * dim))
        x = b.op("Add", [x, scaled(b.linear(h, 4 * dim, dim))])
    cls = b.const((b.rng.standard_normal((1, 1, dim)) * 0.02).astype(np.float32), "emb")
    x = b.op("Concat", [cls, x], axis=1)                                     # (1, N + 1, C)
    # class attention: the class token attends to all tokens (ordinary scaled dot product)
    y = _layer_norm(b, x, dim, False)
    dh = dim // heads
    q = b.op("Reshape", [b.linear(b.op("Slice", [y, b.ints(0), b.ints(1), b.ints(1)]), dim, dim),
                         b.ints(1, 1, heads, dh)])
    q = b.op("Mul", [b.op("Transpose", [q], perm=[0, 2, 1, 3]),
                     b.const(np.float32(dh ** -0.5), "c")])                  # (1, h, 1, dh)
    k = b.op("Transpose", [b.op("Reshape", [b.linear(y, dim, dim), b.ints(1, n + 1, heads, dh)])],
             perm=[0, 2, 3, 1])                                              # (1, h, dh, N+1)
    v = b.op("Transpose", [b.op("Reshape", [b.linear(y, dim, dim), b.ints(1, n + 1, heads, dh)])],
             perm=[0, 2, 1, 3])
    ctx = b.op("MatMul", [b.op("Softmax", [b.op("MatMul", [q, k])], axis=-1), v])
    ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), b.ints(1, 1, dim)])
    tok = b.op("Add", [b.op("Slice", [x, b.ints(0), b.ints(1), b.ints(1)]),
                       scaled(b.linear(ctx, dim, dim))])
    tok = _layer_norm(b, tok, dim, False)
    x = b.gemm(b.op("Reshape", [tok, b.ints(1, dim)]), dim, num_classes)
    return _image_model(b, "xcit_like", x, image_size, batch)


ARCHITECTURES["swin_like"] = swin_like
ARCHITECTURES["convnext_like"] = convnext_like
ARCHITECTURES["xcit_like"] = xcit_like

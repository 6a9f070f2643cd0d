"""Export torchvision architectures (random weights, batch 1) to ONNX for benchmarks/architectures.py.

    /path/to/torch-venv/bin/python benchmarks/export_torchvision.py [--out /tmp/kiln_tv]
                                   [--models resnet18,convnext_tiny] [--size 128]
                                   [--more | --extra]

Needs torch and torchvision (not Kiln's dependencies: run it with a Python that has them).
Each model is built with its default constructor (random initialisation, seeded), put in eval
mode and exported with the TorchScript exporter (`dynamo=False`, opset 17) at batch 1 and a
reduced resolution (the table below; `--size` overrides it for all), one file per model,
`<out>/<name>.onnx`, input named "input". Then

    python benchmarks/architectures.py --onnx /tmp/kiln_tv

compares Kiln's default schedules with onnxruntime on them. The .onnx files are large
(5-350 MB): keep them outside the repository.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# name -> input side. 224 where the model is cheap or needs it (ViT's position embedding is
# fixed to 224 / 16 = 14 patches a side), 128 or 112 elsewhere.
MODELS = {
    "resnet18": 128,
    "resnext50_32x4d": 112,
    "regnet_x_400mf": 128,
    "regnet_y_400mf": 128,
    "efficientnet_b0": 128,
    "mobilenet_v3_small": 224,
    "mnasnet1_0": 128,
    "shufflenet_v2_x1_0": 128,
    "squeezenet1_1": 128,
    "densenet121": 112,
    "convnext_tiny": 112,
    "googlenet": 128,
    "vit_s_16": 112,
}
# More architectures (`--more`): video (3-D convs over 8 frames), windowed and block/grid
# attention, segmentation heads (dilated convs, resize), larger CNNs.
MORE = {
    "r3d_18": 56,
    "r2plus1d_18": 56,
    "swin_t": 224,
    "maxvit_t": 224,
    "inception_v3": 160,
    "deeplabv3_mobilenet_v3_large": 128,
    "lraspp_mobilenet_v3_large": 128,
    "efficientnet_v2_s": 128,
    "mobilenet_v3_large": 128,
    "regnet_y_800mf": 96,
    "mnasnet0_5": 96,
    "shufflenet_v2_x0_5": 96,
    "alexnet": 224,
}
# A third set (`--extra`): deeper and wider residual nets, VGG with batch norm, inverted
# residuals without squeeze-excite, a wider RegNet, Swin-V2 (cosine attention, log-spaced
# position bias), FCN segmentation on a ResNet-50 (dilated convs), SqueezeNet 1.0.
EXTRA = {
    "resnet50": 112,
    "wide_resnet50_2": 96,
    "vgg11_bn": 224,       # the 7x7 adaptive pool needs a multiple of 224 / 32
    "mobilenet_v2": 128,
    "efficientnet_b1": 128,
    "regnet_x_1_6gf": 96,
    "shufflenet_v2_x1_5": 128,
    "fcn_resnet50": 96,
    "squeezenet1_0": 128,
    "swin_v2_t": 128,
    "densenet169": 96,
    "resnet101": 96,
}
VIDEO = ("r3d_18", "r2plus1d_18")
SEGMENTATION = ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50")
# vit_s_16 is ViT-Small/16 (12 layers of width 384, 6 heads), built from torchvision's
# VisionTransformer class: vit_b_16 at 224 is 350 MB and ~17 GFLOPs, too slow to time often.


def import_torchvision():
    """Import torchvision even when its compiled ops (_C.so) do not load against this torch.

    The wheels on PyPI link _C.so against a CUDA build of torch; with a CPU build, importing
    torchvision fails while registering fake kernels for the detection ops (nms, roi_align),
    which no classification model uses. Registering is skipped during the import only.
    """
    import torch
    import torch.library
    try:
        import torchvision
        return torch, torchvision
    except RuntimeError:
        for key in [k for k in sys.modules if k.startswith("torchvision")]:
            del sys.modules[key]
    original = torch.library.register_fake
    torch.library.register_fake = lambda *a, **k: (lambda fn: fn)
    try:
        import torchvision
    finally:
        torch.library.register_fake = original
    return torch, torchvision


def build(torchvision, name: str, side: int):
    if name == "vit_s_16":
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=side, patch_size=16, num_layers=12,
                                 num_heads=6, hidden_dim=384, mlp_dim=1536).eval()
    if name in VIDEO:
        return getattr(torchvision.models.video, name)(weights=None).eval()
    if name in SEGMENTATION:
        import torch

        class Logits(torch.nn.Module):      # the heads return a dict; export its "out"
            def __init__(self, net):
                super().__init__()
                self.net = net

            def forward(self, x):
                return self.net(x)["out"]
        net = getattr(torchvision.models.segmentation, name)(weights=None,
                                                             weights_backbone=None)
        return Logits(net).eval()
    ctor = getattr(torchvision.models, name)
    kwargs = {}
    if name in ("googlenet", "inception_v3"):
        kwargs = {"aux_logits": False, "init_weights": True}
    return ctor(weights=None, **kwargs).eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/kiln_tv")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated (default: {','.join(MODELS)}; with --more: "
                             f"{','.join(MORE)}; with --extra: {','.join(EXTRA)})")
    parser.add_argument("--more", action="store_true",
                        help="the MORE set: video, windowed attention, segmentation")
    parser.add_argument("--extra", action="store_true",
                        help="the EXTRA set: deeper/wider CNNs, VGG, Swin-V2, FCN")
    parser.add_argument("--size", type=int, default=0, help="input side for every model")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args(argv)
    torch, torchvision = import_torchvision()
    torch.manual_seed(0)
    # eval-mode attention otherwise exports as aten::_native_multi_head_attention (no ONNX op)
    torch.backends.mha.set_fastpath_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    failed = []
    default = EXTRA if args.extra else MORE if args.more else MODELS
    names = args.models.split(",") if args.models else list(default)
    for name in [n for n in names if n]:
        side = args.size or {**MODELS, **MORE, **EXTRA}.get(name, 128)
        path = os.path.join(args.out, f"{name}.onnx")
        start = time.perf_counter()
        try:
            net = build(torchvision, name, side)
            with torch.no_grad():
                # zero-initialised weights (ViT's classifier head) would make every output
                # 0, and the check against onnxruntime meaningless
                for p in net.parameters():
                    if p.ndim >= 2 and not p.any():
                        p.normal_(0.0, 0.02)
            x = torch.randn((1, 3, 8, side, side) if name in VIDEO else (1, 3, side, side))
            with torch.no_grad():
                torch.onnx.export(net, (x,), path, input_names=["input"],
                                  output_names=["output"], opset_version=args.opset,
                                  dynamo=False)
        except Exception as exc:  # report and go on with the others
            failed.append(name)
            print(f"{name}: export failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        size_mb = os.path.getsize(path) / 2**20
        print(f"{name}: {side}x{side} -> {path} ({size_mb:.1f} MB, "
              f"{time.perf_counter() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

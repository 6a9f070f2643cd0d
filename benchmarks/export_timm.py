"""Export timm architectures (random weights, batch 1) to ONNX for benchmarks/architectures.py.

    /path/to/torch-venv/bin/python benchmarks/export_timm.py [--out /tmp/kiln_timm]
                                   [--models swin_tiny,mixnet_s] [--exporter dynamo|script]

Needs torch and timm (not Kiln's dependencies: run it with a Python that has them). The set
covers blocks Kiln's other sets lack: window attention with cyclic shifts (Swin), large-kernel
depthwise convs with channel LayerNorm (ConvNeXt atto/femto, EdgeNeXt, InceptionNeXt),
transposed channel attention (XCiT, EdgeNeXt), mixed kernel sizes (MixNet), linear
attention (EfficientViT-B), cascaded group attention (EfficientViT-M), reparameterised
convs (RepViT, FastViT, MobileOne), block/grid attention (MaxViT), multi-resolution
branches (HRNet), deep aggregation (DLA), pooling as token mixer (PoolFormer), star
operations (StarNet), spatial-reduction attention (PVT-v2).

Each model comes from `timm.create_model(name, pretrained=False, **kwargs)` at a reduced
input side (the table), in eval mode, seeded, and is exported with the exporter the table
names: "dynamo" (`torch.onnx.export(..., dynamo=True)`, opset 18) or "script" (the
TorchScript exporter, `dynamo=False`, opset 17); `--exporter` forces one for all. A model
that fails to build or export is listed on stderr and skipped; the exit status is then 1.
After each export onnxruntime times the file at 1 thread (median of 20 runs), printed so
that models too slow for a few-minute sweep can be left out. `<out>/exports.json` records
each file's source, exporter, opset and input shape (merged with what is already there).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# name -> (timm model, input side, create_model kwargs, exporter)
MODELS = {
    # Swin-T's layout at half its depth and 2/3 of its width (Swin-T itself: 75 ms at 128 px)
    "swin_mini": ("swin_tiny_patch4_window7_224", 128,
                  {"window_size": 4, "embed_dim": 64, "depths": (2, 2, 2, 2)}, "dynamo"),
    "convnext_atto": ("convnext_atto", 128, {}, "script"),
    "convnext_femto": ("convnext_femto", 128, {}, "dynamo"),
    "xcit_nano": ("xcit_nano_12_p16_224", 128, {}, "script"),
    "mixnet_s": ("mixnet_s", 128, {}, "dynamo"),
    "efficientvit_b0": ("efficientvit_b0", 128, {}, "script"),
    "efficientvit_m0": ("efficientvit_m0", 128, {}, "dynamo"),
    "mobilenetv3_large": ("mobilenetv3_large_100", 160, {}, "script"),
    "ghostnet": ("ghostnet_100", 160, {}, "dynamo"),
    "regnety_004": ("regnety_004", 128, {}, "script"),
    "levit_128s": ("levit_128s", 128, {}, "dynamo"),
    "poolformer_s12": ("poolformer_s12", 128, {}, "script"),
    "mobilevit_xs": ("mobilevit_xs", 128, {}, "dynamo"),
    "edgenext_xx_small": ("edgenext_xx_small", 128, {}, "script"),
    "repvit_m0_9": ("repvit_m0_9", 128, {}, "dynamo"),
    "fastvit_t8": ("fastvit_t8", 128, {}, "script"),
    "coatnet_nano": ("coatnet_nano_rw_224", 128, {}, "dynamo"),
    "maxvit_nano": ("maxvit_nano_rw_256", 128, {}, "script"),
    "deit_tiny": ("deit_tiny_patch16_224", 128, {}, "dynamo"),
    "efficientnet_b0_timm": ("efficientnet_b0", 128, {}, "script"),
    "hrnet_w18_small": ("hrnet_w18_small", 128, {}, "dynamo"),
    "dla34": ("dla34", 128, {}, "script"),
    "inception_next_atto": ("inception_next_atto", 128, {}, "dynamo"),
    "mobileone_s0": ("mobileone_s0", 128, {}, "script"),
    "starnet_s1": ("starnet_s1", 128, {}, "dynamo"),
    "pvt_v2_b0": ("pvt_v2_b0", 128, {}, "script"),
    "lcnet_100": ("lcnet_100", 160, {}, "dynamo"),
    "selecsls42b": ("selecsls42b", 128, {}, "script"),
}
# models whose position embedding or window layout is fixed by the input size they are built for
SIZED = ("swin", "xcit", "levit", "coatnet", "maxvit", "deit", "efficientvit_m")


def export(torch, net, inputs: tuple, path: str, exporter: str, names: list[str],
           axes=None) -> int:
    """Export `net` called on `inputs` to `path` with the named exporter; returns the opset."""
    if exporter == "dynamo":
        torch.onnx.export(net, inputs, path, input_names=names, output_names=["output"],
                          opset_version=18, dynamo=True, external_data=False)
        return 18
    if exporter != "script":
        raise ValueError(f"exporter {exporter!r}: expected 'dynamo' or 'script'")
    torch.onnx.export(net, inputs, path, input_names=names, output_names=["output"],
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    return 17


def ort_ms(path: str, feeds: dict) -> float:
    """onnxruntime's 1-thread latency of the file (median of 20 runs), in ms."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def record(out: str, entries: dict) -> None:
    """Merge `entries` into <out>/exports.json (one record per exported file)."""
    path = os.path.join(out, "exports.json")
    known = {}
    if os.path.exists(path):
        with open(path) as f:
            known = json.load(f)
    known.update(entries)
    with open(path, "w") as f:
        json.dump(known, f, indent=1, sort_keys=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/kiln_timm")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated (default: {','.join(MODELS)})")
    parser.add_argument("--exporter", choices=("dynamo", "script"), default=None,
                        help="use this exporter for every model instead of the table's")
    args = parser.parse_args(argv)
    from export_torchvision import import_torchvision
    torch, _ = import_torchvision()     # timm imports torchvision
    import timm
    names = args.models.split(",") if args.models else list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    os.makedirs(args.out, exist_ok=True)
    failed, done = [], {}
    for name in names:
        timm_name, side, kwargs, exporter = MODELS[name]
        exporter = args.exporter or exporter
        if timm_name.startswith(SIZED):
            kwargs = {"img_size": side, **kwargs}
        path = os.path.join(args.out, f"{name}.onnx")
        start = time.perf_counter()
        torch.manual_seed(0)
        try:
            net = timm.create_model(timm_name, pretrained=False, **kwargs).eval()
            if hasattr(net, "reparameterize"):
                net.reparameterize()
            x = torch.randn(1, 3, side, side)
            with torch.no_grad():
                for p in net.parameters():      # a zero-initialised head: all-zero output
                    if p.ndim >= 2 and not p.any():
                        p.normal_(0.0, 0.02)
                opset = export(torch, net, (x,), path, exporter, ["input"])
        except Exception as exc:  # report and go on with the others
            failed.append(name)
            print(f"{name}: export failed ({exporter}): {type(exc).__name__}: "
                  f"{str(exc)[:400]}", file=sys.stderr, flush=True)
            continue
        seconds = time.perf_counter() - start
        ms = ort_ms(path, {"input": x.numpy()})
        done[name] = {"source": f"timm:{timm_name}", "exporter": exporter, "opset": opset,
                      "input": [1, 3, side, side], "ort_1t_ms": round(ms, 3)}
        print(f"{name}: {side}x{side} -> {path} ({exporter}, opset {opset}, "
              f"{os.path.getsize(path) / 2**20:.1f} MB, {seconds:.1f} s; "
              f"onnxruntime 1T {ms:.2f} ms)", flush=True)
    record(args.out, done)
    if failed:
        print(f"failed: {','.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())

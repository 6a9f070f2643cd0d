"""Does every model onnxruntime's quantizer can write compile with Kiln and agree with it?

    python benchmarks/quantizer_forms.py --onnx DIR [--models a,b] [--forms qdq_u8_pc,...]

Each fp32 model in DIR (e.g. the torchvision exports of export_torchvision.py) is
pre-processed as onnxruntime advises (quant_pre_process) and quantized in every requested form, compiled by Kiln with default schedules (db=None, an empty kernel
cache per run unless KILN_CACHE_DIR is set), and run on one random input next to
onnxruntime's int8 run and the fp32 model. Forms: qdq/qop (QuantFormat.QDQ / QOperator),
u8/s8 activations, u8u8 = uint8 weights too, pc/pt = per channel / per tensor, dyn =
quantize_dynamic. Errors are max abs differences relative to the fp32 output's largest
magnitude. onnxruntime's AVX2 u8 x s8 kernels saturate pairs of products, so "Kiln vs ort
int8" can exceed one step where Kiln's exact kernels are closer to fp32 than onnxruntime is.
Prints a table (failures are rows, not exceptions) and one JSON line last.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import emit_json, print_table  # noqa: E402

FORMS = ("qdq_u8_pc", "qdq_s8_pc", "qdq_u8u8_pt", "qop_u8_pc", "qop_s8_pt", "dyn")


def quantize(src: Path, dst: Path, form: str, shape, input_name: str) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    if form == "dyn":
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.feeds = iter([{input_name: rng.standard_normal(shape).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(src), str(dst), Reader(),
                    quant_format=QuantFormat.QDQ if form.startswith("qdq") else
                    QuantFormat.QOperator,
                    per_channel=form.endswith("_pc"),
                    activation_type=QuantType.QInt8 if "_s8" in form else QuantType.QUInt8,
                    weight_type=QuantType.QUInt8 if "u8u8" in form else QuantType.QInt8)


def check(path: Path, form: str, folder: Path) -> dict:
    import onnx
    import onnxruntime as ort

    import kiln
    model = onnx.load(str(path))
    inp = model.graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    q = folder / f"{path.stem}_{form}.onnx"
    prepared = folder / f"{path.stem}_prepared.onnx"
    if not prepared.exists():       # onnxruntime's advised pre-processing (shapes, folding)
        from onnxruntime.quantization.shape_inference import quant_pre_process
        try:
            quant_pre_process(str(path), str(prepared), skip_symbolic_shape=True)
        except Exception:   # noqa: BLE001 - the model as it is, then
            prepared.write_bytes(path.read_bytes())
    try:
        quantize(prepared, q, form, shape, inp.name)
    except Exception as exc:   # the quantizer's own failure: reported, not Kiln's
        return {"status": f"quantizer failed: {type(exc).__name__}"}
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    session = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    fp32 = session(path).run(None, {inp.name: x})[0]
    theirs = session(q).run(None, {inp.name: x})[0]
    start = time.perf_counter()
    try:
        ours = kiln.compile(str(q), db=None).run([x])[0]
    except Exception as exc:
        return {"status": f"Kiln failed: {type(exc).__name__}: {str(exc)[:120]}"}
    scale = float(np.abs(fp32).max()) or 1.0
    return {"status": "ok", "compile_s": time.perf_counter() - start,
            "kiln_vs_ort_int8": float(np.abs(ours - theirs).max()) / scale,
            "ort_int8_vs_fp32": float(np.abs(theirs - fp32).max()) / scale,
            "kiln_vs_fp32": float(np.abs(ours - fp32).max()) / scale,
            "top1_kiln_ort_int8": bool(ours.argmax() == theirs.argmax())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", required=True, help="a folder of fp32 .onnx models")
    parser.add_argument("--models", help="comma-separated file stems (default: all)")
    parser.add_argument("--forms", default=",".join(FORMS))
    args = parser.parse_args(argv)
    paths = sorted(Path(args.onnx).glob("*.onnx"))
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise SystemExit(f"no .onnx models to run in {args.onnx}")
    rows, figures = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            for form in args.forms.split(","):
                res = check(path, form, Path(folder))
                figures[f"{path.stem}/{form}"] = res
                if res["status"] != "ok":
                    rows.append([path.stem, form, res["status"], "", "", "", "", ""])
                    continue
                rows.append([path.stem, form, "ok", res["compile_s"], res["kiln_vs_ort_int8"],
                             res["ort_int8_vs_fp32"], res["kiln_vs_fp32"],
                             "yes" if res["top1_kiln_ort_int8"] else "no"])
                print(f"{path.stem} {form}: done", file=sys.stderr, flush=True)
    print_table(["model", "form", "status", "compile s", "Kiln vs ort int8",
                 "ort int8 vs fp32", "Kiln vs fp32", "same top-1"], rows)
    failed = sum(r["status"].startswith("Kiln failed") for r in figures.values())
    emit_json({"bench": "quantizer_forms", "runs": len(figures), "kiln_failed": failed,
               "results": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

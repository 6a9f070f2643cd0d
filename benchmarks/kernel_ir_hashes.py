"""Hash of every kernel's LLVM IR text for the bundled models: a refactor that must not change
code generation is checked by running this before and after it.

    python benchmarks/kernel_ir_hashes.py --out before.json          # on the old commit
    python benchmarks/kernel_ir_hashes.py --compare before.json      # on the new one

Models: kiln/models/default_cnn.onnx and graph/models.py's builders at the shapes the
committed tuning database knows (so its tuned schedules are lowered too), two of them also
quantized (int8 kernels); targets znver3
(AVX2), znver4 (AVX-512) and this machine's CPU; the schedules a compile would pick (the
database, a similar CPU's records, else the defaults) at 1 and 2 threads. Prints one line per
model and target and, last, one JSON object: {kernel: sha256 of its LLVM IR}.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from kiln.autotune.default_db import open_database  # noqa: E402
from kiln.autotune.dispatch import select_record  # noqa: E402
from kiln.codegen.build import DEFAULT_FASTMATH  # noqa: E402
from kiln.codegen.emit_module import emit_module, fastmath_flags  # noqa: E402
from kiln.codegen.target import Target  # noqa: E402
from kiln.graph import models  # noqa: E402

try:  # the layout of issue 30 and the one before it
    from kiln.graph.compile import model as compile_mod
except ImportError:
    import importlib
    compile_mod = importlib.import_module("kiln.graph.compile")

TARGETS = ("llvm -mcpu=znver3", "llvm -mcpu=znver4", "native")


def _quantized(name: str, model, mode: str) -> str:
    """`model` quantized by `kiln quantize` (onnxruntime), kept in the temp folder so the
    runs before and after a change compile the same file."""
    import tempfile

    import onnx

    from kiln.quantize import quantize_model
    folder = Path(tempfile.gettempdir()) / "kiln_ir_hashes"
    folder.mkdir(exist_ok=True)
    out = folder / f"{name}_{mode}_int8.onnx"
    if not out.exists():
        src = folder / f"{name}.onnx"
        onnx.save(model, src)
        quantize_model(src, out, mode=mode)
    return str(out)


def model_list():
    return [("default_cnn.onnx", str(ROOT / "kiln" / "models" / "default_cnn.onnx")),
            ("resnet18_like", models.resnet18_like()),
            ("mobilenetv2_like", models.mobilenetv2_like()),
            ("bert_like_encoder", models.bert_like_encoder()),
            ("mlp", models.mlp()),
            ("resnet18_like int8", _quantized("resnet18_like", models.resnet18_like(), "static")),
            ("bert_like_encoder int8",
             _quantized("bert_like_encoder", models.bert_like_encoder(), "dynamic"))]


def _target_value(target: str):
    """What the compile functions take for a target (a string before issue 30's step 4)."""
    return getattr(compile_mod, "TARGET_TYPE", str)(target)


def kernel_hashes(threads_list=(1, 2)) -> dict[str, str]:
    db = open_database(None)
    out = {}
    for name, model in model_list():
        for target in TARGETS:
            start = time.perf_counter()
            tgt = Target.from_string(target)
            tasks = compile_mod.model_tasks(model, _target_value(target))
            for threads in threads_list:
                for mt in tasks:
                    sel = select_record(mt.task, _target_value(target), db, threads)
                    text = compile_mod._build_task(
                        mt, _target_value(target), sel, threads=threads,
                        build=lambda func: str(emit_module(
                            func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel="kiln")))[0]
                    key = f"{name}|{target}|{threads}|{mt.name}"
                    out[key] = hashlib.sha256(text.encode()).hexdigest()
            print(f"{name:20s} {target:20s} {len(tasks):3d} tasks "
                  f"{time.perf_counter() - start:6.1f} s", file=sys.stderr)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the hashes to this JSON file")
    parser.add_argument("--compare", help="compare with the hashes in this JSON file")
    args = parser.parse_args(argv)
    hashes = kernel_hashes()
    if args.out:
        Path(args.out).write_text(json.dumps(hashes, indent=1, sort_keys=True))
    status = 0
    summary = {"kernels": len(hashes)}
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = sorted(k for k in before.keys() & hashes.keys() if before[k] != hashes[k])
        missing = sorted(before.keys() ^ hashes.keys())
        for k in differ:
            print("DIFFERENT", k)
        for k in missing:
            print("ONLY IN ONE", k)
        print(f"{len(hashes)} kernels, {len(differ)} with different LLVM IR, "
              f"{len(missing)} in only one run")
        summary.update(different=len(differ), only_in_one=len(missing))
        status = 1 if differ or missing else 0
    print(json.dumps(summary))
    return status


if __name__ == "__main__":
    sys.exit(main())

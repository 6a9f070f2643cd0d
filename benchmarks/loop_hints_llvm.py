"""LLVM compile time of a model's kernels with and without loop hints (codegen/loop_hints.py),
in one process.

    python benchmarks/loop_hints_llvm.py [--model resnet50_like] [--image 224] [--reps 3]
                                         [--modes off,cold,all]

Each distinct kernel of the model (default schedules, no database) is lowered once and
emitted once per KILN_LOOP_HINTS mode; then, `--reps` times in turns, every mode's module
goes through LLVM's passes (parse, verify, O3) and object-code emission. A kernel's figure
per mode is its best rep (CPU seconds of this process: the machine is shared). Prints
per-kernel rows, totals and percentiles per mode, and, as the last line, one JSON object.
Kernel speed is not measured here: benchmarks/kernel_ab.py does that.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln.autotune.dispatch import Selection, apply_selection, canonical_target  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.codegen import Target, jit  # noqa: E402
from kiln.codegen.build import DEFAULT_FASTMATH, param_specs  # noqa: E402
from kiln.codegen.emit_module import emit_module, fastmath_flags, symbol_name  # noqa: E402
from kiln.codegen.pyentry import add_python_entry  # noqa: E402
from kiln.codegen.runtime_config import num_threads_from_env  # noqa: E402
from kiln.graph import models  # noqa: E402
from kiln.graph.compile.model import prepare_graph  # noqa: E402
from kiln.graph.compile.tasks import extract_tasks  # noqa: E402
from kiln.schedule import lower  # noqa: E402


def _emit(func, tgt, mode: str) -> str:
    os.environ["KILN_LOOP_HINTS"] = mode
    module = emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
    add_python_entry(module, symbol_name(func.name), param_specs(func))
    return str(module)


def _llvm(text: str, tgt) -> tuple[float, float, int]:
    c0 = time.process_time()
    mod = jit.optimize(text, tgt)
    c1 = time.process_time()
    code = tgt.create_target_machine(for_object=True).emit_object(mod)
    return c1 - c0, time.process_time() - c1, len(code)


def _pct(v):
    v = sorted(v)
    return {"median": statistics.median(v), "p90": v[min(len(v) - 1, int(0.9 * len(v)))],
            "max": v[-1], "sum": sum(v)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50_like")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--modes", default="off,all")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    saved = os.environ.get("KILN_LOOP_HINTS")
    target = canonical_target("native")
    tgt = Target.from_string(target)
    graph, groups = prepare_graph(getattr(models, args.model)(image_size=args.image))
    tasks, _ = extract_tasks(graph, groups, target)
    threads = num_threads_from_env()
    texts = {}
    for mt in tasks:
        space = SearchSpace(mt.task.retargeted(target), threads)
        sch, sargs, _ = apply_selection(space, Selection(None))
        func = lower(sch, sargs, name=mt.name)
        texts[mt.name] = {m: _emit(func, tgt, m) for m in modes}
    if saved is None:
        os.environ.pop("KILN_LOOP_HINTS", None)
    else:
        os.environ["KILN_LOOP_HINTS"] = saved
    rows, results = [], []
    for name, by_mode in texts.items():
        best = {}
        for _ in range(args.reps):
            for m in modes:
                p, c, size = _llvm(by_mode[m], tgt)
                if m not in best or p + c < sum(best[m][:2]):
                    best[m] = (p, c, size)
        results.append({"kernel": name, **{m: {"passes": best[m][0], "mc": best[m][1],
                                                "object_bytes": best[m][2],
                                                "ir_lines": by_mode[m].count("\n")}
                                            for m in modes}})
        rows.append([name[:44], *(f"{sum(best[m][:2]) * 1e3:.0f}" for m in modes),
                     *(by_mode[m].count("\n") for m in modes)])
    print_table(["kernel", *(f"{m} ms" for m in modes), *(f"{m} IR lines" for m in modes)],
                rows)
    summary = {}
    for m in modes:
        per = [r[m]["passes"] + r[m]["mc"] for r in results]
        summary[m] = {"passes_s": sum(r[m]["passes"] for r in results),
                      "mc_s": sum(r[m]["mc"] for r in results),
                      "object_bytes": sum(r[m]["object_bytes"] for r in results),
                      "per_kernel_s": _pct(per)}
        s = summary[m]
        print(f"{m}: passes {s['passes_s']:.2f} s, machine code {s['mc_s']:.2f} s, objects "
              f"{s['object_bytes'] / 1e3:.0f} kB; per kernel median "
              f"{s['per_kernel_s']['median']:.3f}, p90 {s['per_kernel_s']['p90']:.3f}, max "
              f"{s['per_kernel_s']['max']:.3f} s")
    emit_json({"bench": "loop_hints_llvm", "model": args.model, "image": args.image,
               "reps": args.reps, "load_average": os.getloadavg()[0], "summary": summary,
               "kernels": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

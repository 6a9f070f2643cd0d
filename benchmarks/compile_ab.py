"""Compile time of a model's kernels, this checkout against another one (A/B), in turns.

    python benchmarks/compile_ab.py --base /path/to/other/checkout [--model resnet50_like]
                                    [--image 224] [--reps 3]

The machine is shared, so figures from two separate runs differ by more than most changes:
this takes both sides in turns. Emission: `--reps` times, each side's Python (its own venv,
`<checkout>/.venv/bin/python`) lowers and emits every distinct kernel of the model (default
schedules, no database) in a fresh process, the sides alternating; a kernel's figure is its
best rep (CPU seconds of that process, schedule + lower + emit, garbage collector paused as
build() pauses it). LLVM: this process then runs each side's IR text through LLVM's passes
(parse, verify, O3) and object-code emission, `--reps` times in turns, best rep per kernel.
Prints per-kernel rows (the slowest first), totals and percentiles per side, and, as the
last line, one JSON object. Kernel speed is not measured here: benchmarks/kernel_ab.py does.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))


def _dump(model_name: str, image: int, out: str) -> None:
    """(In the side's own Python) lower and emit every kernel; write {name: [text, phases]}."""
    from kiln.autotune.dispatch import Selection, apply_selection, canonical_target
    from kiln.autotune.space.rules import SearchSpace
    from kiln.codegen import Target
    from kiln.codegen.build import DEFAULT_FASTMATH, gc_paused, param_specs
    from kiln.codegen.emit_module import emit_module, fastmath_flags, symbol_name
    from kiln.codegen.pyentry import add_python_entry
    from kiln.graph import models
    from kiln.graph.compile.model import prepare_graph
    from kiln.graph.compile.tasks import extract_tasks
    from kiln.schedule import lower

    clock = time.process_time
    target = canonical_target("native")
    tgt = Target.from_string(target)
    t0 = clock()
    graph, groups = prepare_graph(getattr(models, model_name)(image_size=image))
    t1 = clock()
    tasks, _ = extract_tasks(graph, groups, target)
    t2 = clock()
    kernels = {}
    for mt in tasks:
        with gc_paused():
            c0 = clock()
            space = SearchSpace(mt.task.retargeted(target), 1)
            sch, args, _ = apply_selection(space, Selection(None))
            func = lower(sch, args, name=mt.name)
            c1 = clock()
            module = emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
            add_python_entry(module, symbol_name(func.name), param_specs(func))
            text = str(module)
            c2 = clock()
        kernels[mt.name] = [text, {"lower": c1 - c0, "emit": c2 - c1}]
    with open(out, "w") as fh:
        json.dump({"parent": {"frontend+passes": t1 - t0, "extract_tasks": t2 - t1},
                   "kernels": kernels}, fh)


def _llvm(text: str, tgt) -> tuple[float, float]:
    from kiln.codegen import jit
    clock = time.process_time
    c0 = clock()
    mod = jit.optimize(text, tgt)
    c1 = clock()
    tgt.create_target_machine(for_object=True).emit_object(mod)
    return c1 - c0, clock() - c1


def _pct(values) -> dict:
    v = sorted(values)
    return {"median": statistics.median(v), "p90": v[min(len(v) - 1, int(0.9 * len(v)))],
            "max": v[-1], "sum": sum(v)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="a checkout with its own .venv")
    parser.add_argument("--model", default="resnet50_like")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dump:
        _dump(args.model, args.image, args.dump)
        return 0
    from common import emit_json, print_table
    from kiln.autotune.dispatch import canonical_target
    from kiln.codegen import Target

    sides = {"base": Path(args.base).resolve() / ".venv" / "bin" / "python",
             "this": Path(sys.executable)}
    best: dict = {s: {} for s in sides}      # side -> kernel -> phase -> best seconds
    texts: dict = {s: {} for s in sides}
    parent: dict = {s: {} for s in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
            for side in order:
                out = os.path.join(tmp, f"{side}.json")
                subprocess.run([str(sides[side]), str(HERE), "--base", args.base, "--model",
                                args.model, "--image", str(args.image), "--dump", out],
                               check=True)
                with open(out) as fh:
                    res = json.load(fh)
                for k, v in res["parent"].items():
                    parent[side][k] = min(parent[side].get(k, 1e9), v)
                for name, (text, phases) in res["kernels"].items():
                    texts[side][name] = text
                    got = best[side].setdefault(name, {})
                    for p, v in phases.items():
                        got[p] = min(got.get(p, 1e9), v)
    tgt = Target.from_string(canonical_target("native"))
    names = list(texts["this"])
    for rep in range(args.reps):
        order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
        for name in names:
            for side in order:
                llvm_s, mc_s = _llvm(texts[side][name], tgt)
                got = best[side][name]
                got["llvm"] = min(got.get("llvm", 1e9), llvm_s)
                got["mc"] = min(got.get("mc", 1e9), mc_s)
    phases = ("lower", "emit", "llvm", "mc")
    for side in sides:
        for name in names:
            b = best[side][name]
            b["total"] = sum(b[p] for p in phases)
            b["ir_lines"] = texts[side][name].count("\n")
    rows = []
    for name in sorted(names, key=lambda n: -best["base"][n]["total"]):
        a, b = best["base"][name], best["this"][name]
        rows.append([name[:44], a["ir_lines"], b["ir_lines"], a["emit"] * 1e3, b["emit"] * 1e3,
                     (a["llvm"] + a["mc"]) * 1e3, (b["llvm"] + b["mc"]) * 1e3,
                     a["total"] * 1e3, b["total"] * 1e3])
    print_table(["kernel", "IR base", "IR this", "emit ms base", "this", "LLVM+mc ms base",
                 "this", "total ms base", "this"], rows)
    summary = {}
    for side in sides:
        totals = {p: sum(best[side][n][p] for n in names) for p in phases}
        pct = _pct([best[side][n]["total"] for n in names])
        summary[side] = {"phase_cpu_s": totals, "per_kernel": pct, "parent_cpu_s": parent[side],
                         "ir_lines": sum(best[side][n]["ir_lines"] for n in names)}
        print(f"{side}: CPU s " + ", ".join(f"{p} {v:.2f}" for p, v in totals.items())
              + f"; kernels {pct['sum']:.2f}, per kernel median {pct['median']:.3f} p90 "
              f"{pct['p90']:.3f} max {pct['max']:.3f}; parent "
              + ", ".join(f"{k} {v:.2f}" for k, v in parent[side].items())
              + f"; IR lines {summary[side]['ir_lines']}")
    load = os.getloadavg()[0]
    print(f"(best of {args.reps} per kernel and phase, CPU seconds; load average {load:.1f})")
    emit_json({"bench": "compile_ab", "model": args.model, "image": args.image,
               "reps": args.reps, "load_average": load, "summary": summary,
               "kernels": {s: best[s] for s in sides}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Kernel speed and outputs of this checkout against another one (A/B), in turns in one run.

    python benchmarks/kernel_ab.py --base /path/to/other/checkout [--rounds 7] [--repeat 5]
                                   [--model resnet50_like] [--image 224] [--threads 1]
                                   [--onnx PATH]

Two server processes, one importing Kiln from `--base` (a checkout of another commit, e.g.
`git worktree add --detach /tmp/base main`), one from this checkout, each compile the same
kernels with their default schedules: the distinct kernels of the model, plus a 1024^3
matmul (default schedule, and the tuned one from tuning_logs/kiln.db). Then, round after
round, each kernel runs `--repeat` times in one server and then in the other (the order
alternating by round); a kernel's figure is the median over rounds of each round's best.
Outputs are compared bit for bit (same inputs in both). Reports per-kernel speed ratios
(base time / this time: > 1 means this checkout is faster), their geomean and the ratio
of the summed times, and the compile CPU seconds of both. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# -- the server (runs in a child process) -----------------------------------------------------

def _serve(args) -> None:
    if args.base:
        # import Kiln from the base checkout: a package folder of links, ahead of the editable
        # install's finder
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        sys.path.insert(0, args.base_pkg)
    import numpy as np

    from kiln.autotune.database import Database
    from kiln.autotune.dispatch import Selection, apply_selection, canonical_target
    from kiln.autotune.space.rules import SearchSpace
    from kiln.autotune.task import Task
    from kiln.codegen import build
    from kiln.graph import models
    from kiln.graph.compile.model import prepare_graph
    from kiln.graph.compile.tasks import extract_tasks
    from kiln.schedule import lower

    target = canonical_target("native")
    if args.onnx:
        import onnx
        model = onnx.load(args.onnx)
    else:
        model = getattr(models, args.model)(image_size=args.image)
    graph, groups = prepare_graph(model)
    tasks = [mt.task for mt in extract_tasks(graph, groups, target)[0]]
    mm = Task.from_op("matmul", (1024, 1024, 1024), target=target)
    entries = [(t.name, t, None) for t in tasks] + [("matmul 1024^3", mm, None)]
    db_path = Path(args.repo) / "tuning_logs" / "kiln.db"
    if db_path.exists():
        import shutil
        import tempfile
        copy = Path(tempfile.mkdtemp(prefix="kiln-ab-db-")) / "kiln.db"
        shutil.copy(db_path, copy)      # the committed log stays untouched
        db = Database(str(copy))
        best = db.best(mm.workload_key, target, threads=1)
        if best:
            entries.append(("matmul 1024^3 tuned", mm, best[0]))
    if args.kernels:
        entries = [e for e in entries if e[0] in args.kernels.split(",")]
    kernels, cpu = {}, {}
    for name, task, record in entries:
        start = time.process_time()
        space = SearchSpace(task.retargeted(target), args.threads)
        if record is None:
            sch, targs, _ = apply_selection(space, Selection(None))
        else:
            sch, targs = space.apply(record.config)
        kernel = build(lower(sch, targs, name=task.name), target=target, cache_kernel=False)
        cpu[name] = time.process_time() - start
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args]
        kernels[name] = (kernel, arrays, [task.args.index(t) for t in task.outputs])
    print(json.dumps({"ready": sorted(kernels), "cpu": cpu}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "quit":
            return
        kernel, arrays, outs = kernels[req["kernel"]]
        if req["op"] == "digest":
            copy = [a.copy() for a in arrays]
            kernel(*copy)
            h = hashlib.sha256(b"".join(copy[k].tobytes() for k in outs)).hexdigest()
            print(json.dumps({"digest": h}), flush=True)
            continue
        times = []
        for _ in range(req["repeat"]):
            t0 = time.perf_counter()
            kernel(*arrays)
            times.append(time.perf_counter() - t0)
        print(json.dumps({"best": min(times)}), flush=True)


# -- the driver -------------------------------------------------------------------------------

def _link_package(base: Path, into: Path) -> None:
    """A `kiln` package folder of links into the base checkout (its sub-packages live in
    top-level folders, as pyproject.toml's package-dir maps them)."""
    pkg = into / "kiln"
    pkg.mkdir(parents=True, exist_ok=True)
    for f in (base / "kiln").iterdir():
        dst = pkg / f.name
        if not dst.exists():
            dst.symlink_to(f)
    for sub in ("te", "schedule", "codegen", "autotune", "graph", "tuning_logs"):
        dst = pkg / sub
        if not dst.exists():
            dst.symlink_to(base / sub)


class _Server:
    def __init__(self, args, base: bool, pkg: str):
        cmd = [sys.executable, str(HERE), "--serve", "--model", args.model,
               "--image", str(args.image), "--threads", str(args.threads),
               "--repo", str(args.base if base else HERE.parent.parent)]
        if args.kernels:
            cmd += ["--kernels", args.kernels]
        if args.onnx:
            cmd += ["--onnx", args.onnx]
        if base:
            cmd += ["--serve-base", "--base-pkg", pkg]
        env = {**os.environ, "KILN_NUM_THREADS": str(args.threads), "KILN_CACHE_DIR": "off"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.hello = json.loads(self.proc.stdout.readline())

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.proc.stdin.flush()
        self.proc.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the other checkout (its top-level folder)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--model", default="resnet50_like")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kernels", help="comma-separated names (default: all)")
    parser.add_argument("--onnx", help="an ONNX file's kernels instead of --model's")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-base", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-pkg", help=argparse.SUPPRESS)
    parser.add_argument("--repo", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        args.base = args.serve_base
        _serve(args)
        return 0
    if not args.base:
        parser.error("--base is required")
    import tempfile
    pkg = tempfile.mkdtemp(prefix="kiln-ab-")
    _link_package(Path(args.base).resolve(), Path(pkg))
    base, new = _Server(args, True, pkg), _Server(args, False, pkg)
    names = [n for n in new.hello["ready"] if n in base.hello["ready"]
             and (not args.kernels or n in args.kernels.split(","))]
    same = {n: base.ask(op="digest", kernel=n)["digest"] == new.ask(op="digest", kernel=n)[
        "digest"] for n in names}
    times = {n: ([], []) for n in names}
    for r in range(args.rounds):
        for n in names:
            order = ((0, base), (1, new)) if r % 2 == 0 else ((1, new), (0, base))
            for k, server in order:
                times[n][k].append(server.ask(op="run", kernel=n, repeat=args.repeat)["best"])
    base.close()
    new.close()
    rows, ratios = [], []
    for n in names:
        b, t = statistics.median(times[n][0]), statistics.median(times[n][1])
        ratios.append(b / t)
        rows.append({"kernel": n, "base_ms": b * 1e3, "this_ms": t * 1e3, "speed": b / t,
                     "bit_identical": same[n], "base_compile_cpu_s": base.hello["cpu"][n],
                     "this_compile_cpu_s": new.hello["cpu"][n]})
    print(f"{'kernel':48} {'base ms':>9} {'this ms':>9} {'speed':>6} {'same':>5} "
          f"{'cpu base':>8} {'cpu this':>8}")
    for row in rows:
        print(f"{row['kernel'][:48]:48} {row['base_ms']:9.3f} {row['this_ms']:9.3f} "
              f"{row['speed']:6.3f} {str(row['bit_identical']):>5} "
              f"{row['base_compile_cpu_s']:8.3f} {row['this_compile_cpu_s']:8.3f}")
    geo = math.exp(statistics.mean(math.log(r) for r in ratios))
    model = [r for r in rows if not r["kernel"].startswith("matmul 1024")]
    total = (sum(r["base_ms"] for r in model) / sum(r["this_ms"] for r in model)) if model else 1
    print(f"\nspeed (base / this): geomean {geo:.3f}, model kernels summed {total:.3f}; "
          f"bit-identical outputs: {sum(same.values())}/{len(same)}; compile CPU s: base "
          f"{sum(base.hello['cpu'].values()):.2f}, this {sum(new.hello['cpu'].values()):.2f}")
    print(json.dumps({"bench": "kernel_ab", "geomean_speed": geo, "summed_speed": total,
                      "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

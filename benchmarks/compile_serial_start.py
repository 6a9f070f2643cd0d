"""The cold compile's serial start: parent CPU and wall seconds from `kiln.compile`'s start
to the first task handed to the compile workers, and to the compiled model.

    python benchmarks/compile_serial_start.py [--model resnet50_like] [--image 224] [--jobs 2]

Saves the model as ONNX (as a user passes it), then compiles it in a fresh interpreter with
an empty KILN_CACHE_DIR, timed after `import kiln`. Works against older checkouts too (run it
with their venv: it times `build_in_workers` there, `StreamingBuild` here). Figures: to the
first submit (parent CPU, wall), parent CPU, workers' CPU (RUSAGE_CHILDREN: the workers and
the linker), total. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, time
import kiln
from kiln.graph.compile import parallel_build as pb
mark = {}
def note():
    mark.setdefault("first", (time.perf_counter() - t0, time.process_time() - c0))
if hasattr(pb, "StreamingBuild"):
    add = pb.StreamingBuild.add
    def counted(self, mt):
        add(self, mt)
        if self.started:
            note()
    pb.StreamingBuild.add = counted
else:
    whole = pb.build_in_workers
    def counted(*a, **k):
        note()
        return whole(*a, **k)
    pb.build_in_workers = counted
t0, c0 = time.perf_counter(), time.process_time()
m = kiln.compile(sys.argv[1], db=None, jobs=int(sys.argv[2]))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"first_submit_wall_s": mark.get("first", (None,))[0],
                  "first_submit_cpu_s": mark.get("first", (None, None))[1],
                  "wall_s": wall, "parent_cpu_s": cpu,
                  "children_cpu_s": ch.ru_utime + ch.ru_stime,
                  "worker_cpu_s": m.plan.meta["compile"].get("worker_cpu_s"),
                  "load_average": os.getloadavg()[0]}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50_like")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    import onnx
    from kiln.graph import models
    with tempfile.TemporaryDirectory(prefix="kiln-serial-start-") as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        onnx.save(getattr(models, args.model)(image_size=args.image), path)
        proc = subprocess.run([sys.executable, "-c", CHILD, path, str(args.jobs)],
                              capture_output=True, text=True,
                              env={**os.environ, "KILN_CACHE_DIR": os.path.join(tmp, "cache")})
    if proc.returncode != 0:
        raise SystemExit(f"the compile failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["total_cpu_s"] = result["parent_cpu_s"] + result["children_cpu_s"]
    for key, value in result.items():
        print(f"{key:>22}: {value if not isinstance(value, float) else round(value, 3)}")
    print(json.dumps({"bench": "compile_serial_start", "model": args.model, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""LLVM time and object identity of each kernel of a model under several LLVM pipelines.

    python benchmarks/llvm_pipelines.py o3,o3-noloop,o3-nounroll [model.onnx]

Each distinct kernel's default-schedule IR (as a compile worker emits it) goes through
codegen.jit.optimize with each pipeline (codegen/jit.py PIPELINES) and object emission, best
of 2; prints per kernel "passes ms + machine code ms" and a digest of the object (equal
digests: the pipeline changed nothing in the code), then the totals in CPU seconds. Which
pipelines keep kernel speed is for benchmarks/kernel_ab.py to say.
"""
import hashlib
import os
import sys
import tempfile
import time

import onnx
import kiln
from kiln.autotune.dispatch import Selection, apply_selection
from kiln.autotune.space.rules import SearchSpace
from kiln.codegen import Target, jit
from kiln.codegen.build import DEFAULT_FASTMATH, gc_paused, param_specs
from kiln.codegen.emit_module import emit_module, fastmath_flags, symbol_name
from kiln.codegen.pyentry import add_python_entry
from kiln.graph.compile.model import prepare_graph
from kiln.graph.compile.tasks import extract_tasks
from kiln.schedule import lower
from kiln.graph import models
pipes = sys.argv[1].split(',')
tgt = Target.from_string('native')
if len(sys.argv) > 2:
    path = sys.argv[2]
else:
    path = os.path.join(tempfile.mkdtemp(prefix="kiln-pipes-"), "resnet50_like.onnx")
    onnx.save(models.resnet50_like(image_size=224), path)
g, groups = prepare_graph(path, target='native')
tasks, _ = extract_tasks(g, groups, 'native')
tot = {p: [0.0, 0.0] for p in pipes}
for mt in tasks:
    space = SearchSpace(mt.task.retargeted('native'), 1)
    sch, args, _ = apply_selection(space, Selection(None))
    func = lower(sch, args, name=mt.name)
    with gc_paused():
        module = emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
        add_python_entry(module, symbol_name(func.name), param_specs(func))
        text = str(module)
    row = [mt.name[:44]]
    for p in pipes:
        best = None
        for _ in range(2):
            c = time.process_time()
            mod = jit.optimize(text, tgt, p)
            c1 = time.process_time()
            code = tgt.create_target_machine(for_object=True).emit_object(mod)
            c2 = time.process_time()
            if best is None or c2 - c < best[0] + best[1]:
                best = (c1 - c, c2 - c1)
        tot[p][0] += best[0]; tot[p][1] += best[1]
        row += [f"{best[0]*1e3:.0f}+{best[1]*1e3:.0f}", hashlib.sha1(code).hexdigest()[:6]]
    print(*row, flush=True)
print({p: [round(a, 2), round(b, 2)] for p, (a, b) in tot.items()})

"""Model -> CompiledModel: frontend, graph passes, fusion, one kernel per distinct group (best
schedule from the tuning database, else the search space's default), memory plan, executor.
`tune_model` tunes the model's tasks with the task scheduler so a later compile finds them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import Callable, Mapping, Sequence

import numpy as np
from ... import codegen
from ...autotune.database import Database
from ...autotune.default_db import open_database
from ...autotune.dispatch import SIMILAR_CPU_SOURCE, Selection, apply_selection, select_record
from ...autotune.scheduler import TaskReport, tune_tasks
from ...autotune.space.rules import SearchSpace
from ...autotune.tuner import Progress
from ...autotune.zero_shot import ZERO_SHOT_SOURCE
from ...autotune.zero_shot import compile_settings as zero_shot_settings
from ...autotune.zero_shot import donor_table as zero_shot_donor_table
from ...autotune.zero_shot import model_for as zero_shot_model
from ...autotune.zero_shot import rank_plan as zero_shot_plan
from ...codegen.runtime_config import resolve_threads
from ...codegen.target import Target
from ...schedule import create_schedule, lower
from ...te.errors import KilnError
from . import fast_batch, model_cache, parallel_build, tiers
from ..runtime.executor import (BufferSpec, CompiledModel, Step, build_plan, pack_aligned,
                                pinned_json)
from ..runtime import thread_choice
from ..onnx.load import load_onnx
from ..passes.index_checks import add_index_checks, settle_index_checks, split_outputs
from ..ir import Graph
from ..generic.compile import first_tier
from .memory_plan import check_plan, plan_buffers
from .check_cost import measure_check_cost
from .task_latency import task_latencies
from ..passes import fuse_operators, optimize
from ..passes.fusion import FusedGroup
from .tasks import ModelTask, extract_tasks, is_alias

log = logging.getLogger(__name__)

# what the functions below take for a target (the public ones also take a string, parsed
# once at their top); benchmarks/kernel_ir_hashes.py reads it
TARGET_TYPE = Target.from_string


def open_db(db) -> Database | None:
    """None, "default" (the user's log over the shipped one), a path or a Database."""
    return open_database(db)


LAYOUTS = ("nchwc", "nchw")


def prepare_graph(model, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  layout: str = "nchwc", winograd: bool = True,
                  constants: Mapping[str, np.ndarray] | None = None,
                  target: Target | None = None, proto=None,
                  checked: bool = False) -> tuple[Graph, list[FusedGroup]]:
    """Load (ONNX path/ModelProto, or an already loaded Graph), optimise and fuse.

    constants: values of graph inputs that decide shapes (frontend.load_onnx's `values`).

    layout: "nchwc" keeps conv activations channel-blocked (passes.blocked_layout); "nchw"
    keeps the model's layout (each conv unpacks its channel-blocked result).
    winograd: blocked 3x3 stride-1 convs run as Winograd transforms and batched GEMMs where
    passes.winograd's rule says it is faster (layout "nchwc" only); False keeps them direct.
    target: the Target the graph is compiled for (passes.TARGET_PASSES: int8 weights
    as int16 pairs on AVX2 without VNNI); None keeps the graph target-neutral.
    proto: the ModelProto already read from the path `model` (not read again).
    checked: the model passed onnx.checker already (load_onnx).
    Every node taking run-time indices gets an index check (graph/index_checks.py): an extra
    graph output that compile_model turns into a check after each run."""
    if layout not in LAYOUTS:
        raise KilnError(f"layout={layout!r} is not a layout Kiln compiles to; use one of "
                        f"{', '.join(LAYOUTS)}")
    graph = model if isinstance(model, Graph) else load_onnx(model, input_shapes,
                                                             values=constants, proto=proto,
                                                             checked=checked)
    skip = (("blocked layout",) if layout == "nchw" else ()) + (() if winograd else
                                                                 ("winograd",))
    graph, checks = add_index_checks(graph)
    graph = settle_index_checks(optimize(graph, skip=skip, target=target), checks)
    return graph, fuse_operators(graph)


def _build_task(mt: ModelTask, target: Target, selection: Selection,
                build: Callable | None = None, threads: int | None = None):
    """The kernel of `mt` (or what `build` makes of its PrimFunc) from the schedule of
    `selection` (autotune/dispatch.py), and where it came from ("database", "similar CPU":
    records of another CPU with the same vector ISA, "zero-shot": the cost model's pick for a
    task without records, or "default"). A database or zero-shot schedule that fails to
    build falls back to the default one."""
    build = build or (lambda func: codegen.build(func, target=target))
    if all(0 in t.shape for t in mt.task.outputs):
        # zero-size outputs: nothing to compute or tune, the plain (empty) loop nest
        sch = create_schedule(list(mt.task.outputs))
        return build(lower(sch, list(mt.task.args), name=mt.name)), "default"
    space = SearchSpace(mt.task.retargeted(target), threads, target)
    sch, args, source = apply_selection(space, selection)
    kind = next((k for k in ("database", SIMILAR_CPU_SOURCE, ZERO_SHOT_SOURCE)
                 if source.startswith(k)), "default")
    try:
        kernel = build(lower(sch, args, name=mt.name))
    except KilnError as exc:
        if kind == "default":
            raise
        log.warning("%s: the %s schedule failed to build (%s); using the default",
                    mt.name, kind, exc)
        sch, args, _ = apply_selection(space, Selection(None))
        kernel, kind = build(lower(sch, args, name=mt.name)), "default"
    log.info("%s (%d groups): schedule from the %s", mt.name, len(mt.groups), kind)
    return kernel, kind


def _build_kernels(tasks: Sequence[ModelTask], target: Target, db: Database | None,
                   jobs: int, threads: int, zero_shot: bool = False
                   ) -> tuple[dict, dict, dict]:
    """Kernels and schedule sources by task name, and build statistics (CPU seconds per
    worker, wall and CPU seconds per kernel: schedule, lowering and codegen; stored records
    skipped because they no longer fit their task's space): in `jobs`
    worker processes when that can help (several tasks, a C linker to join the object
    files), else here. Schedules are the best known for running at `threads`."""
    selections = {mt.name: select_record(mt.task, target, db, threads) for mt in tasks}
    skipped = sum(len(s.skipped) for s in selections.values())
    # (a task whose confirmation chose its default keeps it: it was measured, not guessed)
    unmeasured = {name for name, s in selections.items() if s.record is None and s.choice is None}
    if zero_shot and db is not None and unmeasured:
        start = time.perf_counter()
        model = zero_shot_model(db, str(target))
        if model is not None:
            table = zero_shot_donor_table(db, str(target), threads)
            ranked = zero_shot_plan([(mt.name, mt.task, mt.task.flops * mt.weight)
                                     for mt in tasks if mt.name in unmeasured],
                                    model, table, threads)
            selections.update({name: dataclasses.replace(selections[name], zero_shot=str(model),
                                                         donors=donors)
                               for name, donors in ranked.items()})
            log.info("zero-shot: ranking %d of the %d tasks without records (the most FLOPs "
                     "first, within the budget)", len(ranked), len(unmeasured))
        log.info("zero-shot model %s ready in %.3f s", model, time.perf_counter() - start)
    if jobs > 1 and len(tasks) > 1 and parallel_build.can_fork_workers():
        kernels, sources, stats = parallel_build.build_in_workers(
            tasks, target, selections, jobs, _build_task, threads)
        return kernels, sources, {**stats, "skipped_records": skipped}
    kernels, sources, wall, cpu = {}, {}, {}, {}
    for mt in tasks:
        start, cpu_start = time.perf_counter(), time.process_time()
        kernels[mt.name], sources[mt.name] = _build_task(mt, target, selections[mt.name],
                                                         threads=threads)
        wall[mt.name] = round(time.perf_counter() - start, 4)
        cpu[mt.name] = round(time.process_time() - cpu_start, 4)
    return kernels, sources, {"workers": 1, "worker_cpu_s": [round(sum(cpu.values()), 3)],
                              "kernel_s": wall, "kernel_cpu_s": cpu, "skipped_records": skipped}


def _streaming(target: Target, db: Database | None, jobs: int, threads: int,
               zero_shot: bool, fast: bool = False) -> "parallel_build.StreamingBuild | None":
    """The worker pool of _extract_and_build, forked now (before the graph passes, so the
    thread-pool runtime is built in a worker meanwhile), or None where kernels are built
    in this process or only after every task is known (zero-shot picks rank them all)."""
    if jobs > 1 and (fast or not (zero_shot and db is not None)) and \
            parallel_build.can_fork_workers():
        select = (tiers.no_record if fast else
                  lambda mt: select_record(mt.task, target, db, threads))  # noqa: E731
        if fast:        # tier 1: several tasks to an LLVM module (fast_batch.py)
            return parallel_build.StreamingBuild(target, jobs, fast_batch.build_fast_batch,
                                                 select, threads, early=True,
                                                 batch=fast_batch.BATCH)
        return parallel_build.StreamingBuild(target, jobs, _build_task, select, threads,
                                             early=True)
    return None


def _extract_and_build(graph: Graph, groups: list[FusedGroup], target: Target,
                       db: Database | None, jobs: int, threads: int, zero_shot: bool,
                       fast: bool = False,
                       stream: "parallel_build.StreamingBuild | None" = None,
                       packed: dict | None = None):
    """extract_tasks, then _build_kernels: (tasks, per_group, kernels, sources, stats). With
    worker processes (`stream`, from _streaming; made here if not given), each task goes to
    them as soon as it is found, but for zero-shot picks, which rank every task first; the
    parent packs the steps' weights into `packed` while it waits for them (_pack_weights).
    fast: tier 1 of a tiered compile (graph/compile/tiers.py), no database read."""
    if stream is None:
        stream = _streaming(target, db, jobs, threads, zero_shot, fast)
    if stream is not None:
        with stream:
            tasks, per_group = extract_tasks(graph, groups, target, on_task=stream.add)
            kernels, sources, stats = stream.finish(
                None if packed is None else lambda: packed.update(_pack_weights(graph,
                                                                                per_group)))
            skipped = sum(len(s.skipped) for s in stream.selections.values())
            return tasks, per_group, kernels, sources, {**stats, "skipped_records": skipped}
    tasks, per_group = extract_tasks(graph, groups, target)
    if fast:
        return (tasks, per_group, *fast_batch.build_serial(tasks, target, threads))
    return (tasks, per_group, *_build_kernels(tasks, target, db, jobs, threads, zero_shot))


def _pack_weights(graph: Graph, per_group: dict) -> dict[str, np.ndarray]:
    """The constants the model's steps read, copied aligned into one block in the order
    _buffers gives them (so the executor keeps them as they are: executor.pack_aligned):
    the copy of a model's weights (0.2 s for ResNet-18's 45 MB) is made while the compile
    workers build kernels instead of after them."""
    names = {v.name for _, dag in per_group.values() for v in dag.arg_values}
    names |= {v.name for v in graph.outputs}
    return pack_aligned({n: np.ascontiguousarray(graph.constants[n])
                         for n in sorted(names) if n in graph.constants})


def _buffers(graph: Graph, groups: list[FusedGroup], step_args: set[str]):
    """Buffer specs and the arena size: inputs, constants, outputs, views, arena slices."""
    specs: dict[str, BufferSpec] = {}
    for v in graph.inputs:
        specs[v.name] = BufferSpec(v.name, v.shape, v.dtype, "input")
    values = {v.name: v for g in groups for n in g.nodes for v in n.inputs + n.outputs if v}
    for name in sorted(step_args | {v.name for v in graph.outputs}):
        if name in graph.constants and name not in specs:
            arr = graph.constants[name]
            specs[name] = BufferSpec(name, tuple(arr.shape), str(arr.dtype), "constant")
    graph_outputs = {v.name for v in graph.outputs}
    root: dict[str, str] = {}
    for g in groups:
        for v in g.outputs:
            if v.name in graph_outputs and v.name not in specs:
                specs[v.name] = BufferSpec(v.name, v.shape, v.dtype, "output")
    lifetimes: dict[str, list[int]] = {}
    for step, g in enumerate(groups):
        for v in g.inputs:
            r = root.get(v.name, v.name)
            if r in lifetimes:
                lifetimes[r][1] = step
        if is_alias(g, graph):
            src, out = g.nodes[0].inputs[0], g.outputs[0]
            root[out.name] = root.get(src.name, src.name)
            specs[out.name] = BufferSpec(out.name, out.shape, out.dtype, "alias",
                                         of=root[out.name])
            continue
        for v in g.outputs:
            if v.name not in specs:
                lifetimes[v.name] = [step, step]
    plan = plan_buffers([(n, values[n].nbytes, s, e) for n, (s, e) in lifetimes.items()])
    check_plan(plan)
    for slot in plan.slots:
        v = values[slot.name]
        specs[v.name] = BufferSpec(v.name, v.shape, v.dtype, "arena", offset=slot.offset)
    # views last: their root (never itself a view) is allocated before them
    ordered = sorted(specs.values(), key=lambda spec: spec.kind == "alias")
    return ordered, plan.peak_bytes, plan.naive_bytes


def compile_model(model, target: str | Target = "native", db=None,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  jobs: int | None = None, layout: str = "nchwc",
                  threads: int | None = None, winograd: bool = True,
                  constants: Mapping[str, np.ndarray] | None = None,
                  zero_shot: bool = False, proto=None,
                  cache_model: bool = True, tiered: bool = False,
                  request: str | None = None, choice_lock=None) -> CompiledModel:
    """Compile an ONNX model (path or ModelProto) or a Graph into a CompiledModel.

    db: a tuning Database or its path, "default" (the user's log over the records shipped
    with Kiln) or None (no records); each group uses its best record on `target` that fits
    its search space, else the space's default schedule (`summary()` says which).
    threads: the thread count the model will run at (default KILN_NUM_THREADS, else every
    core); records measured at that count are preferred (Database.best), and the kernels
    are set to it.
    jobs: worker processes compiling distinct kernels at once (default KILN_NUM_THREADS, else
    the core count; 1 compiles in this process). The kernels are the same either way.
    layout: "nchwc" (default) or "nchw"; winograd: Winograd 3x3 convs (default on), see
    prepare_graph.
    constants: values of graph inputs that decide shapes (a Reshape's shape, ...); the model
    is compiled for them and `run` checks them (CompiledModel: plan.meta["pinned"]). Without
    one, frontend.InputValueNeeded names the input (kiln.compile then specialises at run).
    zero_shot: a task without records of its own takes the config a cost model trained on
    `db`'s records of this vector ISA ranks best among its default and a sample of others
    (autotune/zero_shot.py; summary source "zero-shot"). Needs a database: off with db=None.
    Off by default: its picks measured slower than the defaults (benchmarks/zero_shot.py).
    proto: the ModelProto already read from the path `model` (not read again; the path
    still identifies the model for the model cache).
    cache_model: look the compiled model up in (and add it to) the persistent model cache
    (its kernels go to the kernel cache either way); off for throwaway compiles.
    tiered: on a model-cache miss, return a tiers.TieredModel at once, on kernels built fast
    (tier 1, never cached), and build the model this compile would otherwise return in a
    background thread from the same graph and tasks; it is swapped in between runs and
    cached (graph/compile/tiers.py).
    request: the compile as its caller asked for it (requested): recorded with the cached
    model, so the next such compile loads it without parsing the file.
    choice_lock: held while the thread choice times the model (a tiered model's run lock:
    its first tier's runs, on the same cores, wait instead of skewing the timings).
    """
    start = time.perf_counter()
    target = Target.from_string(target)     # an entry point: parsed once, here
    database = open_db(db)
    if threads is not None and threads < 1:
        raise KilnError(f"compile_model(threads={threads}): the thread count the model runs "
                        "at must be >= 1 (None: KILN_NUM_THREADS, else every core)")
    threads, jobs = resolve_threads(threads), resolve_threads(jobs)  # an entry point: once
    if jobs < 1:
        raise KilnError(f"compile_model(jobs={jobs}): jobs is the number of compile worker "
                        "processes and must be >= 1 (1 compiles in this process)")
    # zero-shot picks follow from the database (in the key) and the ranking's settings
    options = (input_shapes, str(target), database, threads, layout, winograd,
               zero_shot_settings() if zero_shot and database is not None else None)
    options_key = model_cache.model_key(model, *options) if cache_model else None
    # given input values (a DynamicModel gives every feed), the key adds the pinned ones'
    cache_key = (model_cache.pinned_key(options_key, constants)
                 if constants and options_key is not None else options_key)
    if cache_key is not None and (hit := model_cache.load(cache_key, target, threads)) and (
            not constants or model_cache.pins_match(hit, constants)):
        if request is not None and not constants:
            model_cache.remember_request(request, cache_key)
        return hit
    if options_key is not None and not getattr(database, "opened", True):
        # a lazy database (the default one) is read from here on, and opening it may touch
        # its WAL's times: the key this compile is stored under is of the files as opened
        database.ensure_open()
        options_key = model_cache.model_key(model, *options)
        cache_key = (model_cache.pinned_key(options_key, constants)
                     if constants and options_key is not None else options_key)
    if tiered:
        first = _generic_first_tier(model, input_shapes, constants, target, threads, proto)
        if first is not None:
            def build_optimized() -> CompiledModel:
                # the untiered compile, its thread choice timed under the tiered model's
                # run lock (so it is stored with the model, as an untiered compile's is)
                return compile_model(model, target, database, input_shapes, jobs, layout,
                                     threads, winograd, constants, zero_shot, proto,
                                     cache_model, tiered=False, request=request,
                                     choice_lock=tiered_model.run_lock)
            log.info("compiled %s (generic tier): %d calls in %.2f s", first.plan.name,
                     len(first.calls), time.perf_counter() - start)
            tiered_model = tiers.TieredModel(first, build_optimized)
            return tiered_model
    # the workers are forked first: they build the thread-pool runtime during the graph
    # passes (parallel_build.StreamingBuild); left on an error, they are stopped
    stream = _streaming(target, database, jobs, threads, zero_shot, fast=tiered)
    with stream if stream is not None else contextlib.nullcontext():
        digested = isinstance(model, model_cache.DigestedProto)     # checked already
        graph, groups = prepare_graph(model.proto if digested else model, input_shapes,
                                      layout, winograd, constants, target, proto, digested)
        # default schedules are made for `threads` (SearchSpace(task, threads))
        packed: dict = {}       # the steps' weights, aligned while the workers compile
        tasks, per_group, kernels, sources, build_stats = _extract_and_build(
            graph, groups, target, database, jobs, threads, zero_shot, fast=tiered,
            stream=stream, packed=packed)
    compiled = _assemble(graph, groups, per_group, kernels, sources, build_stats, target,
                         threads, start, packed, choose_threads=not tiered,
                         choice_lock=choice_lock)
    store = lambda done: _store(done, options_key, model, options,  # noqa: E731
                                constants, cache_key, request)
    if tiered:
        compiled.plan.meta["compile"]["tier"] = tiers.FAST

        def build_optimized() -> CompiledModel:
            begin = time.perf_counter()
            optimized = _assemble(graph, groups, per_group,
                                  *_build_kernels(tasks, target, database, jobs, threads,
                                                  zero_shot),
                                  target, threads, begin, packed, choose_threads=False)
            store(optimized)
            return optimized
        log.info("compiled %s (fast tier): %d groups, %d kernels in %.1f s", graph.name,
                 len(groups), len(kernels), time.perf_counter() - start)
        return tiers.TieredModel(compiled, build_optimized)
    store(compiled)
    log.info("compiled %s: %d groups, %d kernels in %.1f s", graph.name, len(groups),
             len(kernels), time.perf_counter() - start)
    return compiled


def _generic_first_tier(model, input_shapes, constants, target: Target, threads: int, proto):
    """A tiered compile's first tier on generic kernels (graph/generic), or None when the
    model has a node they do not cover (the fast tier is built then)."""
    digested = isinstance(model, model_cache.DigestedProto)     # checked already
    return first_tier(model.proto if digested else model, target, threads,
                      fast_group_kernels(target, threads), input_shapes=input_shapes,
                      constants=constants, proto=proto, checked=digested)


def fast_group_kernels(target: Target, threads: int) -> Callable:
    """A GenericModel's compile_groups (graph/generic/model.py): the fast tier's kernels of
    the fused groups the generic kernels do not cover, built in this process."""
    def compile_groups(graph: Graph, groups: list[FusedGroup]) -> dict:
        _, per_group, kernels, _, _ = _extract_and_build(graph, groups, target, None, 1,
                                                         threads, False, fast=True)
        return {name: (kernels[mt.name], [v.name for v in dag.arg_values])
                for name, (mt, dag) in per_group.items()}
    return compile_groups


def _assemble(graph: Graph, groups: list[FusedGroup], per_group: dict, kernels: dict,
              sources: dict, build_stats: dict, target: Target, threads: int,
              start: float, packed: Mapping[str, np.ndarray] | None = None,
              choose_threads: bool = True, choice_lock=None) -> CompiledModel:
    """The CompiledModel of the groups' kernels: steps, memory plan, executor. `packed`:
    constants already aligned (_pack_weights), in place of the graph's. At N > 1 threads the
    kernels measured no faster on N are set to one (runtime/thread_choice.py, timed holding
    `choice_lock` if given; not for a compile whose first tier is the fast one: that tier is
    replaced soon, and the optimised tier is built while it runs, unlocked, whose forks
    would skew the timings)."""
    steps, aliases, step_args = [], [], set()
    for g in groups:
        if g.name not in per_group:
            aliases.append(g.name)
            continue
        mt, dag = per_group[g.name]
        args = tuple(v.name for v in dag.arg_values)
        step_args.update(args)
        steps.append(Step(g.name, mt.name, args, g.ops, sources[mt.name]))
    buffers, arena_bytes, naive = _buffers(graph, groups, step_args)
    outputs, index_checks = split_outputs(graph)
    plan = build_plan(graph.name, [v.name for v in graph.inputs],
                      outputs, buffers, steps, arena_bytes, aliases,
                      naive, {"target": str(target), "threads": threads, "compile": {
                          "seconds": round(time.perf_counter() - start, 3), **build_stats},
                          **({"pinned": pinned_json(graph.pinned)} if graph.pinned else {}),
                          **({"index_checks": index_checks} if index_checks else {}),
                          **({"io_formats": graph.io_formats} if graph.io_formats else {})})
    compiled = CompiledModel(plan, kernels, {**graph.constants, **packed} if packed
                             else graph.constants)
    compiled.set_num_threads(threads)
    if choose_threads and threads > 1:
        with choice_lock if choice_lock is not None else contextlib.nullcontext():
            thread_choice.choose(compiled, threads)
    return compiled


def _store(compiled: CompiledModel, options_key: str | None, model, options: tuple,
           constants, cache_key: str | None, request: str | None = None) -> None:
    """Into the model cache, if the compile's inputs did not change meanwhile."""
    if options_key is not None and model_cache.still_valid(options_key, model, *options):
        if constants:
            model_cache.remember_pins(options_key, compiled)
            cache_key = model_cache.pinned_key(options_key, constants)
        if cache_key is not None and model_cache.store(cache_key, compiled) and \
                request is not None and not constants:
            model_cache.remember_request(request, cache_key)


def requested(model, input_shapes, target, db, threads, layout: str, winograd: bool,
              zero_shot: bool) -> tuple[CompiledModel | None, str | None]:
    """The compiled model a compile_model call with these arguments (the ONNX file `model`,
    `input_shapes` as given) made before, loaded without reading the file, or None; and the
    call's request key (model_cache.request_key) to pass to compile_model (None: not
    cacheable so)."""
    target, threads = Target.from_string(target), resolve_threads(threads)
    database = open_db(db)
    request = model_cache.request_key(
        model, input_shapes, str(target), database, threads, layout, winograd,
        zero_shot_settings() if zero_shot and database is not None else None)
    if request is None:
        return None, None
    return model_cache.load_requested(request, target, threads), request


def model_tasks(model, target: str | Target = "native",
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                layout: str = "nchwc", winograd: bool = True) -> list[ModelTask]:
    """The distinct tuning tasks of a model, with their weights (occurrence counts)."""
    target = Target.from_string(target)     # an entry point: parsed once, here
    graph, groups = prepare_graph(model, input_shapes, layout, winograd, target=target)
    return extract_tasks(graph, groups, target)[0]


def tune_model(model, target: str | Target = "native", trials: int | None = 200, db=None,
               callback: Callable[[Progress], None] | None = None,
               input_shapes: Mapping[str, Sequence[int]] | None = None,
               layout: str = "nchwc", winograd: bool = True, model_check: bool = True,
               **options) -> list[TaskReport]:
    """Tune the model's tasks until `db` holds `trials` records of them in total (a rerun
    resumes; autotune.scheduler.tune_tasks) and record every measurement in `db` (a Database,
    a path or "default"; required). `options` go to tune_tasks (search, batch_size, seed,
    options, time_budget: seconds, with trials=None for no trial limit, confirm).
    With a time budget, the model compiled as `db` stands is profiled first and the tasks'
    in-model seconds go to tune_tasks as `latencies` (the budget is spent by measured
    spread, autotune/spread.py; pass latencies=None for the scheduler's own allocation).
    model_check: after the confirmation, try each tuned choice against its default inside
    the compiled model and keep it only where the model runs faster, then the whole model
    with them against its defaults (graph/compile/model_check.py; a time budget keeps the
    seconds the tuned choices need for that, as measured before tuning by
    graph/compile/check_cost.py, or model_check.SHARE of itself without latencies)."""
    from ...autotune.confirm import CONFIRM
    from ...autotune.measure import MeasureOptions
    from . import model_check as check
    database = open_db(db)
    if database is None:
        raise KilnError("tune_model needs a tuning database to write to: pass db=Database(path) "
                        "or a path such as 'tuning_logs/kiln.db'")
    start = time.perf_counter()
    target = Target.from_string(target)     # an entry point: parsed once, here
    tasks = model_tasks(model, target, input_shapes, layout, winograd)
    log.info("tuning %d tasks: %s", len(tasks),
             ", ".join(f"{t.name} x{int(t.weight)}" for t in tasks))
    checking = model_check and options.get("confirm", CONFIRM) is not None
    budget = total = options.get("time_budget")
    threads = resolve_threads((options.get("options") or MeasureOptions()).threads)
    compile_now = lambda: compile_model(model, target, database, input_shapes,  # noqa: E731
                                        layout=layout, threads=threads, winograd=winograd,
                                        cache_model=False)
    cost = None
    if budget is not None and options.get("cluster") is None and "latencies" not in options:
        # a time budget goes where the model's time is and candidates differ
        # (autotune/spread.py): the tasks' in-model seconds, measured once
        options["latencies"] = task_latencies(compile_now(), tasks)
        if checking:        # what a check and the verdict take here, measured
            cost = measure_check_cost(compile_now, threads)
            log.info("an in-model check will take about %.1f s, the verdict %.1f s "
                     "(a warm compile %.2f s, a run %.2f ms)", cost.check_seconds(),
                     cost.verdict_seconds(), cost.compile_seconds, 1e3 * cost.run_seconds)
        budget = max(1.0, budget - (time.perf_counter() - start))
    if budget is not None and options.get("latencies") is not None:
        # the task scheduler keeps what the tuned tasks' confirmations and checks need
        options["time_budget"] = budget
        options["check_seconds"] = 0.0 if not checking else (
            check.SECONDS_PER_TASK if cost is None else cost.check_seconds())
        if cost is not None:
            options["verdict_seconds"] = cost.verdict_seconds()
    elif checking and budget is not None:
        options["time_budget"] = budget * (1 - check.SHARE)
    elif budget is not None:
        options["time_budget"] = budget
    reports = tune_tasks([(t.task, t.weight) for t in tasks], target, trials,
                         database, callback=callback, **options)
    if not checking:
        return reports
    compile_default = lambda: compile_model(model, target, None, input_shapes,  # noqa: E731
                                            layout=layout, threads=threads,
                                            winograd=winograd, cache_model=False)
    try:
        found = check.check_choices_in_model(
            compile_now, tasks, target, database, threads,
            deadline=None if total is None else start + total,
            compile_default=compile_default, cost=cost)
    except KilnError as exc:
        log.warning("the in-model check of the tuned choices failed (%s); the confirmed "
                    "choices stand", exc)
        return reports
    by_key = {c.task_key: c for c in found}
    # (a confirmation of this run now says what the check left: the default where reverted)
    return [dataclasses.replace(r, in_model=by_key[r.task_key], choice=database.choice(
                r.task_key, str(target), threads) if r.choice is not None else None)
            if r.task_key in by_key else r for r in reports]


def confirm_model(model, target: str | Target = "native", db=None, options=None,
                  threads: int | None = None, input_shapes=None, layout: str = "nchwc",
                  winograd: bool = True) -> dict:
    """Confirm every task of the model, heaviest first (autotune/confirm.py): its default,
    leading records and, with `options.mutations`, mutations of the default timed side by
    side at `threads`; the winners and the labels the zero-shot model learns from go to
    `db` (required). Returns workload key -> Choice of the tasks confirmed."""
    from ...autotune.confirm import CONFIRM, confirm_tasks
    from ...autotune.measure import MeasureOptions, Runner
    database = open_db(db)
    if database is None:
        raise KilnError("confirm_model needs a tuning database to write to: pass "
                        "db=Database(path) or a path such as 'tuning_logs/kiln.db'")
    target = Target.from_string(target)     # an entry point: parsed once, here
    tasks = sorted(model_tasks(model, target, input_shapes, layout, winograd),
                   key=lambda t: -t.weight * t.task.flops)
    with Runner(MeasureOptions(threads=resolve_threads(threads))) as runner:
        return confirm_tasks([(t.task, None) for t in tasks], target,
                             database, runner, options=options or CONFIRM)


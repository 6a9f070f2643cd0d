"""The generic tier's graph and model: the ONNX model through Kiln's graph passes, but none
that lays data out for specialised kernels (channel blocks, Winograd, packed weights), then
planned onto generic kernels."""
from __future__ import annotations

import logging
import os
from typing import Mapping, Sequence

import numpy as np

from ...codegen.target import Target
from ...te.errors import KilnError
from ..ir import Graph
from ..onnx.load import load_onnx
from ..passes import optimize
from ..passes.index_checks import add_index_checks, settle_index_checks
from ...codegen.generic.library import start_background_warmup
from .lowering import LibraryNotBuilt, Unsupported
from .model import GenericModel

log = logging.getLogger(__name__)

# passes whose output only specialised (per-model compiled) kernels read
SKIPPED_PASSES = ("blocked layout", "winograd", "pack conv weights", "prepack matmul weights")


def generic_graph(model, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  constants: Mapping[str, np.ndarray] | None = None,
                  target: Target | None = None, proto=None, checked: bool = False) -> Graph:
    """The graph the generic tier runs: loaded, index-checked, optimised without
    SKIPPED_PASSES."""
    graph = model if isinstance(model, Graph) else load_onnx(model, input_shapes,
                                                             values=constants, proto=proto,
                                                             checked=checked)
    graph, checks = add_index_checks(graph)
    return settle_index_checks(optimize(graph, skip=SKIPPED_PASSES, target=target), checks)


def compile_generic(model, target: Target, threads: int, compile_groups=None,
                    build_missing: bool = True, **graph_options) -> GenericModel:
    """A GenericModel of `model` (an ONNX path/ModelProto or a Graph); Unsupported names the
    first op or attribute the generic kernels do not cover (without `compile_groups`, the
    GenericModel's builder of kernels for the groups they do not cover)."""
    return GenericModel(generic_graph(model, target=target, **graph_options), target, threads,
                        compile_groups, build_missing)


ENV = "KILN_GENERIC_TIER"
# "background" (default): a tiered compile that needs library units not built yet takes the
# fast tier and starts `kiln warmup` in a low-priority background process (building the
# units a model needs costs a few seconds, more than the fast tier on a small model);
# "now": they are built during the compile (once per machine), so it always starts generic
BUILD_ENV = "KILN_GENERIC_BUILD"


def generic_tier_enabled(environ=None) -> bool:
    """KILN_GENERIC_TIER=0 (or off/false/no) makes tiered compiles start on the fast tier
    (per-model kernels) instead; on by default."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip().lower()
    if value in ("", "1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise KilnError(f"{ENV}={value!r}: use 1 (generic first tier on) or 0 (off)")


def first_tier(model, target: Target, threads: int, compile_groups=None,
               **graph_options) -> GenericModel | None:
    """The generic tier of a tiered compile, or None (logged) when some node of the model is
    not covered or KILN_GENERIC_TIER is off: the compile then builds its fast tier."""
    if not generic_tier_enabled():
        return None
    policy = os.environ.get(BUILD_ENV, "").strip().lower() or "background"
    if policy not in ("background", "now"):
        raise KilnError(f"{BUILD_ENV}={policy!r}: use background (build missing generic "
                        "kernels in a background process) or now (during the compile)")
    try:
        return compile_generic(model, target, threads, compile_groups,
                               build_missing=policy == "now", **graph_options)
    except LibraryNotBuilt as exc:
        started = start_background_warmup(target)
        log.info("generic tier not used: %s%s", exc,
                 "; building the library in the background" if started else "")
        return None
    except Unsupported as exc:
        log.info("generic tier not used: %s", exc)
        return None

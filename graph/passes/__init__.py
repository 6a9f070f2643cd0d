"""Graph passes: verification, constant folding, DCE, CSE, simplification, fusion.

`optimize(graph)` runs PIPELINE, a readable list of (name, pass) pairs; each pass is a pure
function Graph -> Graph that returns its input unchanged when it has nothing to do.
"""
from __future__ import annotations

import logging
from typing import Callable

from ..ir import Graph
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold_constants import fold_constants
from .fusion import FusedGroup, fuse_operators
from .layout import pack_conv_weights
from .simplify import cancel_transposes, fold_batch_norm, remove_identities, simplify
from .verify import verify_graph

log = logging.getLogger(__name__)

PIPELINE: tuple[tuple[str, Callable[[Graph], Graph]], ...] = (
    ("fold constants", fold_constants),
    ("remove identities", remove_identities),
    ("fold batch norm", fold_batch_norm),
    ("cancel transposes", cancel_transposes),
    ("fold constants again", fold_constants),   # transposed/reshaped weights become constants
    ("eliminate common subexpressions", eliminate_common_subexpressions),
    ("eliminate dead code", eliminate_dead_code),
    ("pack conv weights", pack_conv_weights),   # after folding: BN-scaled weights are final
)


def optimize(graph: Graph, verify: bool = False) -> Graph:
    """Run PIPELINE; with `verify`, check the graph's invariants after every pass."""
    for name, fn in PIPELINE:
        before = len(graph.nodes)
        graph = fn(graph)
        log.debug("after %s: %d -> %d nodes", name, before, len(graph.nodes))
        if verify:
            verify_graph(graph)
    return graph


__all__ = ["PIPELINE", "FusedGroup", "cancel_transposes", "eliminate_common_subexpressions",
           "eliminate_dead_code", "fold_batch_norm", "fold_constants", "fuse_operators",
           "optimize", "pack_conv_weights", "remove_identities", "simplify", "verify_graph"]

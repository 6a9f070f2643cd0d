"""kiln.build: lower a schedule and compile it for a target in one step."""
from __future__ import annotations

from .codegen import build as _build_func
from .codegen.build import DEFAULT_FASTMATH
from .schedule import Schedule, lower
from .te.errors import LoweringError


def build(sch: Schedule, args, target="native", name: str = "default_function",
          fastmath=DEFAULT_FASTMATH):
    """Compile `sch` into a Kernel whose arguments are `args` (inputs and outputs, in order).

    The kernel takes numpy arrays and writes outputs in place: `f(a, b, c)`. `fastmath` as
    in kiln.codegen.build: by default only a*b+c contraction into FMA is allowed.
    """
    if not isinstance(sch, Schedule):
        raise LoweringError(f"kiln.build needs a Schedule from kiln.create_schedule(), got "
                            f"{type(sch).__name__}; for a lowered PrimFunc use "
                            "kiln.codegen.build(func, target)")
    func = lower(sch, args, name=name)
    return _build_func(func, target=target, fastmath=fastmath)

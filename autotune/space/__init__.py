"""Search spaces: the rules that generate knobs from a task's DAG (rules.py), the default
config (defaults.py), applying a config to a schedule (apply.py) and the int8 knobs."""
from .rules import Knob, SearchSpace

__all__ = ["Knob", "SearchSpace"]

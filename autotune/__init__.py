"""Autotuning: tasks, rule-generated search spaces, measurement in worker processes, loop-IR
features, the XGBoost cost model, search, the SQLite tuning database, the tuner."""
from .cost_model import XGBCostModel, kendall_tau, top_k_recall
from .database import SCHEMA_VERSION, Database, Record, config_key
from .features import FEATURE_NAMES, N_FEATURES, extract_features
from .measure import MeasureOptions, MeasureResult, MeasureStatus, Runner, TaskData
from .scheduler import TaskReport, tune_tasks
from .search import GridSearch, ModelSearch, RandomSearch, SearchConfig
from .space.rules import Knob, SearchSpace
from .task import Task
from .tuner import (Progress, TaskTuner, TuneResult, apply_best, build_best, canonical_target,
                    tune_task)

__all__ = ["XGBCostModel", "kendall_tau", "top_k_recall", "SCHEMA_VERSION", "Database",
           "Record", "config_key", "FEATURE_NAMES", "N_FEATURES", "extract_features",
           "MeasureOptions", "MeasureResult", "MeasureStatus", "Runner", "TaskData",
           "TaskReport", "tune_tasks", "GridSearch", "ModelSearch", "RandomSearch",
           "SearchConfig", "Knob", "SearchSpace", "Task", "Progress", "TaskTuner", "TuneResult",
           "apply_best", "build_best", "canonical_target", "tune_task"]

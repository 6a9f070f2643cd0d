"""SearchSpace takes its thread count and target explicitly; the environment is only the
fallback when no count is given, read once when the space is made."""
from kiln.autotune.space.rules import SearchSpace
from kiln.codegen.target import Target

from .test_space_windows import gemv


def test_the_default_follows_the_thread_count_passed_not_the_environment(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    task = gemv(1280, 1000, "llvm -mcpu=haswell")
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    one = SearchSpace(task, threads=1)
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    two = SearchSpace(task, threads=2)
    fallback = SearchSpace(task)                # KILN_NUM_THREADS=1, read now
    monkeypatch.setenv("KILN_NUM_THREADS", "2")  # later changes do not reach it
    assert one.default_config()["s0/tile/1"] == [25, 40]
    assert two.default_config()["s0/tile/1"] == [5, 8]
    assert fallback.threads == 1 and fallback.default_config()["s0/tile/1"] == [25, 40]


def test_the_target_is_parsed_once_and_can_be_passed():
    task = gemv(64, 48, "llvm -mcpu=haswell")
    space = SearchSpace(task, threads=1)
    assert isinstance(space.target, Target) and space.target.vector_lanes("float32") == 8
    given = Target.from_string("llvm -mcpu=haswell")
    assert SearchSpace(task, threads=1, target=given).target is given

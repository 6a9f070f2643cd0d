import llvmlite.binding as llvm
import pytest

from kiln.codegen import Target
from kiln.codegen.target import KNOWN_CPUS
from kiln.te.errors import TargetError


def test_native_detects_host_cpu_and_width():
    t = Target.from_string("native")
    assert t.cpu == llvm.get_host_cpu_name()
    feats = llvm.get_host_cpu_features()
    expected = 512 if feats.get("avx512f") else 256 if feats.get("avx2") else 128
    assert t.vector_bits == expected
    assert t.vector_lanes("float32") == expected // 32
    assert t.vector_lanes("float64") == expected // 64
    assert t.vector_lanes("int8") == expected // 8
    assert t.can_run_on_host()


@pytest.mark.parametrize("text", ["native", "llvm", "llvm -mcpu=znver4",
                                  "llvm -mcpu=haswell -mattr=+avx2,-avx512f",
                                  "llvm -mcpu=x86-64 -mattr=+avx2"])
def test_str_round_trips(text):
    t = Target.from_string(text)
    again = Target.from_string(str(t))
    assert again == t
    assert str(again) == str(t)


def test_named_cpus_imply_vector_width():
    assert Target.from_string("llvm -mcpu=znver4").vector_bits == 512
    assert Target.from_string("llvm -mcpu=znver3").vector_bits == 256
    assert Target.from_string("llvm").vector_bits == 128
    assert Target.from_string("llvm -mcpu=znver4 -mattr=-avx512f").vector_bits == 256
    assert Target.from_string("llvm -mcpu=x86-64 -mattr=+avx2").vector_bits == 256
    assert str(Target.from_string("llvm")) == "llvm -mcpu=x86-64"


def test_unknown_cpu_lists_known_ones():
    with pytest.raises(TargetError, match=r"CPU 'znver9' is not known; known CPUs: .*znver4"):
        Target.from_string("llvm -mcpu=znver9")
    assert "znver3" in KNOWN_CPUS


@pytest.mark.parametrize("text", ["cuda", "", "llvm -O3", "llvm -mattr=avx2"])
def test_unknown_forms_raise(text):
    with pytest.raises(TargetError, match=r"(accepted forms|bad feature)"):
        Target.from_string(text)


def test_non_string_target_raises():
    with pytest.raises(TargetError, match=r"must be a string or Target"):
        Target.from_string(42)

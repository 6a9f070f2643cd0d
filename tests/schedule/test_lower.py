"""Lowering output checked against expected printed IR, and the dump hook."""
import kiln
from kiln import te
from tests.util import matmul_dag


def test_default_matmul_ir():
    A, B, C = matmul_dag(4, 3, 5)
    func = kiln.lower(kiln.create_schedule(C), [A, B, C], name="mm")
    assert str(func) == (
        "def mm(A: float32[4, 3], B: float32[3, 5], C: float32[4, 5]):\n"
        "  for i in range(4):\n"
        "    for j in range(5):\n"
        "      C[i * 5 + j] = 0.0f\n"
        "      for k in range(3):\n"
        "        C[i * 5 + j] = C[i * 5 + j] + A[i * 3 + k] * B[k * 5 + j]")


def test_non_divisible_split_is_guarded_and_divisible_is_not():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = kiln.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    text = str(kiln.lower(s, [A, B]))
    assert "if i.outer * 4 + i.inner < 10:" in text
    s2 = kiln.create_schedule(B)
    s2[B].split(B.op.axis[0], factor=5)
    assert "if " not in str(kiln.lower(s2, [A, B]))


def test_intermediate_root_stage_gets_global_buffer():
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((6,), lambda i: B[5 - i], name="C")
    text = str(kiln.lower(kiln.create_schedule(C), [A, C]))
    assert text.splitlines()[1].strip() == "allocate B: float32[6] (global)"


def test_dump_writes_every_step(tmp_path):
    A, B, C = matmul_dag(2, 2, 2)
    path = tmp_path / "dump.txt"
    kiln.lower(kiln.create_schedule(C), [A, B, C], dump=str(path))
    text = path.read_text()
    assert "--- after build loop nests ---" in text and "--- after simplify ---" in text

"""A freshly compiled model's weights start 64-byte aligned, packed in one block, as a model
loaded from the cache has them (misaligned weights ran a cold-compiled model slower)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import kiln
from kiln.graph import models
from kiln.graph.runtime.executor import BufferSpec, Plan, _packed_constants


def _plan(specs):
    return Plan("m", (), (), tuple(specs), (), 0)


def _misaligned(values: np.ndarray) -> np.ndarray:
    raw = np.empty(values.size + 16, values.dtype)
    start = next(k for k in range(1, 16) if raw[k:].ctypes.data % 64)
    out = raw[start:start + values.size].reshape(values.shape)
    out[...] = values
    return out


def test_misaligned_constants_are_packed_aligned_with_their_values(rng):
    shapes = [(17, 23), (1,), (0, 5), (3, 7, 5)]
    specs = [BufferSpec(f"w{k}", s, "float32", "constant") for k, s in enumerate(shapes)]
    specs.append(BufferSpec("x", (4,), "float32", "input"))
    values = {f"w{k}": rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    given = {name: _misaligned(v) for name, v in values.items()}
    packed = _packed_constants(_plan(specs), given)
    for name, want in values.items():
        assert packed[name].shape == want.shape and packed[name].dtype == want.dtype
        np.testing.assert_array_equal(packed[name], want)
        assert packed[name].nbytes == 0 or packed[name].ctypes.data % 64 == 0
    bases = {packed[n].base.ctypes.data for n in values if packed[n].nbytes}
    assert len(bases) == 1, "one block for all weights"


def test_aligned_constants_are_used_as_they_are(rng):
    block = np.empty(256 + 64, np.uint8)
    at = (-block.ctypes.data) % 64
    w = block[at:at + 256].view(np.float32)
    w[...] = rng.standard_normal(64)
    constants = {"w": w}
    plan = _plan([BufferSpec("w", (64,), "float32", "constant")])
    assert _packed_constants(plan, constants) is constants


@pytest.mark.parametrize("size", [13])
def test_cold_compiled_model_has_aligned_weights_and_matches_onnxruntime(size, tmp_path,
                                                                         monkeypatch, rng):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "m.onnx"
    onnx.save(models.resnet18_like(image_size=size, base_width=8, num_classes=7), path)
    cold = kiln.compile(str(path), db=None, jobs=1)
    assert not cold.plan.meta["compile"].get("cached")
    weights = [b.name for b in cold.plan.buffers if b.kind == "constant"]
    assert weights
    assert all(cold.buffers[n].nbytes == 0 or cold.buffers[n].ctypes.data % 64 == 0
               for n in weights)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    np.testing.assert_allclose(cold.run(x)[0], sess.run(None, x)[0], rtol=2e-3, atol=2e-3)
    warm = kiln.compile(str(path), db=None, jobs=1)
    assert warm.plan.meta["compile"].get("cached")
    np.testing.assert_array_equal(warm.run(x)[0], cold.run(x)[0])


def test_the_arena_and_the_weight_block_start_on_a_huge_page(rng):
    """Both big blocks start 2 MB-aligned, so transparent huge pages back them the same way
    in every instance of a model."""
    from kiln.graph.runtime.executor import HUGE_PAGE, _aligned_empty
    for nbytes in (1, 4096, HUGE_PAGE + 3):
        block = _aligned_empty(nbytes, 64)
        assert block.nbytes == nbytes and block.ctypes.data % HUGE_PAGE == 0
    specs = [BufferSpec("w", (17, 23), "float32", "constant")]
    packed = _packed_constants(_plan(specs), {"w": _misaligned(
        rng.standard_normal((17, 23)).astype(np.float32))})
    assert packed["w"].ctypes.data % HUGE_PAGE == 0

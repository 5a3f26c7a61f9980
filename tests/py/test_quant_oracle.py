"""Weight formats against the gguf Python package (the independent oracle).

rawloop's reference dequantizer must reproduce gguf.quants.dequantize bit for bit on random
blocks, and its Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 quantizers must produce the same bytes as gguf.quants.quantize.
build/test_quant has a tool mode (`dequant TYPE in out`, `quant TYPE in out`) that exposes the C
functions to this test."""

import numpy as np
import pytest

from conftest import run_quant_tool

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402


# byte offsets of the fp16 scales inside each block; the rest of a block is free-form bits
SCALE_OFFSETS = {
    "Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}




def random_blocks(tname, nblocks, rng):
    qtype = T[tname]
    blck, size = GGML_QUANT_SIZES[qtype]
    if tname == "F32":
        return rng.standard_normal(nblocks).astype(np.float32).tobytes()
    if tname == "F16":
        # every bit pattern, NaN/Inf/subnormals included
        return rng.integers(0, 65536, nblocks, dtype=np.uint16).tobytes()
    if tname == "BF16":
        return rng.integers(0, 65536, nblocks, dtype=np.uint16).tobytes()
    raw = rng.integers(0, 256, (nblocks, size), dtype=np.uint8)
    for off in SCALE_OFFSETS[tname]:
        # sane scales of both signs, including fp16 subnormals
        s = (rng.uniform(-1, 1, nblocks) * 10.0 ** rng.uniform(-7, 0, nblocks)).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(nblocks, 2)
    return raw.tobytes()


@pytest.mark.parametrize("tname", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"])
def test_dequant_matches_gguf(tname, tmp_path):
    rng = np.random.default_rng(1234 + len(tname))
    blck, size = GGML_QUANT_SIZES[T[tname]]
    nblocks = 4096 if blck > 1 else 65536
    data = random_blocks(tname, nblocks, rng)
    ours = np.frombuffer(run_quant_tool("dequant", tname, data, tmp_path), dtype=np.float32)
    ref = gguf.quants.dequantize(np.frombuffer(data, dtype=np.uint8), T[tname]).astype(np.float32).ravel()
    assert ours.shape == ref.shape
    # bit-for-bit, NaNs compared as NaNs
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    same = ours.view(np.uint32)[~nan] == ref.view(np.uint32)[~nan]
    bad = np.flatnonzero(~same)
    assert bad.size == 0, f"{bad.size} values differ, first at {bad[0]}: {ours[~nan][bad[0]]} vs {ref[~nan][bad[0]]}"


@pytest.mark.parametrize("tname", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16"])
def test_quant_matches_gguf(tname, tmp_path):
    rng = np.random.default_rng(99)
    n = 32 * 8192
    x = rng.standard_normal(n).astype(np.float32)
    x[: n // 4] *= 1e-3                     # small magnitudes (fp16 scale rounding)
    x[n // 4: n // 2] *= 50.0               # large ones
    x[1024:1056] = 0.0                      # an all-zero block (d = 0 path)
    x[2048:2080] = np.float32(0.25)          # ties in the arg-max / exact grid points (Q4_1 / Q5_1: max == min)
    x[4096:4128] = -np.arange(32, dtype=np.float32)
    x[4128:4160] = np.arange(32, dtype=np.float32) * 0.5 - 3   # both signs, ties at .5 steps
    x[8192:8224] = rng.standard_t(2, 32).astype(np.float32)    # one outlier dominates
    ours = run_quant_tool("quant", tname, x.tobytes(), tmp_path)
    if tname == "F16":
        ref = x.astype(np.float16).tobytes()
    else:
        ref = gguf.quants.quantize(x.reshape(-1, 1024), T[tname]).tobytes()
    a, b = np.frombuffer(ours, np.uint8), np.frombuffer(ref, np.uint8)
    assert a.shape == b.shape
    bad = np.flatnonzero(a != b)
    assert bad.size == 0, f"{bad.size} bytes differ, first at byte {bad[0]}"


@pytest.mark.parametrize("tname", ["Q4_K", "Q5_K", "Q6_K"])
def test_kquant_quantizer_is_valid(tname, tmp_path):
    """Our K-quant blocks decode (by gguf) to something close to the input."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(256 * 256).astype(np.float32)
    q = run_quant_tool("quant", tname, x.tobytes(), tmp_path)
    y = gguf.quants.dequantize(np.frombuffer(q, np.uint8), T[tname]).ravel()
    rel = np.sqrt(np.mean((x - y) ** 2) / np.mean(x ** 2))
    assert rel < {"Q4_K": 0.09, "Q5_K": 0.045, "Q6_K": 0.02}[tname], rel

"""FP8, rawloop's 8-bit float weight type (docs/FORMATS.md, section FP8).

Oracles, all independent of the engine:
  - torch's float8_e4m3fn and bfloat16 conversions (round to nearest even): the quantizer's
    bytes must be torch's rounding of the documented rule (d = bf16(amax / 448), codes
    e4m3(clamp(x / d, -448, 448))), and the reference decoder must give torch's decode of
    random blocks, bit for bit;
  - transformers on the weights of an FP8 file decoded that way: `rawloop logits --exact`
    within 1e-3 (the bound of test_oracle.py), the default path too (FP8 has no 8-bit
    activation path, so the default is fp32 as well).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gguf

import oracle_models as om
from conftest import run_quant_tool, run_rawloop
from rawloop_gguf import FP8_ID, f32_source, fp8_dequant, hf_from_tensors, read_gguf, type_name

SPEC = om.Spec("fp8", "llama", hidden=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn=320,
               vocab=320, seed=13)
IDS = [1] + [int(x) for x in np.random.default_rng(9).integers(3, SPEC.vocab, 15)]


def torch_fp8_quant(x: np.ndarray) -> bytes:
    """The documented quantizer, in torch: per 32 values d = bf16(amax / 448) (float32
    division, then round to nearest even), codes = e4m3(clamp(x / d, -448, 448)); 0 when d is 0."""
    b = torch.from_numpy(np.array(x, dtype=np.float32).reshape(-1, 32))
    amax = b.abs().amax(dim=1, keepdim=True)
    d16 = (amax / 448).to(torch.bfloat16)
    d = d16.float()
    safe = torch.where(d == 0, torch.ones_like(d), d)
    codes = (b / safe).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    codes = torch.where(d == 0, torch.zeros_like(codes), codes)
    out = torch.cat([d16.view(torch.uint8).reshape(-1, 2), codes], dim=1)
    return out.numpy().tobytes()


def test_quantizer_matches_torch(tmp_path):
    rng = np.random.default_rng(21)
    nb = 4000
    x = rng.standard_normal((nb, 32)).astype(np.float32)
    x *= np.exp(rng.uniform(-12, 6, (nb, 1))).astype(np.float32)   # block scales 6e-6 .. 400
    x[::7, 5] *= 30                                                  # outliers
    x[1::11] *= np.float32(1e-30)                                    # blocks far below fp16's range
    x[5::17] *= np.float32(1e-36)                                    # subnormal d: x / d past 448
    x[2::13] = 0                                                     # zero blocks
    x[3::13, :4] = -0.0
    # exact ties between neighbouring codes, and values on the grid: d = 1 blocks
    k = np.arange(0, 127, dtype=np.uint8)                            # codes 0 .. 0x7e (448)
    grid = torch.from_numpy(k).view(torch.float8_e4m3fn).float().numpy()
    mids = (grid[:-1] + grid[1:]) / 2                                # exact in float32
    tie_rows = np.concatenate([mids, grid, -mids, -grid])
    tie_rows = np.resize(tie_rows, (len(tie_rows) + 31) // 31 * 31).reshape(-1, 31)
    ties = np.concatenate([np.full((len(tie_rows), 1), 448, np.float32), tie_rows], axis=1)
    x = np.concatenate([x, ties.astype(np.float32)])
    got = run_quant_tool("quant", "FP8", x.tobytes(), tmp_path)
    want = torch_fp8_quant(x)
    g = np.frombuffer(got, np.uint8).reshape(-1, 34)
    w = np.frombuffer(want, np.uint8).reshape(-1, 34)
    bad = np.nonzero((g != w).any(axis=1))[0]
    assert len(bad) == 0, (len(bad), bad[:5], g[bad[:1]], w[bad[:1]])
    assert not np.isin(g[:, 2:], [0x7F, 0xFF]).any()                # never the NaN codes


def test_dequant_matches_torch(tmp_path):
    rng = np.random.default_rng(22)
    nb = 3000
    raw = rng.integers(0, 256, (nb, 34), dtype=np.uint8)
    codes = raw[:, 2:]
    codes[(codes & 0x7F) == 0x7F] ^= 1                               # NaN to torch: not written
    d = (np.exp(rng.uniform(-20, 3, nb)).astype(np.float32))
    raw[:, :2] = torch.from_numpy(d).to(torch.bfloat16).view(torch.uint8).reshape(-1, 2).numpy()
    got = np.frombuffer(run_quant_tool("dequant", "FP8", raw.tobytes(), tmp_path), "<f4")
    np.testing.assert_array_equal(got, fp8_dequant(raw))


def test_nan_codes_decode_as_480(tmp_path):
    """0x7f / 0xff are never written; rawloop reads them as the value their bits spell."""
    raw = np.zeros((1, 34), np.uint8)
    raw[0, :2] = np.frombuffer(np.array([1.0], np.float32).tobytes()[2:], np.uint8)  # bf16 1.0
    raw[0, 2], raw[0, 3] = 0x7F, 0xFF
    got = np.frombuffer(run_quant_tool("dequant", "FP8", raw.tobytes(), tmp_path), "<f4")
    assert got[0] == 480 and got[1] == -480 and (got[2:] == 0).all()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fp8")
    src = f32_source(d, SPEC)
    out = d / "fp8.gguf"
    p = run_rawloop("quantize", src, out, "--type", "FP8", "-t", 2)
    return {"src": src, "fp8": out, "log": p.stderr.decode()}


def test_file_types_and_refusal(files):
    kvs, tensors = read_gguf(files["fp8"])
    got = {n: type_name(t) for n, (t, _, _) in tensors.items()}
    assert all(v == "FP8" for n, v in got.items() if "norm" not in n), got   # token_embd too
    assert all(v == "F32" for n, v in got.items() if "norm" in n)
    assert kvs["rawloop.format_version"][:2] == (4, 1)
    assert kvs["general.file_type"][1] == 2048
    assert "FP8" in files["log"]
    with pytest.raises(Exception):
        gguf.GGUFReader(str(files["fp8"]))
    # the blocks are the documented quantizer's (torch) of the source rows
    _, src = read_gguf(files["src"])
    t, ne, raw = src["blk.0.ffn_down.weight"]
    rows = np.frombuffer(raw.tobytes(), "<f4")
    assert bytes(tensors["blk.0.ffn_down.weight"][2]) == torch_fp8_quant(rows)
    assert tensors["blk.0.ffn_down.weight"][0] == FP8_ID


def test_logits_match_transformers(files, tmp_path):
    _, tensors = read_gguf(files["fp8"])
    ref = om.hf_logits(hf_from_tensors(tensors, SPEC), IDS)
    for exact in (True, False):
        out = tmp_path / "logits.bin"
        run_rawloop("logits", "-m", files["fp8"], "--ids", " ".join(map(str, IDS)), "-o", out,
                    *(["--exact"] if exact else []))
        got = np.fromfile(out, dtype="<f4").reshape(len(IDS), SPEC.vocab)
        assert om.rel_error(got, ref) < 1e-3, (exact, om.rel_error(got, ref))
    # FP8 is not lossless: the F32 source's logits are measurably different
    _, src = read_gguf(files["src"])
    assert om.rel_error(om.hf_logits(hf_from_tensors(src, SPEC), IDS), ref) > 1e-3


def test_mixed_8bit_path_per_matrix(files, tmp_path):
    """attn_k in Q8_0, everything else FP8: attn_q (FP8, fp32 activations) and attn_k share one
    input, and the default path must still round it to int8 for attn_k (the CPU once decided by
    attn_q alone, which ran attn_k in fp32). So the default logits are a fast-path distance from
    --exact's, and both stay within their bounds of transformers on the decoded weights."""
    recipe = tmp_path / "k.recipe"
    recipe.write_text("blk.*.attn_k.weight Q8_0\n* FP8\n")
    out = tmp_path / "mix.gguf"
    run_rawloop("quantize", files["src"], out, "--recipe", recipe, "-t", 2)
    _, tensors = read_gguf(out)
    assert type_name(tensors["blk.0.attn_k.weight"][0]) == "Q8_0"
    assert type_name(tensors["blk.0.attn_q.weight"][0]) == "FP8"
    ref = om.hf_logits(hf_from_tensors(tensors, SPEC), IDS)
    got = {}
    for exact in (True, False):
        o = tmp_path / f"l{exact}.bin"
        run_rawloop("logits", "--device", "cpu", "-m", out, "--ids", " ".join(map(str, IDS)),
                    "-o", o, *(["--exact"] if exact else []))  # the CPU's decision is tested
        got[exact] = np.fromfile(o, dtype="<f4").reshape(len(IDS), SPEC.vocab)
    assert om.rel_error(got[True], ref) < 1e-3, om.rel_error(got[True], ref)
    assert om.rel_error(got[False], ref) < 3e-2, om.rel_error(got[False], ref)
    # the int8 rounding moves the logits by ~1e-2 of their range; fp32 activations in another
    # summation order (the packed Q8_0 rows) by ~1e-7
    assert om.rel_error(got[False], got[True]) > 1e-4, om.rel_error(got[False], got[True])

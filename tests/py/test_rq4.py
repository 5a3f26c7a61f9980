"""RQ4, rawloop's own 4-bit weight type (docs/FORMATS.md, section RQ4).

Oracles, independent of the engine:
  - the block layout as docs/FORMATS.md documents it, decoded in numpy (rq4_dequant in
    rawloop_gguf.py), against `test_quant dequant RQ4` (the C reference decoder) on random
    blocks, and against the RQ4 blocks of a quantized model;
  - the minimal GGUF reader of rawloop_gguf.py (the gguf package refuses the file, which is
    tested), other types dequantized by gguf.quants;
  - transformers: a LlamaForCausalLM loaded with exactly those dequantized weights gives the
    logits `rawloop logits --exact` must reproduce within 1e-3 (the bound of test_oracle.py),
    and the 8-bit activation path within 3e-2.
"""
from __future__ import annotations

import numpy as np
import pytest

import gguf

import oracle_models as om
from conftest import run_rawloop
from rawloop_gguf import (RQ4_ID, block_dm, c_dequant, dequant_tensor, f32_source, hf_from_tensors,
                          random_dm_blocks, read_gguf, rq4_dequant, type_name)

# tied embeddings and hidden 256: the head rule gives token_embd (the head) Q6_K; ffn 320 is a
# multiple of 64 (RQ4's block) but not of 256
SPEC = om.Spec("rq4", "llama", hidden=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn=320,
               vocab=320, seed=13, tied=True)
IDS = [1] + [int(x) for x in np.random.default_rng(9).integers(3, SPEC.vocab, 15)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rq4")
    src = f32_source(d, SPEC)
    rq4, pure = d / "rq4.gguf", d / "rq4-pure.gguf"
    run_rawloop("quantize", src, rq4, "--type", "RQ4", "-t", 2)
    run_rawloop("quantize", src, pure, "--type", "RQ4", "--pure", "-t", 2)
    return {"src": src, "rq4": rq4, "pure": pure}


def logits(path, tmp_path, exact):
    out = tmp_path / "logits.bin"
    run_rawloop("logits", "-m", path, "--ids", " ".join(map(str, IDS)), "-o", out, *(["--exact"] if exact else []))
    return np.fromfile(out, dtype="<f4").reshape(len(IDS), SPEC.vocab)


def test_dequant_matches_numpy_layout(tmp_path):
    raw = random_dm_blocks(np.random.default_rng(4), 200, 36, (0.001, 0.05), (-0.4, 0.02))
    np.testing.assert_array_equal(c_dequant("RQ4", raw, tmp_path), rq4_dequant(raw))


def test_quantizer_error_bound():
    """Gaussian rows: relative RMS error of quantize->dequantize (numpy decode). On these rows
    (measured) Q4_0, at the same 4.5 bits per weight, gives 0.0858, RQ4 0.0846 (Q4_1 at 5.0
    bits 0.0780, Q4_K 0.0713); the grid of every block covers its values' span."""
    x = np.random.default_rng(6).standard_normal((64, 1024)).astype(np.float32)
    q = om.rawloop_quantize(x, "RQ4")
    assert q.shape == (64, 1024 // 64 * 36)
    y = rq4_dequant(q).reshape(x.shape)
    rel = float(np.sqrt(((y - x) ** 2).mean() / (x ** 2).mean()))
    assert rel < 0.0855, rel
    d, m = block_dm(q, 36)
    xb = x.reshape(-1, 64)
    assert (d > 0).all()
    # the least-squares refit may put an end level past the block's extreme value, by less than
    # half a step (measured: a third at most)
    assert (m >= xb.min(1) - d / 2).all() and (m + 15 * d <= xb.max(1) + d / 2).all()


def test_gguf_package_refuses(files):
    with pytest.raises(Exception):
        gguf.GGUFReader(str(files["rq4"]))


def test_file_types(files):
    """--type RQ4: every matrix RQ4 but the output head (here the tied token_embd), which takes
    llama.cpp's head rule as Q4_0 files do (Q6_K: its rows of 256 fit); --pure: all RQ4."""
    kvs, tensors = read_gguf(files["rq4"])
    got = {n: type_name(t) for n, (t, _, _) in tensors.items()}
    assert got.pop("token_embd.weight") == "Q6_K"
    assert all(v == ("F32" if "norm" in n else "RQ4") for n, v in got.items()), got
    assert kvs["general.file_type"][1] == 2048 and kvs["rawloop.format_version"][1] == 1
    _, tensors = read_gguf(files["pure"])
    assert {type_name(t) for n, (t, _, _) in tensors.items() if "norm" not in n} == {"RQ4"}


def test_file_blocks_equal_quantizer(files):
    """The RQ4 blocks in the file are rl_quant_row of the source rows (through test_quant)."""
    _, src = read_gguf(files["src"])
    _, q = read_gguf(files["rq4"])
    t, ne, raw = src["blk.1.ffn_down.weight"]
    want = om.rawloop_quantize(dequant_tensor(t, ne, raw), "RQ4")
    assert q["blk.1.ffn_down.weight"][0] == RQ4_ID
    np.testing.assert_array_equal(q["blk.1.ffn_down.weight"][2].reshape(want.shape), want)


@pytest.mark.parametrize("which", ["rq4", "pure"])
def test_logits_match_transformers(files, tmp_path, which):
    """rawloop on the RQ4 file vs transformers on its weights decoded from the documented layout:
    exact path within 1e-3, 8-bit activation path within 3e-2; the F32 source's logits are
    measurably different, so the decode is not trivially right."""
    _, tensors = read_gguf(files[which])
    ref = om.hf_logits(hf_from_tensors(tensors, SPEC), IDS)
    exact = logits(files[which], tmp_path, exact=True)
    fast = logits(files[which], tmp_path, exact=False)
    assert om.rel_error(exact, ref) < 1e-3, om.rel_error(exact, ref)
    assert om.rel_error(fast, ref) < 3e-2, om.rel_error(fast, ref)
    _, src = read_gguf(files["src"])
    assert om.rel_error(om.hf_logits(hf_from_tensors(src, SPEC), IDS), ref) > 1e-3

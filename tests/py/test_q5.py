"""Q5_0 / Q5_1 against independent oracles, and llama.cpp's fallback recipe on a real model.

(a) rawloop's quantizer gives the bytes of gguf.quants.quantize, and its reference dequantizer
    the values of gguf.quants.dequantize bit for bit (through build/test_quant's tool mode);
(b) the dequantizer also agrees with a decode of the block layout written out here in numpy (not
    the gguf package's), so a layout error shared by both C and gguf would still show;
(c) `rawloop quantize --type Q4_K_M / Q5_K_M` on the F16 draft model (rows of 128 and 352 values,
    which no 256-value K block fits) writes the types llama.cpp's llama-quant.cpp picks, written
    out here by hand: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and the tied output head Q8_0; the
    Q5 tensors are byte-identical to gguf.quants.quantize of the F16 values; and the file's
    perplexity stays close to the F16 model's."""
import re

import numpy as np
import pytest

from conftest import ROOT, run_quant_tool

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

MODELS = ROOT / "models"
F16 = MODELS / "rawloop-draft-f16.gguf"
HELDOUT = MODELS / "heldout.txt"
BLOCK = {"Q5_0": 22, "Q5_1": 24}




def layout_decode(raw, tname):
    """The documented block layout (docs/FORMATS.md), decoded in float32 as ggml does:
    Q5_0 [d f16][qh u32][qs 16]  value d * (q - 16);
    Q5_1 [d f16][m f16][qh u32][qs 16]  value d * q + m;
    q = nibble | fifth bit << 4, value j < 16 the low nibble of qs[j], j >= 16 the high nibble
    of qs[j - 16], fifth bit = bit j of qh."""
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, BLOCK[tname])
    d = b[:, 0:2].copy().view("<f2").astype(np.float32)
    off = 4 if tname == "Q5_1" else 2
    qh = b[:, off:off + 4].copy().view("<u4")[:, 0]
    qs = b[:, off + 4:off + 20]
    nib = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)
    high = ((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)
    q = nib | (high << 4)
    if tname == "Q5_0":
        return (d * (q - 16).astype(np.float32)).ravel()
    m = b[:, 2:4].copy().view("<f2").astype(np.float32)
    return (d * q.astype(np.float32) + m).ravel()


def random_blocks(tname, n, rng):
    raw = rng.integers(0, 256, (n, BLOCK[tname]), dtype=np.uint8)
    for off in ([0, 2] if tname == "Q5_1" else [0]):
        # finite scales of both signs, fp16 subnormals included
        s = (rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-7, 0, n)).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(n, 2)
    return raw.tobytes()


def bits_equal(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("tname", ["Q5_0", "Q5_1"])
def test_dequant_matches_gguf_and_layout(tname, tmp_path):
    data = random_blocks(tname, 8192, np.random.default_rng(5 + len(tname)))
    ours = np.frombuffer(run_quant_tool("dequant", tname, data, tmp_path), dtype=np.float32)
    ref = gguf.quants.dequantize(np.frombuffer(data, dtype=np.uint8), T[tname])
    ref = ref.astype(np.float32).ravel()
    assert bits_equal(ours, ref), f"{np.sum(ours != ref)} values differ from gguf"
    assert bits_equal(ours, layout_decode(data, tname))


# The quantizer's bytes against gguf.quants: tests/py/test_quant_oracle.py (test_quant_matches_gguf).


# ---- llama.cpp's fallbacks on the draft model --------------------------------------------------

N_LAYER = 4
MORE_BITS = {2, 3}   # llama.cpp's use_more_bits(i, 4): i >= 7*4/8 = 3, or (i - 0) % 3 == 2


def expected_type(name, qtype):
    """llama-quant.cpp for rows of 128 / 352 values (neither a multiple of 256): the tied
    output head (token_embd) is Q8_0 because ne[0] is not a multiple of the file type's block;
    attn_v / ffn_down of more_bits layers want Q6_K and fall back to Q8_0; everything else wants
    the base K type and falls back to Q5_0 (Q4_K) or Q5_1 (Q5_K)."""
    if name == "token_embd.weight":
        return T.Q8_0
    m = re.fullmatch(r"blk\.(\d+)\.(attn_v|ffn_down)\.weight", name)
    if m and int(m.group(1)) in MORE_BITS:
        return T.Q8_0
    return T.Q5_0 if qtype == "Q4_K_M" else T.Q5_1


FINAL = re.compile(rb"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def ppl(rawloop, model, *extra):
    p = rawloop("perplexity", "-m", model, "-f", HELDOUT, "--chunks", "8", "-c", "256", *extra)
    m = FINAL.search(p.stdout + p.stderr)
    assert m, (p.stdout + p.stderr)[-2000:]
    return float(m.group(1))


@pytest.mark.parametrize("qtype,tol", [("Q4_K_M", 0.02), ("Q5_K_M", 0.02)])
def test_draft_k_recipes_fall_back_like_llama_cpp(rawloop, tmp_path, qtype, tol):
    out = tmp_path / f"draft-{qtype}.gguf"
    p = rawloop("quantize", F16, out, "--type", qtype, "-t", "2")
    log = (p.stdout + p.stderr).decode(errors="replace")
    src = {t.name: t for t in gguf.GGUFReader(F16).tensors}
    ours = {t.name: t for t in gguf.GGUFReader(out).tensors}
    counts = {}
    for name, t in src.items():
        o = ours[name]
        if len(t.shape) < 2 or int(t.shape[1]) == 1:
            assert o.tensor_type == T.F32, name
            continue
        want = expected_type(name, qtype)
        assert o.tensor_type == want, f"{name}: {o.tensor_type.name}, want {want.name}\n{log}"
        counts[want.name] = counts.get(want.name, 0) + 1
        vals = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        ref = gguf.quants.quantize(vals.reshape(-1, int(t.shape[0])), want)
        assert np.asarray(o.data).tobytes() == ref.tobytes(), f"{name}: bytes differ from gguf"
    q5 = "Q5_0" if qtype == "Q4_K_M" else "Q5_1"
    assert counts == {"Q8_0": 5, q5: 24}, counts
    # the 5-bit fallbacks cost little against the F16 model (measured 2026-11-30, 8 chunks of
    # 256: Q4_K_M +0.16%, Q5_K_M +0.23%; the draft's Q4_0 file is +3.1%)
    base, q = ppl(rawloop, F16), ppl(rawloop, out)
    print(f"{qtype}: PPL {q:.3f} vs F16 {base:.3f} ({100 * (q / base - 1):+.2f}%)")
    assert abs(q / base - 1) < tol
    # the exact (fp32 activation) path agrees with the default int8 one
    qe = ppl(rawloop, out, "--exact")
    assert abs(qe / q - 1) < 0.01, (qe, q)

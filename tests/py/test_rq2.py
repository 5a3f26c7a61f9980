"""RQ2, rawloop's own 2-bit weight type, and `rawloop quantize --recipe FILE`.

Oracles, all independent of the engine:
  - the block layout as docs/FORMATS.md documents it, decoded in numpy (rq2_dequant in
    rawloop_gguf.py), against `test_quant dequant RQ2` (the C reference decoder) on random blocks, and against
    the RQ2 blocks of a quantized model;
  - a minimal GGUF reader (rawloop_gguf.py; the gguf package refuses the file, which is
    tested), so the tensors of a recipe-mixed file are read without rawloop; other types are dequantized by
    gguf.quants;
  - transformers: a LlamaForCausalLM loaded with exactly those dequantized weights gives the
    logits `rawloop logits --exact` must reproduce within 1e-3 (the bound of test_oracle.py).
Also the file-format rule (rawloop.format_version) and the recipe errors.
"""
from __future__ import annotations

import re
import struct

import numpy as np
import pytest

import gguf

import oracle_models as om
from conftest import run_rawloop
from rawloop_gguf import (KEY, block_dm, c_dequant, dequant_tensor, f32_source, hf_from_tensors,
                          random_dm_blocks, read_gguf, rq2_dequant, type_name)

# Dimensions all multiples of 64 (RQ2's block); hidden 256 fits Q4_K, ffn 320 does not, so a
# Q4_K rule on ffn_down must fall back (to Q5_0, as llama.cpp) and say so.
SPEC = om.Spec("rq2_mix", "llama", hidden=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn=320,
               vocab=320, seed=11)
IDS = [1] + [int(x) for x in np.random.default_rng(7).integers(3, SPEC.vocab, 15)]

RECIPE = """\
# a mix of every kind of rule
blk.*.ffn_gate.weight   RQ2
blk.*.ffn_up.weight     rq2        # type names are case-insensitive
blk.*.ffn_down.weight   Q4_K       # rows of 320 values: falls back to Q5_0
blk.?.attn_q.weight     Q4_K
blk.*.attn_k.weight     Q4_0
blk.*.attn_*.weight     Q8_0
output.weight           Q6_K

*                       F16
"""
EXPECT = {"ffn_gate": "RQ2", "ffn_up": "RQ2", "ffn_down": "Q5_0", "attn_q": "Q4_K",
          "attn_k": "Q4_0", "attn_v": "Q8_0", "attn_output": "Q8_0"}


def logits(path, tmp_path, exact):
    out = tmp_path / "logits.bin"
    args = ["logits", "-m", path, "--ids", " ".join(map(str, IDS)), "-o", out]
    run_rawloop(*args, *(["--exact"] if exact else []))
    return np.fromfile(out, dtype="<f4").reshape(len(IDS), SPEC.vocab)


# ---- fixtures -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rq2")
    src = f32_source(d, SPEC)
    recipe = d / "mix.recipe"
    recipe.write_text(RECIPE)
    mix = d / "mix.gguf"
    p = run_rawloop("quantize", src, mix, "--recipe", recipe, "-t", 2)
    pure = d / "rq2.gguf"
    run_rawloop("quantize", src, pure, "--type", "RQ2", "-t", 2)
    return {"dir": d, "src": src, "mix": mix, "pure": pure, "recipe": recipe,
            "log": p.stderr.decode()}


# ---- block layout ----------------------------------------------------------------------------------

def test_dequant_matches_numpy_layout(tmp_path):
    raw = random_dm_blocks(np.random.default_rng(3), 200, 20, (0.001, 0.05), (-0.08, 0.02))
    np.testing.assert_array_equal(c_dequant("RQ2", raw, tmp_path), rq2_dequant(raw))


def test_quantizer_error_bound(tmp_path):
    """Gaussian rows: relative RMS error of quantize->dequantize (numpy decode). An optimal
    uniform 4-level quantizer of a Gaussian has ~0.34 with the range known; per-block min/max
    alone gives ~0.43 here; our search measures ~0.31."""
    x = np.random.default_rng(5).standard_normal((64, 1024)).astype(np.float32)
    q = om.rawloop_quantize(x, "RQ2")
    assert q.shape == (64, 1024 // 64 * 20)
    y = rq2_dequant(q).reshape(x.shape)
    rel = float(np.sqrt(((y - x) ** 2).mean() / (x ** 2).mean()))
    assert rel < 0.33, rel
    # each block's grid covers a sane range: d >= 0 and levels within the block's span
    d, m = block_dm(q, 20)
    xb = x.reshape(-1, 64)
    assert (d > 0).all()
    assert (m >= xb.min(1) - 1e-3).all() and (m + 3 * d <= xb.max(1) + 1e-3).all()


# ---- the file rule --------------------------------------------------------------------------------

def test_gguf_package_refuses(files):
    with pytest.raises(Exception):
        gguf.GGUFReader(str(files["mix"]))


def _patched(files, tmp_path, name, fn):
    data = bytearray(files["mix"].read_bytes())
    fn(data)
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def test_format_version_rule(files, tmp_path):
    kvs, _ = read_gguf(files["mix"])
    t, v, off = kvs[KEY]
    assert (t, v) == (4, 1)
    key_at = bytes(files["mix"].read_bytes()).index(KEY.encode())

    def refuse(path, msg):
        p = run_rawloop("logits", "-m", path, "--ids", "1 2", "-o", tmp_path / "l.bin",
                        check=False)
        err = p.stderr.decode()
        assert p.returncode == 1 and re.search(msg, err), err

    def rename(d):
        d[key_at + len(KEY) - 1:key_at + len(KEY)] = b"X"
    refuse(_patched(files, tmp_path, "nokey.gguf", rename),
           r"^rawloop: .*rawloop's own type RQ2, but the file lacks the key "
           r"'rawloop.format_version'")

    def v2(d):
        struct.pack_into("<I", d, off, 2)
    refuse(_patched(files, tmp_path, "v2.gguf", v2),
           r"'rawloop.format_version' is 2; this build reads rawloop format version 1")

    def v0(d):
        struct.pack_into("<I", d, off, 0)
    refuse(_patched(files, tmp_path, "v0.gguf", v0), r"'rawloop.format_version' is 0")

    def i32(d):
        struct.pack_into("<I", d, off - 4, 5)
    refuse(_patched(files, tmp_path, "i32.gguf", i32),
           r"'rawloop.format_version' must be UINT32, found INT32")

    def unknown_id(d):
        # the first RQ2 tensor's type id -> 2047: in rawloop's range, unknown to this build
        tinfo = bytes(d).index(b"blk.0.ffn_gate.weight") + len("blk.0.ffn_gate.weight")
        nd = struct.unpack_from("<I", d, tinfo)[0]
        struct.pack_into("<I", d, tinfo + 4 + 8 * nd, 2047)
    refuse(_patched(files, tmp_path, "id.gguf", unknown_id), r"rawloop type id 2047 is unknown")
    # the untouched file loads
    run_rawloop("logits", "-m", files["mix"], "--ids", "1 2", "-o", tmp_path / "l.bin")


def test_no_key_without_rawloop_types(files, tmp_path):
    out = tmp_path / "q8.gguf"
    run_rawloop("quantize", files["src"], out, "--type", "Q8_0")
    assert KEY not in read_gguf(out)[0]
    gguf.GGUFReader(str(out))   # an ordinary file stays readable by the gguf package


# ---- recipes ---------------------------------------------------------------------------------------

def test_recipe_types_and_note(files):
    kvs, tensors = read_gguf(files["mix"])
    got = {n: type_name(t) for n, (t, _, _) in tensors.items()}
    for i in range(SPEC.n_layers):
        for k, want in EXPECT.items():
            assert got[f"blk.{i}.{k}.weight"] == want, (k, got)
        assert got[f"blk.{i}.attn_norm.weight"] == "F32"
    assert got["output.weight"] == "Q6_K" and got["token_embd.weight"] == "F16"
    assert got["output_norm.weight"] == "F32"
    assert kvs["general.file_type"][1] == 2048   # rawloop's own file type number
    log = files["log"]
    assert re.search(r"note: 2 matrices in Q5_0 instead of Q4_K: rows of 320 values are not a "
                     r"multiple of its 256-value block \(first: blk\.0\.ffn_down\.weight\)", log), log


def test_committed_mixed_recipe(files, tmp_path):
    """bench/mix-2.8bpw.recipe, the file PERF.md's mixed 7B figures were quantized with, gives the
    types it documents: attn_output and the head RQ4, token_embd Q8_0, every other matrix RQ2."""
    import pathlib
    recipe = pathlib.Path(__file__).resolve().parents[2] / "bench" / "mix-2.8bpw.recipe"
    out = tmp_path / "mix28.gguf"
    run_rawloop("quantize", files["src"], out, "--recipe", recipe, "-t", 2)
    _, tensors = read_gguf(out)
    got = {n: type_name(t) for n, (t, _, _) in tensors.items()}
    for n, v in got.items():
        want = ("F32" if "norm" in n else "RQ4" if n.endswith("attn_output.weight") or n == "output.weight"
                else "Q8_0" if n == "token_embd.weight" else "RQ2")
        assert v == want, (n, v, want)
    assert got["output.weight"] == "RQ4" and got["blk.1.ffn_down.weight"] == "RQ2"


def test_pure_type(files):
    _, tensors = read_gguf(files["pure"])
    got = {n: type_name(t) for n, (t, _, _) in tensors.items()}
    assert got["token_embd.weight"] == "Q8_0"
    assert all(v == "RQ2" for n, v in got.items()
               if n.endswith(".weight") and "norm" not in n and n != "token_embd.weight"), got
    assert all(v == "F32" for n, v in got.items() if "norm" in n)


def test_pure_flag_puts_token_embd_in_rq2(files, tmp_path):
    out = tmp_path / "pure.gguf"
    run_rawloop("quantize", files["src"], out, "--type", "RQ2", "--pure")
    _, tensors = read_gguf(out)
    assert type_name(tensors["token_embd.weight"][0]) == "RQ2"


def test_file_blocks_equal_quantizer(files):
    """The RQ2 blocks in the file are rl_quant_row of the source rows (through test_quant)."""
    _, src = read_gguf(files["src"])
    _, mix = read_gguf(files["mix"])
    t, ne, raw = src["blk.1.ffn_up.weight"]
    rows = dequant_tensor(t, ne, raw)
    want = om.rawloop_quantize(rows, "RQ2")
    np.testing.assert_array_equal(mix["blk.1.ffn_up.weight"][2].reshape(want.shape), want)


def test_recipe_errors(files, tmp_path):
    out = tmp_path / "out.gguf"

    def fails(text, msg, code=1, extra=()):
        r = tmp_path / "r.txt"
        if text is not None:
            r.write_text(text)
        p = run_rawloop("quantize", files["src"], out, "--recipe", r, *extra, check=False)
        err = p.stderr.decode()
        assert p.returncode == code and re.search(msg, err), err
        assert not out.exists() and not (tmp_path / "out.gguf.tmp").exists()
        if text is not None:
            r.unlink()

    fails(None, r"^rawloop: quantize: .*r\.txt: cannot open recipe: No such file")
    fails("blk.*.ffn_up.weight Q4_K\n\n* Q3_K\n",
          r"^rawloop: quantize: .*r\.txt:3: unknown tensor type 'Q3_K' \(known: .*RQ2")
    fails("# comment\n* Q8_0 extra\n", r"r\.txt:2: expected 'PATTERN TYPE', found 3 fields")
    fails("Q8_0\n", r"r\.txt:1: expected 'PATTERN TYPE', found 1 field\b")
    fails("# nothing\n\n", r"r\.txt: no rules")
    fails("output.weight Q8_0\n", r"no rule matches tensor 'token_embd.weight'")
    fails("* Q8_0\n", r"--type or --recipe, not both", code=2, extra=("--type", "Q8_0"))
    fails("* Q8_0\n", r"--pure applies to --type only", code=2, extra=("--pure",))


# ---- end to end --------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["mix", "pure"])
def test_logits_match_transformers(files, tmp_path, which):
    """rawloop on the quantized file vs transformers on its weights decoded from the documented
    layouts: exact path within test_oracle's 1e-3, 8-bit activation path within its 3e-2."""
    _, tensors = read_gguf(files[which])
    ref = om.hf_logits(hf_from_tensors(tensors, SPEC), IDS)
    exact = logits(files[which], tmp_path, exact=True)
    fast = logits(files[which], tmp_path, exact=False)
    assert om.rel_error(exact, ref) < 1e-3, om.rel_error(exact, ref)
    assert om.rel_error(fast, ref) < 3e-2, om.rel_error(fast, ref)
    # the decode is not trivially right: the F32 source's logits are measurably different
    _, src = read_gguf(files["src"])
    assert om.rel_error(om.hf_logits(hf_from_tensors(src, SPEC), IDS), ref) > 1e-2

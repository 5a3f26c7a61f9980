"""`rawloop quantize` against independent oracles.

(a) Q8_0 / Q4_0 output is byte-identical to gguf.quants.quantize run here on the F16 file's
    values, tensor by tensor (read back with gguf.GGUFReader); in the Q4_0 file the tied output
    head (token_embd) is Q8_0, as llama.cpp makes it; the committed Q8_0 draft (made by
    gguf.quants from the float32 training weights, not from the F16 file) differs from it by at
    most 1.25 quantization steps per weight.
(b) K-quant files of a synthetic model whose rows fit 256-value blocks load in gguf.GGUFReader,
    carry the recipe's tensor types (written out here from llama.cpp's rules, not computed with
    rawloop's), keep every kv, and dequantize with gguf.quants.dequantize to within a measured
    error of the source; the one tensor no K block fits takes llama.cpp's fallback type
    (Q5_0 / Q5_1 / Q8_0), byte-identical to gguf.quants.quantize.
(c) perplexity of the quantized draft model against the F16 file's.
(d) bad input: exit code, message, and no OUT or OUT.tmp left behind."""
import os
import re

import numpy as np
import pytest

from conftest import ROOT

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

MODELS = ROOT / "models"
F16 = MODELS / "rawloop-draft-f16.gguf"
Q8REF = MODELS / "rawloop-draft.gguf"
HELDOUT = MODELS / "heldout.txt"


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def values(t):
    """A tensor's values as float32, shape (rows, ne[0])."""
    a = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
    return a.reshape(-1, int(t.shape[0]))


def quantize(rawloop, src, dst, qtype, *extra):
    p = rawloop("quantize", src, dst, "--type", qtype, *extra)
    assert dst.exists() and not (dst.parent / (dst.name + ".tmp")).exists()
    return p


# ---- (a) byte identity ------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1"])
def test_bytes_match_gguf_package(rawloop, tmp_path, qtype):
    out = tmp_path / f"draft-{qtype}.gguf"
    quantize(rawloop, F16, out, qtype)
    src, ours = tensors(F16), tensors(out)
    assert list(src) == list(ours), "tensor order must be kept"
    n2d = 0
    for name, t in src.items():
        o = ours[name]
        assert list(o.shape) == list(t.shape), name
        if len(t.shape) < 2 or int(t.shape[1]) == 1:
            # norms: stay F32, values unchanged
            assert o.tensor_type == T.F32, name
            assert np.array_equal(values(o), values(t)), name
            continue
        n2d += 1
        # llama.cpp's output rule: the head (tied: token_embd) wants Q6_K, whose 256-value block
        # a 128-value row cannot hold, so it falls back to Q8_0; the Q8_0 file keeps Q8_0
        wt = T.Q8_0 if name == "token_embd.weight" else T[qtype]
        assert o.tensor_type == wt, name
        want = gguf.quants.quantize(values(t), wt)
        assert np.asarray(o.data).tobytes() == want.tobytes(), f"{name}: bytes differ from gguf"
    assert n2d == 29


def test_q8_0_close_to_committed_draft(rawloop, tmp_path):
    """The committed Q8_0 file was quantized from the float32 weights; ours from their F16
    rounding, so about half of the blocks differ in some byte (mostly the fp16 scale). Every
    weight must still agree to within 1.25 steps of its block's scale (measured worst: 1.11)."""
    out = tmp_path / "draft-Q8_0.gguf"
    quantize(rawloop, F16, out, "Q8_0")
    ref, ours = tensors(Q8REF), tensors(out)
    for name, r in ref.items():
        if r.tensor_type != T.Q8_0:
            continue
        o = ours[name]
        assert o.tensor_type == T.Q8_0
        a, b = values(o), values(r)
        scale = np.abs(b).reshape(-1, 32).max(axis=1) / 127
        err = np.abs(a - b).reshape(-1, 32).max(axis=1)
        assert np.all(err <= 1.25 * scale + 1e-9), name


def test_copies_kvs_and_sets_file_type(rawloop, tmp_path):
    out = tmp_path / "draft-Q4_0.gguf"
    quantize(rawloop, F16, out, "Q4_0")
    a, b = gguf.GGUFReader(F16), gguf.GGUFReader(out)
    fa = {k: f for k, f in a.fields.items() if not k.startswith("GGUF.")}
    fb = {k: f for k, f in b.fields.items() if not k.startswith("GGUF.")}
    assert set(fb) == set(fa) | {"general.quantization_version"}
    for k, f in fa.items():
        if k == "general.file_type":
            continue
        assert f.types == fb[k].types, k
        assert [bytes(f.parts[i]) for i in f.data] == [bytes(fb[k].parts[i]) for i in fb[k].data], k
    assert int(fb["general.file_type"].parts[-1][0]) == 2  # llama_ftype MOSTLY_Q4_0
    assert int(fb["general.quantization_version"].parts[-1][0]) == 2


def test_quantized_input_of_the_target_type_is_copied(rawloop, tmp_path):
    out = tmp_path / "copy.gguf"
    quantize(rawloop, Q8REF, out, "Q8_0")
    ref, ours = tensors(Q8REF), tensors(out)
    for name, r in ref.items():
        assert np.asarray(ours[name].data).tobytes() == np.asarray(r.data).tobytes(), name


# ---- (b) K-quants on a synthetic model --------------------------------------------------------

N_LAYER = 8
# llama.cpp's use_more_bits for 8 layers: first 8/8 = 1, last from 7, every third from 1 + 2
MORE_BITS = {0, 3, 6, 7}
EMBD, FF, VOCAB = 256, 512, 384


def synthetic_model(path):
    """A llama-shaped F32/F16/BF16 model whose rows are multiples of 256, plus one tensor of row
    length 96 that no K-quant fits. Weights are Student-t (heavy-tailed like trained weights),
    with per-row scales."""
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(N_LAYER)
    w.add_embedding_length(EMBD)
    w.add_feed_forward_length(FF)
    w.add_head_count(4)
    w.add_context_length(128)
    w.add_file_type(1)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(VOCAB)])
    src = {}

    def mat(name, cols, rows, dtype):
        a = (rng.standard_t(5, (rows, cols)) * 0.02 *
             rng.uniform(0.5, 2.0, (rows, 1))).astype(np.float32)
        if dtype == "F32":
            w.add_tensor(name, a)
        elif dtype == "F16":
            a = a.astype(np.float16).astype(np.float32)
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, T.BF16)
            a = gguf.quants.dequantize(q, T.BF16).astype(np.float32).reshape(rows, cols)
            w.add_tensor(name, q, raw_dtype=T.BF16)
        src[name] = a

    mat("token_embd.weight", EMBD, VOCAB, "F16")
    w.add_tensor("output_norm.weight", np.ones(EMBD, np.float32))
    mat("output.weight", EMBD, VOCAB, "BF16")
    dtypes = ["F32", "F16", "BF16"]
    for l in range(N_LAYER):
        w.add_tensor(f"blk.{l}.attn_norm.weight", np.ones(EMBD, np.float32))
        for i, (n, c, r) in enumerate([("attn_q", EMBD, EMBD), ("attn_k", EMBD, EMBD),
                                       ("attn_v", EMBD, EMBD), ("attn_output", EMBD, EMBD),
                                       ("ffn_gate", EMBD, FF), ("ffn_up", EMBD, FF),
                                       ("ffn_down", FF, EMBD)]):
            mat(f"blk.{l}.{n}.weight", c, r, dtypes[(l + i) % 3])
        w.add_tensor(f"blk.{l}.ffn_norm.weight", np.ones(EMBD, np.float32))
    mat("odd.weight", 96, 16, "F32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return src


def expected_type(name, qtype):
    """llama.cpp's recipe (llama-quant.cpp), written out independently of src/recipe.c."""
    base = {"Q4_K_M": T.Q4_K, "Q5_K_M": T.Q5_K, "Q6_K": T.Q6_K, "Q4_K": T.Q4_K}[qtype]
    if name == "odd.weight":
        # 96 is not a multiple of 256: tensor_type_fallback's Q4_K -> Q5_0, Q5_K -> Q5_1,
        # Q6_K -> Q8_0
        return {T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}[base]
    if name == "output.weight":
        return T.Q6_K  # every quantized file type but Q8_0 (Q4_K is llama.cpp's Q4_K_S)
    if not qtype.endswith("_M"):
        return base
    m = re.fullmatch(r"blk\.(\d+)\.(attn_v|ffn_down)\.weight", name)
    if m and int(m.group(1)) in MORE_BITS:
        return T.Q6_K
    return base


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    path = tmp_path_factory.mktemp("synth") / "synth-f32.gguf"
    return path, synthetic_model(path)


# Relative RMS error bounds, measured 2026-11-30 on this generator: Q4_K 0.086, Q5_K 0.043,
# Q6_K 0.022, Q8_0 0.0068 (worst tensor).
REL_RMS = {T.Q4_K: 0.10, T.Q5_K: 0.05, T.Q6_K: 0.026, T.Q8_0: 0.008, T.Q5_0: 0.06, T.Q5_1: 0.06}


def naive(x, qtype):
    """Plain rounding with exact float scales, the baseline a K-quant search must not lose to:
    Q4_K/Q5_K asymmetric (min <= 0) over 32 values, Q6_K symmetric over 16, Q8_0 over 32.
    Q5_0 / Q5_1 have no search (ggml's reference quantizers): their baseline is
    gguf.quants' own round trip, which the test also requires byte for byte."""
    if qtype in (T.Q5_0, T.Q5_1):
        q = gguf.quants.quantize(x, qtype)
        return gguf.quants.dequantize(q, qtype).astype(np.float32).reshape(x.shape)
    if qtype in (T.Q4_K, T.Q5_K):
        qmax = 15 if qtype == T.Q4_K else 31
        b = x.reshape(-1, 32)
        lo, hi = np.minimum(b.min(1, keepdims=True), 0), b.max(1, keepdims=True)
        s = np.where(hi > lo, (hi - lo) / qmax, 1)
        return (np.clip(np.round((b - lo) / s), 0, qmax) * s + lo).reshape(x.shape)
    g, qmax = (16, 31) if qtype == T.Q6_K else (32, 127)
    b = x.reshape(-1, g)
    s = np.abs(b).max(1, keepdims=True) / qmax
    s = np.where(s > 0, s, 1)
    return (np.clip(np.round(b / s), -qmax - 1, qmax) * s).reshape(x.shape)


@pytest.mark.parametrize("qtype", ["Q4_K_M", "Q5_K_M", "Q6_K", "Q4_K"])
def test_k_quants_types_and_error(rawloop, synth, tmp_path, qtype):
    path, src = synth
    out = tmp_path / f"synth-{qtype}.gguf"
    quantize(rawloop, path, out, qtype, "-t", "2")
    ours = tensors(out)
    assert set(ours) == set(src) | {n for n in ours if n.endswith("norm.weight")}
    worst = {}
    for name, t in ours.items():
        if name.endswith("norm.weight"):
            assert t.tensor_type == T.F32
            assert np.all(values(t) == 1.0)
            continue
        want = expected_type(name, qtype)
        assert t.tensor_type == want, f"{name}: {t.tensor_type.name}, want {want.name}"
        a, ref = values(t), src[name]
        if want in (T.Q5_0, T.Q5_1, T.Q8_0):
            assert np.asarray(t.data).tobytes() == gguf.quants.quantize(ref, want).tobytes(), name
        rel = float(np.sqrt(np.mean((a - ref) ** 2) / np.mean(ref ** 2)))
        base = float(np.sqrt(np.mean((naive(ref, want) - ref) ** 2) / np.mean(ref ** 2)))
        worst[want] = max(worst.get(want, 0.0), rel)
        assert rel < REL_RMS[want], f"{name} {want.name}: relative RMS error {rel:.4f}"
        # 6-bit sub-block scales cost a little; the rounding search must more than win it back
        assert rel < 1.01 * base, f"{name} {want.name}: {rel:.4f} vs plain rounding {base:.4f}"
    print(qtype, {k.name: round(v, 4) for k, v in worst.items()})


def test_pure_disables_the_mix(rawloop, synth, tmp_path):
    path, _ = synth
    out = tmp_path / "pure.gguf"
    quantize(rawloop, path, out, "Q4_K_M", "--pure")
    for name, t in tensors(out).items():
        if not name.endswith("norm.weight"):
            # --pure skips the mix, not llama.cpp's row-length fallback (Q4_K -> Q5_0)
            assert t.tensor_type == (T.Q5_0 if name == "odd.weight" else T.Q4_K), name


# ---- (c) perplexity ---------------------------------------------------------------------------

FINAL = re.compile(rb"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def model_80(path, n_head_kv, arch="llama"):
    """An 80-layer model at toy width (llama.cpp types llama with 80 layers and GQA, and qwen2
    with 80 layers, as its 70B): rows of 256 values, F16."""
    rng = np.random.default_rng(3)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(80)
    w.add_embedding_length(256)
    w.add_feed_forward_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(n_head_kv)
    w.add_context_length(128)
    w.add_file_type(1)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(64)])

    def mat(name, rows):
        w.add_tensor(name, (rng.standard_normal((rows, 256)) * 0.02).astype(np.float16))

    mat("token_embd.weight", 64)
    kv = 64 * n_head_kv
    for l in range(80):
        w.add_tensor(f"blk.{l}.attn_norm.weight", np.ones(256, np.float32))
        for n, r in [("attn_q", 256), ("attn_k", kv), ("attn_v", kv), ("attn_output", 256),
                     ("ffn_gate", 256), ("ffn_up", 256), ("ffn_down", 256)]:
            mat(f"blk.{l}.{n}.weight", r)
        w.add_tensor(f"blk.{l}.ffn_norm.weight", np.ones(256, np.float32))
    w.add_tensor("output_norm.weight", np.ones(256, np.float32))
    mat("output.weight", 64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# use_more_bits for 80 layers, by hand: 0-9, 70-79, and 12, 15, ..., 69 between
MORE_80 = set(range(10)) | set(range(70, 80)) | set(range(12, 70, 3))


@pytest.mark.slow
@pytest.mark.parametrize("arch,n_head_kv,is_70b", [("llama", 1, True), ("llama", 4, False),
                                                   ("qwen2", 4, True)])
def test_70b_attn_v_rule(rawloop, tmp_path, arch, n_head_kv, is_70b):
    """llama.cpp's LLM_TYPE_70B rule (llama-quant.cpp): attn_v that Q4_K_M / Q4_K_S would write
    as Q4_K is Q5_K; llama with 80 layers and no GQA is its 65B, which keeps Q4_K. Session 12
    compared both recipes on such a file with llama-quantize d32676d77 (docs/FORMATS.md, rule 4):
    all 723 tensors the same types and bytes."""
    src = tmp_path / "m80.gguf"
    model_80(src, n_head_kv, arch)
    for qtype in ["Q4_K_M", "Q4_K_S"]:
        out = tmp_path / f"m80-{qtype}.gguf"
        quantize(rawloop, src, out, qtype, "-t", "2")
        ours = tensors(out)
        for l in range(80):
            got = ours[f"blk.{l}.attn_v.weight"].tensor_type
            if qtype == "Q4_K_M":
                want = T.Q6_K if l in MORE_80 else T.Q5_K if is_70b else T.Q4_K
            else:
                want = T.Q5_K if l < 4 or is_70b else T.Q4_K
            assert got == want, (arch, n_head_kv, qtype, l, got.name, want.name)
            assert ours[f"blk.{l}.attn_k.weight"].tensor_type == T.Q4_K
        down = [ours[f"blk.{l}.ffn_down.weight"].tensor_type for l in range(80)]
        if qtype == "Q4_K_M":
            assert down == [T.Q6_K if l in MORE_80 else T.Q4_K for l in range(80)]
        else:
            assert down == [T.Q5_K if l < 10 else T.Q4_K for l in range(80)]
        out.unlink()


def ppl(rawloop, model):
    p = rawloop("perplexity", "-m", model, "-f", HELDOUT, "--chunks", "8", "-c", "256")
    m = FINAL.search(p.stdout + p.stderr)
    assert m, (p.stdout + p.stderr)[-2000:]
    return float(m.group(1))


@pytest.mark.parametrize("qtype,tol", [("Q8_0", 0.005), ("Q4_K_M", 0.05), ("Q4_0", 0.10), ("Q4_1", 0.10)])
def test_perplexity_of_quantized_draft(rawloop, tmp_path, qtype, tol):
    # On the draft every row is 128 or 352 values long, so no K block fits: Q4_K_M's Q4_K
    # tensors fall back to Q5_0 and its Q6_K ones (and the tied head) to Q8_0, as in llama.cpp
    # (docs/FORMATS.md); Q4_0 is the one 4-bit type this model can hold (its head is Q8_0).
    out = tmp_path / f"draft-{qtype}.gguf"
    quantize(rawloop, F16, out, qtype)
    base, q = ppl(rawloop, F16), ppl(rawloop, out)
    print(f"{qtype}: PPL {q:.3f} vs F16 {base:.3f} ({100 * (q / base - 1):+.2f}%)")
    assert abs(q / base - 1) < tol


# ---- (d) errors -------------------------------------------------------------------------------

def leftovers(d):
    return sorted(p.name for p in d.iterdir())


def test_errors(rawloop, tmp_path):
    out = tmp_path / "out.gguf"

    def fails(*args, code=1, msg=None):
        before = leftovers(tmp_path)
        p = rawloop("quantize", *args, check=False)
        err = p.stderr.decode(errors="replace")
        assert p.returncode == code, f"{args}: rc {p.returncode}\n{err}"
        if msg:
            assert re.search(msg, err), f"{args}: {err}"
        assert leftovers(tmp_path) == before, f"{args} left files behind"
        assert not out.exists() and not (tmp_path / "out.gguf.tmp").exists()
        return err

    fails(tmp_path / "missing.gguf", out, "--type", "Q8_0", msg=r"^rawloop: .*missing\.gguf")
    notgguf = tmp_path / "text.gguf"
    notgguf.write_bytes(b"hello, this is not a GGUF file at all" * 4)
    fails(notgguf, out, "--type", "Q8_0", msg=r"rawloop: .*text\.gguf")
    fails(Q8REF, out, "--type", "Q4_0",
          msg=r"requantizing from Q8_0 is not supported; give an F32/F16/BF16 file")
    fails(F16, out, "--type", "Q3_K", code=2, msg=r"unknown type 'Q3_K'")
    fails(F16, out, code=2, msg=r"usage: rawloop quantize")
    fails(F16, code=2, msg=r"usage")
    fails(F16, out, "--type", "Q8_0", "-t", "0", code=2, msg=r"-t expects")
    fails(F16, tmp_path / "no" / "such" / "dir.gguf", "--type", "Q8_0", msg=r"cannot create")
    fails(F16, F16, "--type", "Q8_0", msg=r"same file")
    link = tmp_path / "link.gguf"
    os.symlink(F16, link)
    fails(F16, link, "--type", "Q8_0", msg=r"same file")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        fails(F16, ro / "x.gguf", "--type", "Q8_0", msg=r"cannot create")


def quantize_poked(rawloop, tmp_path, name, r, c, value, qtype):
    """Quantizes a copy of the F16 model whose tensor `name` holds value (a numpy scalar of the
    tensor's type) at [r, c]; it must fail with exit 1 and leave neither OUT nor OUT.tmp.
    Returns stderr."""
    src = tmp_path / "bad.gguf"
    src.write_bytes(F16.read_bytes())
    t = tensors(src)[name]
    cols = int(t.shape[0])
    with open(src, "r+b") as f:
        f.seek(t.data_offset + (r * cols + c) * value.itemsize)
        f.write(value.tobytes())
    out = tmp_path / "out.gguf"
    p = rawloop("quantize", src, out, "--type", qtype, check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert not out.exists() and not (tmp_path / "out.gguf.tmp").exists()
    return err


@pytest.mark.parametrize("bits,word", [(0x7E00, "a NaN"), (0x7C00, "+infinity"),
                                       (0xFC00, "-infinity")])
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K_M"])
def test_nonfinite_weight_is_refused(rawloop, tmp_path, bits, word, qtype):
    """One NaN or infinity in an F16 weight: a clear error naming it, nothing left behind
    (its rounding to an integer code would be undefined)."""
    err = quantize_poked(rawloop, tmp_path, "blk.1.ffn_up.weight", 3, 17, np.uint16(bits), qtype)
    assert f"tensor 'blk.1.ffn_up.weight' holds {word} at [3, 17]: a weight must be finite" in err, err


@pytest.mark.parametrize("name,dtype,r,c,value,word,qtype", [
    ("blk.0.attn_norm.weight", np.float32, 0, 5, np.nan, "a NaN", "Q8_0"),       # F32, kept F32
    ("blk.1.ffn_up.weight", np.float16, 3, 17, np.inf, "+infinity", "F16"),     # F16, copied
    ("token_embd.weight", np.float16, 7, 2, -np.inf, "-infinity", "F16"),
])
def test_nonfinite_copied_tensor_is_refused(rawloop, tmp_path, name, dtype, r, c, value, word, qtype):
    """A tensor written as it is (its type kept) is checked too: a NaN norm weight would make
    every logit NaN. The message drops 'to be quantized', since it is not."""
    err = quantize_poked(rawloop, tmp_path, name, r, c, dtype(value), qtype)
    assert f"tensor '{name}' holds {word} at [{r}, {c}]: a weight must be finite\n" in err, err


def test_copied_tensors_are_unchanged(rawloop, tmp_path):
    """--type F16 of an F16 file copies every matrix (and the F32 norms) byte for byte: the
    check reads them and writes nothing of its own."""
    out = tmp_path / "same.gguf"
    rawloop("quantize", F16, out, "--type", "F16")
    a, b = tensors(F16), tensors(out)
    assert a.keys() == b.keys()
    for n in a:
        assert a[n].tensor_type == b[n].tensor_type, n
        assert np.asarray(a[n].data).tobytes() == np.asarray(b[n].data).tobytes(), n


def test_help_names_the_limits(rawloop):
    p = rawloop("quantize", "--help")
    text = p.stdout.decode()
    assert "safetensors" in text and "Q4_K_M" in text and "--pure" in text

"""`rawloop quantize DIR OUT` on Hugging Face model directories, against independent oracles.

Tiny seeded random models (oracle_models.SPECS: llama MHA; llama GQA + tied output + llama3 rope
scaling; qwen2 with q/k/v bias; qwen3 with q/k norm and explicit head_dim) are saved with
transformers' save_pretrained (safetensors; llama_mha forced into several shards + index), with
a byte-level BPE tokenizer.json trained here with the `tokenizers` library (llama3 regex for
llama, qwen2 regex for qwen) and, for one llama, a SentencePiece tokenizer.model trained with
`sentencepiece`. Then:
  - F32: `rawloop logits` against the HF model itself, rel err <= 1e-4 with --kv-type f32
    (oracle_models.rel_error, as test_oracle.py), and every tensor equal to the one the test
    suite's own Python mirror of convert_hf_to_gguf (oracle_models.write_gguf: names, Q/K
    permutation, rope_freqs) writes;
  - F16 / Q8_0: each matrix as gguf.GGUFReader reads it equals numpy's float16 rounding /
    gguf.quants.quantize of the same (permuted) HF weights, byte for byte;
  - metadata read back with gguf.GGUFReader (keys, tokenizer arrays, bos/eos/add_bos);
  - `rawloop tokenize --ids` equals the HF tokenizer (and sentencepiece) on a few strings;
  - bad input (missing shard, corrupt safetensors header, unknown dtype, shape mismatch, missing
    config key, unsupported architecture): exit 1, one message naming the problem, no OUT and
    no OUT.tmp left behind."""
import copy
import json
import shutil
import struct

import numpy as np
import pytest

from conftest import ROOT

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
import oracle_models as om  # noqa: E402

BOS, EOS = "<|bos|>", "<|eos|>"
RE_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
RE_QWEN2 = RE_LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
TEXTS = ["Hello world! It's 2024, isn't it?", "  two  spaces\n\nand\tTABS 1234567 don't",
         "ROMEO: What, ho! apothecary!\nÜnïcödé — 日本語 ok", "x"]
SHARDED = "llama_mha"


def corpus():
    return (ROOT / "models" / "heldout.txt").read_text(encoding="utf-8")[:30000]


def train_bpe(spec):
    """Byte-level BPE in the style of the model family; ids 0..2 are pad, BOS, EOS."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    llama = spec.arch == "llama"
    tok = Tokenizer(models.BPE(ignore_merges=llama))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(RE_LLAMA3 if llama else RE_QWEN2), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab - 16, special_tokens=["<|pad|>", BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([corpus()], trainer)
    if llama:  # Llama 3 style: the post-processor puts BOS first
        tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A",
                                                           special_tokens=[(BOS, 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS,
                                                eos_token=EOS, pad_token="<|pad|>")


class Models:
    """Per-session cache: HF model + its saved directory + the converted files."""

    def __init__(self, root):
        self.root = root
        self._m, self._dir, self._tok, self._out = {}, {}, {}, {}

    def model(self, name):
        if name not in self._m:
            self._m[name] = om.build_hf_model(om.SPECS[name])
        return self._m[name]

    def dir(self, name):
        if name not in self._dir:
            d = self.root / f"hf-{name}"
            kw = {"max_shard_size": "100KB"} if name == SHARDED else {}
            self.model(name).save_pretrained(d, safe_serialization=True, **kw)
            self._tok[name] = train_bpe(om.SPECS[name])
            self._tok[name].save_pretrained(d)
            self._dir[name] = d
        return self._dir[name]

    def tok(self, name):
        self.dir(name)
        return self._tok[name]

    def out(self, rawloop, name, qtype):
        key = (name, qtype)
        if key not in self._out:
            path = self.root / f"{name}-{qtype}.gguf"
            rawloop("quantize", self.dir(name), path, "--type", qtype)
            self._out[key] = path
        return self._out[key]


@pytest.fixture(scope="session")
def hf(tmp_path_factory):
    return Models(tmp_path_factory.mktemp("hf"))


def test_ids(spec):
    rng = np.random.default_rng(200 + spec.seed)
    return [1] + [int(x) for x in rng.integers(3, spec.vocab, 15)]


test_ids.__test__ = False


def logits(rawloop, path, ids, n_vocab, tmp_path):
    out = tmp_path / "logits.bin"
    rawloop("logits", "-m", path, "--ids", " ".join(map(str, ids)), "-o", out, "--kv-type", "f32")
    return np.fromfile(out, dtype="<f4").reshape(len(ids), n_vocab)


def reader_tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def hf_matrices(model, spec):
    """GGUF name -> the HF weight in GGUF row order (llama Q/K permuted by oracle_models)."""
    out = {}
    for name, arr in om._hf_params(model, spec).items():
        g = om._hf_to_gguf_name(name)
        if spec.arch == "llama" and g.endswith(("attn_q.weight", "attn_k.weight")):
            arr = om.permute_qk(arr, spec.n_heads,
                                spec.n_heads if "attn_q" in g else spec.n_kv_heads)
        out[g] = arr
    return out


@pytest.mark.parametrize("name", list(om.SPECS))
def test_f32_logits_match_hf(rawloop, hf, tmp_path, name):
    spec = om.SPECS[name]
    path = hf.out(rawloop, name, "F32")
    ids = test_ids(spec)
    ref = om.hf_logits(hf.model(name), ids)
    err = om.rel_error(logits(rawloop, path, ids, spec.vocab, tmp_path), ref)
    assert err <= 1e-4, f"{name}: rel err {err:.2e}"


@pytest.mark.parametrize("name", list(om.SPECS))
def test_f32_tensors_match_python_converter(rawloop, hf, tmp_path, name):
    spec = om.SPECS[name]
    ours = reader_tensors(hf.out(rawloop, name, "F32"))
    ref_path = tmp_path / "ref.gguf"
    om.write_gguf(hf.model(name), spec, ref_path, "F32")
    ref = reader_tensors(ref_path)
    assert sorted(ours) == sorted(ref)
    for n, t in ref.items():
        o = ours[n]
        assert o.tensor_type == gguf.GGMLQuantizationType.F32, n
        assert list(o.shape) == list(t.shape), n
        np.testing.assert_allclose(np.asarray(o.data), np.asarray(t.data), rtol=1e-6, atol=0,
                                   err_msg=n)


@pytest.mark.parametrize("qtype", ["Q8_0", "F32"])
def test_sliced_output_is_the_same_file(rawloop, hf, tmp_path, qtype):
    """--slice-kb 1 builds every tensor in 1 KiB slices (the llama Q/K permutation crossing
    slice boundaries included): the file must equal the one built in whole tensors."""
    whole = hf.out(rawloop, "llama_mha", qtype)
    sliced = tmp_path / "sliced.gguf"
    rawloop("quantize", hf.dir("llama_mha"), sliced, "--type", qtype, "--slice-kb", "1")
    assert sliced.read_bytes() == whole.read_bytes()
    # the slices must really be smaller than the tensors: token_embd alone is > 1 KiB
    spec = om.SPECS["llama_mha"]
    assert spec.vocab * spec.hidden > 1024


@pytest.mark.parametrize("name,qtype", [("llama_mha", "F16"), ("llama_mha", "Q8_0"),
                                        ("qwen3", "Q8_0")])
def test_f16_q8_0_bytes_match_gguf_package(rawloop, hf, name, qtype):
    spec = om.SPECS[name]
    ours = reader_tensors(hf.out(rawloop, name, qtype))
    qt = gguf.GGMLQuantizationType[qtype]
    for n, w in hf_matrices(hf.model(name), spec).items():
        o = ours[n]
        if w.ndim == 1:
            assert o.tensor_type == gguf.GGMLQuantizationType.F32, n
            assert np.array_equal(np.asarray(o.data), w.astype(np.float32)), n
            continue
        assert o.tensor_type == qt, n
        if qtype == "F16":
            want = w.astype(np.float16).view(np.uint8)
        else:
            want = gguf.quants.quantize(w.astype(np.float32), qt)
        got = np.asarray(o.data).view(np.uint8).reshape(want.shape)
        assert np.array_equal(got, want), n


def test_bf16_checkpoint(rawloop, hf, tmp_path):
    """Real checkpoints are mostly BF16: --type BF16 copies every matrix's bits (in GGUF row
    order), norms widen exactly to F32."""
    import torch
    name = "llama3_gqa"
    spec = om.SPECS[name]
    d = tmp_path / "bf16"
    shutil.copytree(hf.dir(name), d)
    for f in d.glob("*.safetensors"):
        f.unlink()
    m = copy.deepcopy(hf.model(name)).to(torch.bfloat16)   # the cached float32 model stays
    m.save_pretrained(d, safe_serialization=True)
    out = tmp_path / "bf16.gguf"
    rawloop("quantize", d, out, "--type", "BF16")
    ours = reader_tensors(out)
    n = 0
    for g, w in hf_matrices(m.float(), spec).items():
        bits = (w.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bf16 exact here
        o = ours[g]
        if w.ndim == 1:
            assert o.tensor_type == gguf.GGMLQuantizationType.F32, g
            assert np.array_equal(np.asarray(o.data).view(np.uint32), bits.astype(np.uint32) << 16)
        else:
            assert o.tensor_type == gguf.GGMLQuantizationType.BF16, g
            assert np.array_equal(np.asarray(o.data).view(np.uint16).reshape(bits.shape), bits), g
            n += 1
    assert n == 1 + 7 * spec.n_layers   # token_embd (tied: no output) + 7 per layer


def test_metadata(rawloop, hf):
    for name in ("llama3_gqa", "qwen3", "qwen2"):
        spec = om.SPECS[name]
        r = gguf.GGUFReader(hf.out(rawloop, name, "F32"))
        kv = {f.name: f.contents() for f in r.fields.values()}
        a = spec.arch
        om.assert_shape_keys(kv, spec)
        assert kv["general.file_type"] == 0
        if a != "qwen2":   # qwen2's config.json has no head_dim; the others do
            assert kv[f"{a}.attention.key_length"] == spec.hd
        assert ("output.weight" in {t.name for t in r.tensors}) == (not spec.tied)
        assert ("rope_freqs.weight" in {t.name for t in r.tensors}) == bool(spec.llama3_rope)

        tok = hf.tok(name)
        hvocab = tok.get_vocab()
        tokens = kv["tokenizer.ggml.tokens"]
        assert kv["tokenizer.ggml.model"] == "gpt2"
        assert kv["tokenizer.ggml.pre"] == ("llama-bpe" if a == "llama" else "qwen2")
        assert len(tokens) == spec.vocab   # padded to config's vocab_size
        for text, i in hvocab.items():
            assert tokens[i] == text
        types = kv["tokenizer.ggml.token_type"]
        assert types[1] == 3 and types[2] == 3      # BOS/EOS are control tokens
        assert types[len(hvocab)] == 5 and tokens[len(hvocab)] == f"[PAD{len(hvocab)}]"
        merges = kv["tokenizer.ggml.merges"]
        hmerges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
        assert merges == [" ".join(m) if isinstance(m, list) else m for m in hmerges]
        assert kv["tokenizer.ggml.bos_token_id"] == 1
        assert kv["tokenizer.ggml.eos_token_id"] == 2
        # the HF tokenizer's own answer to "is BOS prepended"
        assert kv["tokenizer.ggml.add_bos_token"] == (tok("a")["input_ids"][0] == 1)


@pytest.mark.parametrize("name", ["llama3_gqa", "qwen2"])
def test_tokenize_matches_hf(rawloop, hf, name):
    path = hf.out(rawloop, name, "F32")
    tok = hf.tok(name)
    for text in TEXTS:
        want = tok.encode(text, add_special_tokens=False)
        got = rawloop("tokenize", "-m", path, "--ids", input=text.encode()).stdout.split()
        assert [int(x) for x in got] == want, text


def test_sentencepiece_tokenizer(rawloop, hf, tmp_path):
    """tokenizer.model (SentencePiece BPE with byte fallback, Llama 2 style) becomes a 'llama'
    tokenizer whose ids equal sentencepiece's."""
    spm = pytest.importorskip("sentencepiece")
    name = "llama3_gqa"
    spec = om.SPECS[name]
    d = tmp_path / "spm"
    shutil.copytree(hf.dir(name), d)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (d / f).unlink(missing_ok=True)
    (tmp_path / "corpus.txt").write_text(corpus(), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "corpus.txt"), model_prefix=str(d / "tokenizer"), model_type="bpe",
        vocab_size=spec.vocab - 8, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True, minloglevel=2)
    out = tmp_path / "spm.gguf"
    rawloop("quantize", d, out, "--type", "Q8_0")
    kv = {f.name: f.contents() for f in gguf.GGUFReader(out).fields.values()}
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    assert kv["tokenizer.ggml.model"] == "llama"
    n = sp.get_piece_size()
    assert kv["tokenizer.ggml.tokens"][:n] == [sp.id_to_piece(i) for i in range(n)]
    np.testing.assert_array_equal(kv["tokenizer.ggml.scores"][:n],
                                  np.array([sp.get_score(i) for i in range(n)], np.float32))
    assert kv["tokenizer.ggml.token_type"][3 + 0x41] == 6   # <0x41> is a byte token
    assert (kv["tokenizer.ggml.bos_token_id"], kv["tokenizer.ggml.eos_token_id"]) == \
        (sp.bos_id(), sp.eos_id())
    for text in TEXTS[:3]:
        got = rawloop("tokenize", "-m", out, "--ids", input=text.encode()).stdout.split()
        assert [int(x) for x in got] == sp.encode(text), text


# ---- bad input -------------------------------------------------------------------------------

def read_st(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def corrupt_length(d):
    p = d / "model.safetensors"
    raw = bytearray(p.read_bytes())
    raw[:8] = struct.pack("<Q", len(raw) + 5)
    p.write_bytes(bytes(raw))


def corrupt_offsets(d):
    p = d / "model.safetensors"
    h, data = read_st(p)
    t = h["model.norm.weight"]
    size = t["data_offsets"][1] - t["data_offsets"][0]
    t["data_offsets"] = [len(data) + 64, len(data) + 64 + size]
    write_st(p, h, data)


def overlap(d):
    p = d / "model.safetensors"
    h, data = read_st(p)
    a, b = h["model.norm.weight"], h["model.layers.0.input_layernorm.weight"]
    b["data_offsets"] = list(a["data_offsets"])
    write_st(p, h, data)


def unknown_dtype(d):
    p = d / "model.safetensors"
    h, data = read_st(p)
    h["model.norm.weight"]["dtype"] = "F33"
    write_st(p, h, data)


def int_dtype(d):
    p = d / "model.safetensors"
    h, data = read_st(p)
    h["model.norm.weight"]["dtype"] = "I32"
    write_st(p, h, data)


UP0 = "model.layers.0.mlp.up_proj.weight"


def nonfinite_weight(d):
    """+inf at [2, 5] of one weight, in the tensor's own dtype."""
    p = d / "model.safetensors"
    h, data = read_st(p)
    t = h[UP0]
    dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[t["dtype"]]
    cols = t["shape"][1]
    at = t["data_offsets"][0] + (2 * cols + 5) * np.dtype(dt).itemsize
    inf = np.uint16(0x7F80) if t["dtype"] == "BF16" else dt(np.inf)
    data = bytearray(data)
    data[at:at + np.dtype(dt).itemsize] = np.array(inf, dt).tobytes()
    write_st(p, h, bytes(data))


def edit_config(**changes):
    def f(d):
        cfg = json.loads((d / "config.json").read_text())
        for k, v in changes.items():
            if v is None:
                cfg.pop(k)
            else:
                cfg[k] = v
        (d / "config.json").write_text(json.dumps(cfg))
    return f


BAD = {
    "missing_shard": (SHARDED, lambda d: (d / "model-00003-of-00007.safetensors").unlink(),
                      "missing shard"),
    "header_length": ("qwen2", corrupt_length, "header length"),
    "offsets_past_end": ("qwen2", corrupt_offsets, "outside"),
    "overlap": ("qwen2", overlap, "overlap"),
    "unknown_dtype": ("qwen2", unknown_dtype, "unknown dtype 'F33'"),
    "int_dtype": ("qwen2", int_dtype, "dtype I32"),
    "shape_mismatch": ("qwen2", edit_config(intermediate_size=160), "config.json implies"),
    "missing_key": ("qwen2", edit_config(hidden_size=None), "missing key 'hidden_size'"),
    "unsupported_arch": ("qwen2", edit_config(model_type="mamba"),
                         "unsupported architecture 'mamba'"),
    "extra_layer_tensors": ("qwen2", edit_config(num_hidden_layers=1), "unexpected tensor"),
    "nonfinite_weight": ("qwen2", nonfinite_weight,
                         f"tensor '{UP0}' holds +infinity at [2, 5]: a weight must be finite"),
}


def test_directory_without_config(rawloop, tmp_path):
    p = rawloop("quantize", tmp_path, tmp_path / "out.gguf", "--type", "F16", check=False)
    assert p.returncode == 1 and "config.json: missing" in p.stderr.decode(), p.stderr
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input(rawloop, hf, tmp_path, case):
    name, damage, msg = BAD[case]
    d = tmp_path / "model"
    shutil.copytree(hf.dir(name), d)
    damage(d)
    out = tmp_path / "out.gguf"
    p = rawloop("quantize", d, out, "--type", "Q8_0", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert msg in err, err
    lines = [x for x in err.splitlines() if x.startswith("rawloop: ")]
    assert len(lines) == 1, err
    assert not out.exists() and not (tmp_path / "out.gguf.tmp").exists()

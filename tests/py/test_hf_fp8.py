"""`rawloop quantize DIR OUT` on Hugging Face FP8 checkpoints (DeepSeek-V3 / Qwen3-*-FP8 layout;
docs/FORMATS.md, section FP8).

The checkpoint is made here, by hand (safetensors header JSON + raw bytes, two shards and an
index): a 2-layer llama (hidden 192, 3 heads of 64, 1 KV head, ffn 320), so that no matrix
dimension is a multiple of 128 and every matrix has partial 128x128 blocks (K/V: 64 rows, one
partial block; gate/up: 320 rows, blocks of 128, 128, 64). Its linear weights are
F8_E4M3 codes (every code but the two NaNs occurs) with `X.weight_scale_inv` siblings: F32
block scales, BF16 block scales (layer 1 up_proj), per-tensor scales of shape [] and [1]
(layer 1 down_proj / k_proj); layer 1 v_proj stays BF16 as a `modules_to_not_convert` matrix
would; embeddings, norms and lm_head are BF16. Layer 1's scales lie in the other shard than
their weights.

Oracle, independent of the engine: `ml_dtypes` decodes the codes (numpy float8_e4m3fn) and
bf16 scales, numpy multiplies in float32 by the block's scale, which is transformers'
Fp8Dequantize and DeepSeek's weight_dequant. Checked:
  - --type F32: every tensor equals the oracle bit for bit (llama Q/K in GGUF row order); the
    scales are consumed, not written; --slice-kb 1 -t 3 (slices cutting through scale blocks)
    gives the same file;
  - --type Q8_0: every matrix equals the gguf package's quantize of the oracle, byte for byte;
  - every other --type (F16 BF16 Q4_0 Q4_K_M Q6_K FP8 RQ2): the file equals the one made from the
    same checkpoint with its FP8 weights replaced by the oracle's F32 values (the F32 import is
    tested in test_hf_import.py), so the FP8 reader feeds each quantizer the oracle's values;
  - the converted model runs (`rawloop logits`, finite);
  - the same checkpoint as AutoFP8 writes it (X.weight_scale siblings; with activation_scheme
    "static" also X.input_scale, read past with a warning) gives the same F32 file;
  - bad checkpoints (no scale sibling, misshapen or mistyped scales, a NaN code, a block size
    that disagrees with config.json, another quant_method / fmt / activation_scheme, F8_E5M2
    weights, F8 weights without quantization_config, scales of a BF16 weight, a NaN scale):
    exit 1, one `rawloop:` line naming the problem, no OUT and no OUT.tmp.
"""
import copy
import json
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
ml_dtypes = pytest.importorskip("ml_dtypes")
import oracle_models as om  # noqa: E402

HIDDEN, N_HEAD, N_KV, HD, FFN, VOCAB, N_LAYER = 192, 3, 1, 64, 320, 300, 2
BLOCK = 128
E4M3, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16
BOS, EOS = 256, 257

# per-layer linear weights: HF name -> (GGUF name, rows, cols)
LINEAR = {
    "self_attn.q_proj.weight": ("attn_q.weight", N_HEAD * HD, HIDDEN),
    "self_attn.k_proj.weight": ("attn_k.weight", N_KV * HD, HIDDEN),
    "self_attn.v_proj.weight": ("attn_v.weight", N_KV * HD, HIDDEN),
    "self_attn.o_proj.weight": ("attn_output.weight", HIDDEN, N_HEAD * HD),
    "mlp.gate_proj.weight": ("ffn_gate.weight", FFN, HIDDEN),
    "mlp.up_proj.weight": ("ffn_up.weight", FFN, HIDDEN),
    "mlp.down_proj.weight": ("ffn_down.weight", HIDDEN, FFN),
}
# how layer 1 departs from layer 0's F32 128x128 block scales
SCALES_L1 = {"self_attn.v_proj.weight": None,         # not quantized: BF16
             "mlp.up_proj.weight": "bf16",             # BF16 block scales
             "mlp.down_proj.weight": [],               # per-tensor scale, shape []
             "self_attn.k_proj.weight": [1]}           # per-tensor scale, shape [1]


def config():
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": FFN,
            "num_hidden_layers": N_LAYER, "num_attention_heads": N_HEAD,
            "num_key_value_heads": N_KV, "head_dim": HD, "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "bos_token_id": BOS, "eos_token_id": EOS,
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                    "activation_scheme": "dynamic",
                                    "weight_block_size": [BLOCK, BLOCK]}}


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the byte-level BPE alphabet)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json():
    """Byte-level BPE with the 256 byte tokens, no merges, BOS/EOS as added special tokens."""
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    return {"version": "1.0", "added_tokens": [
                {"id": BOS, "content": "<|bos|>", "special": True},
                {"id": EOS, "content": "<|eos|>", "special": True}],
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def fp8_codes(rng, shape):
    """Random e4m3 codes, never the NaNs 0x7f / 0xff."""
    c = rng.integers(0, 256, shape, dtype=np.uint8)
    nan = (c & 0x7f) == 0x7f
    c[nan] = rng.integers(0, 0x7f, int(nan.sum()), dtype=np.uint8) | (c[nan] & 0x80)
    return c


def dequant(codes, scale):
    """The oracle: float32(e4m3(code)) * the block's float32 scale (partial blocks cut off)."""
    w = codes.view(E4M3).astype(np.float32)
    s = np.asarray(scale, dtype=np.float32)
    if s.size == 1:
        return w * s.reshape(())
    s = np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:w.shape[0], :w.shape[1]]
    return w * s


def checkpoint():
    """(config, tensors, oracle): tensors maps an HF name to [dtype, shape, raw bytes];
    oracle maps each HF weight name to its float32 values (HF row order)."""
    rng = np.random.default_rng(77)
    tensors, oracle = {}, {}

    def bf16(name, shape, std):
        v = (rng.standard_normal(shape) * std).astype(BF16)
        tensors[name] = ["BF16", list(shape), v.tobytes()]
        oracle[name] = v.astype(np.float32)

    bf16("model.embed_tokens.weight", (VOCAB, HIDDEN), 0.5)
    for layer in range(N_LAYER):
        pre = f"model.layers.{layer}."
        bf16(pre + "input_layernorm.weight", (HIDDEN,), 0.2)
        bf16(pre + "post_attention_layernorm.weight", (HIDDEN,), 0.2)
        for hname, (_, rows, cols) in LINEAR.items():
            kind = SCALES_L1.get(hname, "f32") if layer == 1 else "f32"
            if kind is None:
                bf16(pre + hname, (rows, cols), 0.05)
                continue
            codes = fp8_codes(rng, (rows, cols))
            # scales over three decades: e4m3 values reach 448, so weights up to ~20
            if isinstance(kind, list):
                sshape = tuple(kind)
            else:
                sshape = (-(-rows // BLOCK), -(-cols // BLOCK))
            scale = np.exp(rng.uniform(np.log(5e-5), np.log(5e-2), sshape)).astype(np.float32)
            if kind == "bf16":
                scale = scale.astype(BF16)
                tensors[pre + hname + "_scale_inv"] = ["BF16", list(sshape), scale.tobytes()]
            else:
                tensors[pre + hname + "_scale_inv"] = ["F32", list(sshape), scale.tobytes()]
            tensors[pre + hname] = ["F8_E4M3", [rows, cols], codes.tobytes()]
            oracle[pre + hname] = dequant(codes, scale.astype(np.float32))
    bf16("model.norm.weight", (HIDDEN,), 0.2)
    bf16("lm_head.weight", (VOCAB, HIDDEN), 0.5)
    return config(), tensors, oracle


def gguf_name(hname):
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hname in fixed:
        return fixed[hname]
    layer, rest = hname.split(".")[2], ".".join(hname.split(".")[3:])
    norms = {"input_layernorm.weight": "attn_norm.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight"}
    return f"blk.{layer}." + (norms[rest] if rest in norms else LINEAR[rest][0])


def gguf_oracle(oracle):
    """GGUF name -> oracle values in GGUF row order (llama Q/K permuted as convert_hf_to_gguf)."""
    out = {}
    for hname, w in oracle.items():
        g = gguf_name(hname)
        if g.endswith("attn_q.weight"):
            w = om.permute_qk(w, N_HEAD, N_HEAD)
        elif g.endswith("attn_k.weight"):
            w = om.permute_qk(w, N_HEAD, N_KV)
        out[g] = w
    return out


def write_st(path, tensors):
    """A safetensors file: 8-byte header length, JSON header (padded to 8 bytes), data."""
    header, data, off = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def write_dir(d, cfg, tensors):
    """Two shards and an index; layer 1's scales go to the shard its weights are not in."""
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "tokenizer.json").write_text(json.dumps(tokenizer_json()))
    shards = ({}, {})
    for name, t in tensors.items():
        first = name.startswith("model.layers.0.") or name.endswith("_scale_inv")
        shards[0 if first else 1][name] = t
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for f, s in zip(files, shards):
        write_st(d / f, s)
    index = {"metadata": {}, "weight_map": {n: files[i] for i in (0, 1) for n in shards[i]}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return d


def dequantized_dir(d, cfg, tensors, oracle):
    """The same checkpoint with every FP8 weight replaced by the oracle's F32 values."""
    cfg = copy.deepcopy(cfg)
    del cfg["quantization_config"]
    plain = {}
    for name, t in tensors.items():
        if name.endswith("_scale_inv"):
            continue
        if t[0] == "F8_E4M3":
            t = ["F32", t[1], np.ascontiguousarray(oracle[name], np.float32).tobytes()]
        plain[name] = t
    return write_dir(d, cfg, plain)


class Files:
    """Per-session cache of the checkpoint, its dequantized twin and their conversions. Both
    directories are named `model` (general.name is the directory's name)."""

    def __init__(self, root):
        self.root = root
        self.cfg, self.tensors, self.oracle = checkpoint()
        self.fp8 = write_dir(root / "fp8" / "model", self.cfg, self.tensors)
        self.f32 = dequantized_dir(root / "f32" / "model", self.cfg, self.tensors, self.oracle)
        self._out = {}

    def out(self, rawloop, which, qtype):
        key = (which, qtype)
        if key not in self._out:
            path = self.root / f"{which}-{qtype}.gguf"
            p = rawloop("quantize", getattr(self, which), path, "--type", qtype)
            assert b"warning" not in p.stderr, p.stderr
            self._out[key] = path
        return self._out[key]


@pytest.fixture(scope="session")
def ck(tmp_path_factory):
    return Files(tmp_path_factory.mktemp("hf_fp8"))


def reader_tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def test_checkpoint_covers_partial_blocks_and_every_code(ck):
    """The fixture is what the docstring says (a guard for the tests below)."""
    codes = np.concatenate([np.frombuffer(t[2], np.uint8) for t in ck.tensors.values()
                            if t[0] == "F8_E4M3"])
    assert set(np.unique(codes)) == set(range(256)) - {0x7f, 0xff}
    dims = {d for _, r, c in LINEAR.values() for d in (r, c)}
    assert all(d % BLOCK for d in dims)
    kinds = {t[0] for n, t in ck.tensors.items() if n.endswith("_scale_inv")}
    shapes = {tuple(t[1]) for n, t in ck.tensors.items() if n.endswith("_scale_inv")}
    assert kinds == {"F32", "BF16"} and {(), (1,), (3, 2), (2, 3), (1, 2)} <= shapes


def test_f32_is_the_oracle(rawloop, ck, tmp_path):
    out = ck.out(rawloop, "fp8", "F32")
    ours = reader_tensors(out)
    want = gguf_oracle(ck.oracle)
    assert sorted(ours) == sorted(want)   # no scale tensor written, nothing missing
    for name, w in want.items():
        o = ours[name]
        assert o.tensor_type == gguf.GGMLQuantizationType.F32, name
        got = np.asarray(o.data).reshape(w.shape)
        assert np.array_equal(got.view(np.uint32), w.astype(np.float32).view(np.uint32)), name
    # slices of 1 KiB (a row or two: every scale block cut several times) on 3 threads
    sliced = tmp_path / "sliced.gguf"
    rawloop("quantize", ck.fp8, sliced, "--type", "F32", "--slice-kb", "1", "-t", "3")
    assert sliced.read_bytes() == out.read_bytes()


def test_q8_0_matches_gguf_package(rawloop, ck):
    ours = reader_tensors(ck.out(rawloop, "fp8", "Q8_0"))
    for name, w in gguf_oracle(ck.oracle).items():
        o = ours[name]
        if w.ndim == 1:
            assert o.tensor_type == gguf.GGMLQuantizationType.F32, name
            assert np.array_equal(np.asarray(o.data), w), name
            continue
        assert o.tensor_type == gguf.GGMLQuantizationType.Q8_0, name
        want = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
        got = np.asarray(o.data).view(np.uint8).reshape(want.shape)
        assert np.array_equal(got, want), name


@pytest.mark.parametrize("qtype", ["F16", "BF16", "Q4_0", "Q4_K_M", "Q6_K", "FP8", "RQ2"])
def test_every_type_equals_the_dequantized_checkpoint(rawloop, ck, qtype):
    a = ck.out(rawloop, "fp8", qtype).read_bytes()
    b = ck.out(rawloop, "f32", qtype).read_bytes()
    assert a == b


def test_converted_model_runs(rawloop, ck, tmp_path):
    out = tmp_path / "logits.bin"
    ids = [BOS, 72, 101, 108, 108, 111]
    rawloop("logits", "-m", ck.out(rawloop, "fp8", "Q8_0"), "--ids", " ".join(map(str, ids)),
            "-o", out, "--device", "cpu")
    x = np.fromfile(out, dtype="<f4")
    assert x.size == len(ids) * VOCAB and np.isfinite(x).all() and x.std() > 0


def autofp8(cfg, tensors, static):
    """The same checkpoint as AutoFP8 / vLLM's "fp8" writes it: each scale named X.weight_scale
    (a multiplier, as X.weight_scale_inv is), and with activation_scheme "static" an
    X.input_scale per FP8 matrix (the FP8 activations' scale, which rawloop does not use)."""
    cfg, out = copy.deepcopy(cfg), {}
    cfg["quantization_config"]["activation_scheme"] = "static" if static else "dynamic"
    rng = np.random.default_rng(5)
    for name, t in tensors.items():
        if name.endswith("_scale_inv"):
            out[name[:-len("_inv")]] = t
            continue
        out[name] = t
        if static and t[0] == "F8_E4M3":
            v = np.float32(rng.uniform(0.01, 0.1))
            out[name[:-len(".weight")] + ".input_scale"] = ["F32", [1], v.tobytes()]
    return cfg, out


@pytest.mark.parametrize("static", [False, True])
def test_autofp8_layout_gives_the_same_file(rawloop, ck, tmp_path, static):
    """X.weight_scale reads as X.weight_scale_inv does; a static checkpoint's input scales are
    read past with one warning that counts them (13 FP8 matrices: layer 1's v_proj is BF16)."""
    cfg, tensors = autofp8(ck.cfg, ck.tensors, static)
    d = write_dir(tmp_path / "model", cfg, tensors)
    out = tmp_path / "out.gguf"
    p = rawloop("quantize", d, out, "--type", "F32")
    err = p.stderr.decode()
    if static:
        assert "warning: FP8 activation_scheme 'static': 13 input_scale tensors" in err, err
    else:
        assert "warning" not in err, err
    assert out.read_bytes() == ck.out(rawloop, "fp8", "F32").read_bytes()


# ---- bad checkpoints --------------------------------------------------------------------------

Q0 = "model.layers.0.self_attn.q_proj.weight"
O0 = "model.layers.0.self_attn.o_proj.weight"
UP0 = "model.layers.0.mlp.up_proj.weight"
GATE0 = "model.layers.0.mlp.gate_proj.weight"
V1 = "model.layers.1.self_attn.v_proj.weight"


def set_code(name, row, col, code):
    def f(cfg, t):
        _, (rows, cols), raw = t[name]
        a = np.frombuffer(raw, np.uint8).reshape(rows, cols).copy()
        a[row, col] = code
        t[name][2] = a.tobytes()
    return f


def qc(**changes):
    def f(cfg, t):
        for k, v in changes.items():
            if v is None:
                cfg["quantization_config"].pop(k)
            else:
                cfg["quantization_config"][k] = v
    return f


def drop_quant_config(cfg, t):
    del cfg["quantization_config"]


def drop_scale(cfg, t):
    del t[UP0 + "_scale_inv"]


def transpose_scale_shape(cfg, t):
    t[GATE0 + "_scale_inv"][1] = [2, 3]    # same bytes, the shape of a [*, 320] weight


def int_scale(cfg, t):
    t[GATE0 + "_scale_inv"][0] = "I32"


def e5m2_weight(cfg, t):
    t[O0][0] = "F8_E5M2"


def scale_for_bf16_weight(cfg, t):
    t[V1 + "_scale_inv"] = ["F32", [1], np.float32(0.5).tobytes()]


def input_scale(name):
    def f(cfg, t):
        t[name[:-len(".weight")] + ".input_scale"] = ["F32", [], np.float32(0.02).tobytes()]
    return f


def weight_scale_for_bf16_weight(cfg, t):
    t[V1 + "_scale"] = ["F32", [], np.float32(0.5).tobytes()]


def nan_scale(cfg, t):
    s = np.frombuffer(t[GATE0 + "_scale_inv"][2], np.float32).copy()
    s[4] = np.nan
    t[GATE0 + "_scale_inv"][2] = s.tobytes()


BAD = {
    "no_scale_sibling": (drop_scale, f"its scales '{UP0}_scale_inv' (or '{UP0}_scale') are not "
                         "in any shard"),
    "scale_shape": (transpose_scale_shape, f"'{GATE0}_scale_inv' has shape [2, 3], but "
                    f"weight_block_size [128, 128] over '{GATE0}' [320, 192] implies [3, 2]"),
    "scale_dtype": (int_scale, f"'{GATE0}_scale_inv' has dtype I32; FP8 scales must be F32 or "
                    "BF16"),
    "nan_code_7f": (set_code(O0, 5, 130, 0x7f),
                    f"tensor '{O0}' holds e4m3 code 0x7f at [5, 130]: a NaN"),
    # q_proj's rows are permuted on the way (llama): the message gives the stored row
    "nan_code_ff": (set_code(Q0, 70, 3, 0xff), f"tensor '{Q0}' holds e4m3 code 0xff at [70, 3]"),
    "block_size_disagrees": (qc(weight_block_size=[64, 64]),
                             "weight_block_size [64, 64] over"),
    "block_size_malformed": (qc(weight_block_size=[128]), "weight_block_size must be [rows, cols]"),
    "block_scales_without_block_size": (qc(weight_block_size=None),
                                        "block scales, but config.json's quantization_config "
                                        "has no weight_block_size"),
    "quant_method": (qc(quant_method="gptq"), "quant_method 'gptq' is not supported"),
    "fmt": (qc(fmt="e5m2"), "fmt 'e5m2' is not supported"),
    "activation_scheme": (qc(activation_scheme="per-token"),
                          "activation_scheme 'per-token' is not supported"),
    # activation scales belong to static checkpoints only
    "input_scale_when_dynamic": (input_scale(Q0), f"unexpected tensor '{Q0[:-7]}.input_scale'"),
    "weight_scale_of_bf16_weight": (weight_scale_for_bf16_weight, f"unexpected tensor "
                                    f"'{V1}_scale': FP8 scales of a weight that is not F8_E4M3"),
    "e5m2_weights": (e5m2_weight, f"tensor '{O0}' has dtype F8_E5M2"),
    "no_quant_config": (drop_quant_config, f"tensor '{Q0}' is F8_E4M3 but config.json has no "
                        "quantization_config"),
    "scale_of_bf16_weight": (scale_for_bf16_weight, f"unexpected tensor '{V1}_scale_inv': FP8 "
                             "scales of a weight that is not F8_E4M3"),
    "nan_scale": (nan_scale, f"'{GATE0}_scale_inv' holds a non-finite scale (nan) at index 4"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_checkpoint(rawloop, ck, tmp_path, case):
    damage, msg = BAD[case]
    cfg, tensors = copy.deepcopy(ck.cfg), copy.deepcopy(ck.tensors)
    damage(cfg, tensors)
    d = write_dir(tmp_path / "model", cfg, tensors)
    out = tmp_path / "out.gguf"
    p = rawloop("quantize", d, out, "--type", "Q8_0", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    lines = [x for x in err.splitlines() if x.startswith("rawloop: ")]
    assert len(lines) == 1 and msg in lines[0], err
    assert not out.exists() and not (tmp_path / "out.gguf.tmp").exists()

"""Tiny random Hugging Face models, their GGUF conversion, and the reference built back from a GGUF.

Used by test_oracle.py to check rawloop's forward pass against transformers. Three pieces:

  build_hf_model(spec)       a seeded random LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM
                             in float32, with weights large enough that logits are far from uniform.
  write_gguf(model, spec, path, qtype)
                             converts it the way llama.cpp's convert_hf_to_gguf.py does (key names,
                             tensor names, Q/K permutation for arch llama, rope_freqs for llama3
                             rope scaling, tied output) plus a small synthetic SPM tokenizer.
                             Matrices are stored in qtype; norms, biases and rope_freqs stay F32.
  reference_from_gguf(path, spec)
                             reads the file back with gguf.GGUFReader, dequantizes every tensor
                             (gguf.quants.dequantize of exactly the blocks in the file), undoes the
                             llama Q/K permutation and loads the result into a fresh HF model. This
                             is the oracle for quantized files: the engine must reproduce the model
                             that the file describes, so quantization error is not measured here.
                             It works for any type gguf can dequantize (K-quants included), so
                             files written by a future `rawloop` quantizer can be checked too.

Also a small numpy forward pass that reads the GGUF with llama.cpp's conventions (interleaved RoPE
on permuted Q/K for llama, NEOX RoPE for qwen2/qwen3, rope_freqs divisors). Comparing it to HF
proves the files mean what llama.cpp would take them to mean, independently of rawloop.
"""
from __future__ import annotations

import dataclasses
import math

import pathlib

import numpy as np
import torch

import gguf
from gguf.quants import dequantize, quantize


# ------------------------------------------------------------------------------------------------
# Model specs

@dataclasses.dataclass(frozen=True)
class Spec:
    """Shape and flavour of one tiny test model."""
    name: str
    arch: str                       # "llama" | "qwen2" | "qwen3" (GGUF general.architecture)
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn: int
    vocab: int
    head_dim: int | None = None     # explicit head_dim (qwen3); None means hidden / n_heads
    tied: bool = False
    rope_theta: float = 10000.0
    llama3_rope: dict | None = None  # rope_scaling of type llama3 (factor, low/high, orig ctx)
    rms_eps: float = 1e-5
    ctx: int = 256                  # max_position_embeddings / {arch}.context_length
    seed: int = 0
    gain: float = 0.7               # matrix init std = gain / sqrt(fan_in); see build_hf_model

    @property
    def hd(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.n_heads


SPECS = {
    # Plain multi-head attention, untied output, default RoPE.
    "llama_mha": Spec("llama_mha", "llama", hidden=64, n_layers=2, n_heads=4, n_kv_heads=4,
                      ffn=192, vocab=320, seed=1),
    # Llama-3.2 flavour: GQA, tied embeddings (no output.weight), llama3 rope scaling with a small
    # original context so all three regimes (kept / smoothed / divided by factor) occur at
    # head_dim 32 and theta 5e5: wavelengths 6.3, 14.3 < 32 (kept), 32.4, 73 (smoothed), 167+ > 128.
    "llama3_gqa": Spec("llama3_gqa", "llama", hidden=128, n_layers=3, n_heads=4, n_kv_heads=2,
                       ffn=384, vocab=512, tied=True, rope_theta=500000.0,
                       llama3_rope={"factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 128}, seed=2),
    # Qwen2: q/k/v biases, GQA, NEOX RoPE.
    "qwen2": Spec("qwen2", "qwen2", hidden=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn=192,
                  vocab=384, rope_theta=1000000.0, rms_eps=1e-6, seed=3),
    # Qwen3: q_norm/k_norm, head_dim 32 while hidden/heads = 16, tied embeddings.
    "qwen3": Spec("qwen3", "qwen3", hidden=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn=192,
                  vocab=448, head_dim=32, tied=True, rope_theta=1000000.0, rms_eps=1e-6, seed=4),
}

# Same shapes, gain 2, for greedy decoding. Seeds picked (by trying 1, 2, ...) so that for every
# weight type the reference greedy path has no near-tie (top-2 gap > 2e-4 of max|logit| at every
# step) and is not one repeated id; test_harness_greedy_reference_is_decisive re-checks that.
GREEDY_SEEDS = {"llama_mha": 2, "llama3_gqa": 1, "qwen2": 1, "qwen3": 1}
GREEDY_SPECS = {f"{k}.greedy": dataclasses.replace(v, name=f"{k}.greedy", gain=2.0,
                                                   seed=GREEDY_SEEDS[k])
                for k, v in SPECS.items()}
# K-quants: gguf 0.19 cannot write them, so their blocks come from rawloop's own quantizer
# (`build/test_quant quant`); the reference still dequantizes them with gguf, independently of the
# engine. Their blocks are 256 wide, so they need K_SPECS (every matrix dimension a multiple of 256).
K_QTYPES = ["Q4_K", "Q5_K", "Q6_K"]

K_SPECS = {
    "llama_k": Spec("llama_k", "llama", hidden=256, n_layers=2, n_heads=4, n_kv_heads=2,
                    ffn=512, vocab=512, seed=5),
}
ALL_SPECS = {**SPECS, **GREEDY_SPECS, **K_SPECS}

# Weight types the installed gguf package can quantize (Q4_K/Q5_K/Q6_K are dequantize-only in
# gguf 0.19; those are covered once rawloop can write them, through reference_from_gguf).
QTYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0"]
FLOAT_QTYPES = {"F32", "F16", "BF16"}


def hf_config(spec: Spec):
    import transformers
    common = dict(vocab_size=spec.vocab, hidden_size=spec.hidden,
                  intermediate_size=spec.ffn, num_hidden_layers=spec.n_layers,
                  num_attention_heads=spec.n_heads, num_key_value_heads=spec.n_kv_heads,
                  max_position_embeddings=spec.ctx, rms_norm_eps=spec.rms_eps,
                  tie_word_embeddings=spec.tied, bos_token_id=1, eos_token_id=2,
                  hidden_act="silu")
    rope = {"rope_type": "default", "rope_theta": spec.rope_theta}
    if spec.llama3_rope is not None:
        rope = {"rope_type": "llama3", "rope_theta": spec.rope_theta, **spec.llama3_rope}
    if spec.arch == "llama":
        cfg = transformers.LlamaConfig(**common, rope_parameters=rope)
    elif spec.arch == "qwen2":
        cfg = transformers.Qwen2Config(**common, rope_parameters=rope, use_sliding_window=False)
    elif spec.arch == "qwen3":
        cfg = transformers.Qwen3Config(**common, rope_parameters=rope, head_dim=spec.hd,
                                       use_sliding_window=False)
    else:
        raise ValueError(spec.arch)
    cfg._attn_implementation = "eager"
    return cfg


def _empty_hf_model(spec: Spec):
    import transformers
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "qwen3": transformers.Qwen3ForCausalLM}[spec.arch]
    torch.manual_seed(spec.seed)
    model = cls(hf_config(spec)).float().eval()
    return model


def build_hf_model(spec: Spec):
    """Seeded random float32 HF model.

    HF's default init (std 0.02, unit norms, zero biases) gives near-uniform logits, where an
    engine bug hides under tiny numbers and greedy decoding is a coin toss. Here matrices get
    std spec.gain/sqrt(fan_in), embeddings std 0.5 (logits spread over several units), norm
    gains 1 +- 0.2 and biases std 0.3 (a skipped gain or bias shows), all from one generator
    seeded by spec.seed.

    The gain trades two needs. A large gain (2) gives sharp attention and varied greedy
    continuations, but the network then amplifies small perturbations: rounding every matmul
    input to 8 bits (gguf_forward(act_q8=True)) moves the logits by 5-25% of max|logit|, beyond
    the fast path's 3e-2 bound although nothing is wrong. With gain 0.7 that simulated error is
    0.6-1.5e-2, but greedy decoding of the tied models repeats one id. So logits are checked on
    SPECS (gain 0.7) and greedy decoding on GREEDY_SPECS (gain 2, where only the fp32 paths,
    error ~1e-6, are compared).
    """
    model = _empty_hf_model(spec)
    g = torch.Generator().manual_seed(1000 + spec.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * spec.gain / math.sqrt(p.shape[1]))
            else:
                raise AssertionError(f"unexpected parameter {name}")
    if spec.tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


# ------------------------------------------------------------------------------------------------
# Conversion (mirrors convert_hf_to_gguf.py)

def permute_qk(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """HF (rotate_half) rows -> Meta interleaved rows, as convert_hf_to_gguf's LlamaModel.permute:
    within each head, row j of the first half and row j of the second half become rows 2j, 2j+1."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """Inverse of permute_qk."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(spec: Spec) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf's generate_extra_tensors computes it: per
    frequency divisor, 1 for short wavelengths, factor for long ones, smoothed in between."""
    rs = spec.llama3_rope
    base, dim = spec.rope_theta, spec.hd
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rs["factor"]
    low, high = rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def tokenizer_vocab(n_vocab: int):
    """Synthetic SPM vocab: <unk> <s> </s>, 256 byte tokens, then distinct filler pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    fillers = ["\u2581" + c for c in letters] + list(letters)
    fillers += ["\u2581" + a + b for a in letters for b in letters]
    need = n_vocab - len(tokens)
    assert need <= len(fillers), "vocab too large for the filler generator"
    for i, piece in enumerate(fillers[:need]):
        tokens.append(piece)
        types.append(1)
        scores.append(-float(i + 1))
    return tokens, scores, types


def _hf_to_gguf_name(name: str) -> str | None:
    """HF parameter name -> GGUF tensor name (None: not written, e.g. tied lm_head)."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    assert parts[0] == "model" and parts[1] == "layers", name
    bid, rest = parts[2], ".".join(parts[3:])
    sub = {"input_layernorm.weight": "attn_norm.weight",
           "post_attention_layernorm.weight": "ffn_norm.weight",
           "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
           "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight":
           "attn_output.weight", "self_attn.q_proj.bias": "attn_q.bias",
           "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
           "self_attn.q_norm.weight": "attn_q_norm.weight",
           "self_attn.k_norm.weight": "attn_k_norm.weight",
           "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
           "mlp.down_proj.weight": "ffn_down.weight"}[rest]
    return f"blk.{bid}.{sub}"


def _hf_params(model, spec: Spec) -> dict:
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()
          if not k.endswith("rotary_emb.inv_freq")}
    if spec.tied:
        sd.pop("lm_head.weight", None)
    return sd


FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "BF16": 32}  # llama_ftype (general.file_type)


def rawloop_quantize(arr: np.ndarray, qtype: str) -> np.ndarray:
    """Quantizes a (rows, cols) float matrix with rawloop's quantizer: (rows, row_bytes) uint8."""
    import subprocess
    import tempfile
    from conftest import BUILD
    rows = arr.shape[0]
    with tempfile.TemporaryDirectory() as d:
        src, dst = pathlib.Path(d) / "in.f32", pathlib.Path(d) / "out.bin"
        np.ascontiguousarray(arr, dtype="<f4").tofile(src)
        subprocess.run([str(BUILD / "test_quant"), "quant", qtype, str(src), str(dst)], check=True,
                       capture_output=True)
        return np.frombuffer(dst.read_bytes(), dtype=np.uint8).reshape(rows, -1)


def write_gguf(model, spec: Spec, path, qtype: str = "F32") -> None:
    """Writes model as GGUF with every 2-D weight in qtype (norms, biases, rope_freqs in F32)."""
    qt = gguf.GGMLQuantizationType[qtype]
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(f"rawloop-oracle-{spec.name}")
    w.add_context_length(spec.ctx)
    w.add_embedding_length(spec.hidden)
    w.add_block_count(spec.n_layers)
    w.add_feed_forward_length(spec.ffn)
    w.add_head_count(spec.n_heads)
    w.add_head_count_kv(spec.n_kv_heads)
    w.add_layer_norm_rms_eps(spec.rms_eps)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_rope_dimension_count(spec.hd)
    if spec.arch == "qwen3":
        w.add_key_length(spec.hd)
        w.add_value_length(spec.hd)
    w.add_vocab_size(spec.vocab)
    if qtype in FILE_TYPE:
        w.add_file_type(FILE_TYPE[qtype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, scores, types = tokenizer_vocab(spec.vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    for name, arr in _hf_params(model, spec).items():
        gname = _hf_to_gguf_name(name)
        if spec.arch == "llama" and gname.endswith(("attn_q.weight", "attn_k.weight")):
            kv = spec.n_heads if gname.endswith("attn_q.weight") else spec.n_kv_heads
            arr = permute_qk(arr, spec.n_heads, kv)
        if arr.ndim == 1 or qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gname, np.ascontiguousarray(arr, dtype=np.float32))
        elif qtype in K_QTYPES:
            w.add_tensor(gname, rawloop_quantize(arr, qtype), raw_dtype=qt)
        else:
            data = quantize(np.ascontiguousarray(arr, dtype=np.float32), qt)
            w.add_tensor(gname, data, raw_dtype=qt)
    if spec.llama3_rope is not None:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(spec))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------------------------
# Reading back

def read_gguf_tensors(path) -> dict:
    """{name: (float32 ndarray in numpy (rows, cols) order, type name)}, dequantized from the file."""
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))   # ne0 is the fast axis
        deq = dequantize(np.asarray(t.data), t.tensor_type)
        out[t.name] = (np.asarray(deq, dtype=np.float32).reshape(shape), t.tensor_type.name)
    return out


def reference_from_gguf(path, spec: Spec):
    """Fresh HF model whose weights are the dequantized tensors of the GGUF at path."""
    tensors = read_gguf_tensors(path)
    model = _empty_hf_model(spec)
    sd = model.state_dict()
    seen = set()
    with torch.no_grad():
        for name in list(sd):
            if name.endswith("rotary_emb.inv_freq"):
                continue
            if spec.tied and name == "lm_head.weight":
                continue
            gname = _hf_to_gguf_name(name)
            arr = tensors[gname][0]
            if spec.arch == "llama" and gname.endswith(("attn_q.weight", "attn_k.weight")):
                kv = spec.n_heads if gname.endswith("attn_q.weight") else spec.n_kv_heads
                arr = unpermute_qk(arr, spec.n_heads, kv)
            assert tuple(sd[name].shape) == arr.shape, (name, sd[name].shape, arr.shape)
            sd[name].copy_(torch.from_numpy(np.array(arr, dtype=np.float32)))
            seen.add(gname)
    extra = set(tensors) - seen - {"rope_freqs.weight"}
    assert not extra, f"tensors in file not used by the reference: {sorted(extra)}"
    if spec.tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


# ------------------------------------------------------------------------------------------------
# Reference outputs

@torch.no_grad()
def hf_logits(model, ids) -> np.ndarray:
    """[len(ids), vocab] float32 logits; row i after feeding ids[0..i]."""
    out = model(torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def hf_greedy(model, prompt, n: int):
    """Greedy continuation of prompt (n ids, argmax each step, full recompute) and, per step, the
    gap between the best and second-best logit divided by max|logit| at that step."""
    seq = list(prompt)
    gaps = []
    for _ in range(n):
        row = hf_logits(model, seq)[-1]
        top2 = np.sort(row)[-2:]
        gaps.append(float((top2[1] - top2[0]) / np.abs(row).max()))
        seq.append(int(np.argmax(row)))
    return seq[len(prompt):], gaps


def rel_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """Error metric of the oracle tests: for each position p,
    max_v |ours[p, v] - ref[p, v]| / max_v |ref[p, v]|, and the maximum of that over p.
    Scaling per position makes the bound independent of how large the logits of a row are."""
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    per_pos = np.abs(ours - ref).max(axis=1) / np.abs(ref).max(axis=1)
    return float(per_pos.max())


# ------------------------------------------------------------------------------------------------
# Independent numpy forward pass with llama.cpp's reading of the file

def _rms(x, w, eps):
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps) * w


def _rope(x, pos, theta, factors, neox):
    """x: [T, H, D]. Normal mode rotates pairs (2i, 2i+1); NEOX rotates (i, i + D/2)."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if factors is not None:
        inv = inv / factors
    ang = pos[:, None] * inv[None, :]                      # [T, D/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def _q8_rows(x):
    """x rounded the way an 8-bit activation path does: Q8_0 blocks of 32 along the last axis."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
    q = dequantize(quantize(flat, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0)
    return q.reshape(x.shape).astype(np.float64)


def gguf_forward(path, ids, act_q8: bool = False) -> np.ndarray:
    """Logits [len(ids), vocab] computed from the GGUF file alone (float64), reading metadata
    keys and tensors the way llama.cpp does. Knows llama/qwen2/qwen3 only. act_q8 rounds the
    input of every matrix product to Q8_0 first, which estimates the error an engine's 8-bit
    activation path should have on this model."""
    r = gguf.GGUFReader(str(path))

    def kv(key):
        f = r.fields[key]
        return f.contents()

    arch = kv("general.architecture")
    n_layer = int(kv(f"{arch}.block_count"))
    n_head = int(kv(f"{arch}.attention.head_count"))
    n_kv = int(kv(f"{arch}.attention.head_count_kv"))
    eps = float(kv(f"{arch}.attention.layer_norm_rms_epsilon"))
    theta = float(kv(f"{arch}.rope.freq_base"))
    n_embd = int(kv(f"{arch}.embedding_length"))
    hd = int(kv(f"{arch}.attention.key_length")) if f"{arch}.attention.key_length" in r.fields \
        else n_embd // n_head
    t = {k: v[0].astype(np.float64) for k, v in read_gguf_tensors(path).items()}
    aq = _q8_rows if act_q8 else (lambda a: a)
    factors = t.get("rope_freqs.weight")
    neox = arch != "llama"
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = t["token_embd.weight"][np.asarray(ids)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(n_layer):
        p = f"blk.{i}."
        h = _rms(x, t[p + "attn_norm.weight"], eps)
        q = aq(h) @ t[p + "attn_q.weight"].T + t.get(p + "attn_q.bias", 0)
        k = aq(h) @ t[p + "attn_k.weight"].T + t.get(p + "attn_k.bias", 0)
        v = aq(h) @ t[p + "attn_v.weight"].T + t.get(p + "attn_v.bias", 0)
        q, k, v = q.reshape(T, n_head, hd), k.reshape(T, n_kv, hd), v.reshape(T, n_kv, hd)
        if p + "attn_q_norm.weight" in t:
            q = _rms(q, t[p + "attn_q_norm.weight"], eps)
            k = _rms(k, t[p + "attn_k_norm.weight"], eps)
        q, k = _rope(q, pos, theta, factors, neox), _rope(k, pos, theta, factors, neox)
        rep = n_head // n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, n_head * hd)
        x = x + aq(o) @ t[p + "attn_output.weight"].T
        h = _rms(x, t[p + "ffn_norm.weight"], eps)
        gte = aq(h) @ t[p + "ffn_gate.weight"].T
        up = aq(h) @ t[p + "ffn_up.weight"].T
        x = x + aq(gte / (1 + np.exp(-gte)) * up) @ t[p + "ffn_down.weight"].T
    x = _rms(x, t["output_norm.weight"], eps)
    out_w = t.get("output.weight", t["token_embd.weight"])
    return (aq(x) @ out_w.T).astype(np.float32)


def assert_shape_keys(kv, spec):
    """The {arch}.* hyper-parameter keys convert_hf_to_gguf writes, against the spec (kv: GGUF
    key -> value as gguf.GGUFReader's field.contents() gives them)."""
    a = spec.arch
    assert kv["general.architecture"] == a
    assert kv[f"{a}.context_length"] == spec.ctx
    assert kv[f"{a}.embedding_length"] == spec.hidden
    assert kv[f"{a}.block_count"] == spec.n_layers
    assert kv[f"{a}.feed_forward_length"] == spec.ffn
    assert kv[f"{a}.attention.head_count"] == spec.n_heads
    assert kv[f"{a}.attention.head_count_kv"] == spec.n_kv_heads
    assert kv[f"{a}.rope.dimension_count"] == spec.hd
    assert abs(kv[f"{a}.attention.layer_norm_rms_epsilon"] - spec.rms_eps) <= 1e-12 * max(1.0, spec.rms_eps)
    assert abs(kv[f"{a}.rope.freq_base"] - spec.rope_theta) <= 1e-6 * spec.rope_theta

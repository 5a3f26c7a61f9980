"""The Llama-architecture model rawloop trains (PyTorch), laid out as GGUF's "llama" arch expects.

RMSNorm, SwiGLU, no biases, tied input/output embedding (GGUF file has no output.weight), and
RoPE on adjacent pairs (x[2i], x[2i+1]) as in Meta's original llama / llama2.c, which is what
llama.cpp's LLAMA_ROPE_TYPE_NORM computes: attn_q / attn_k export without any permutation.
Tensor names in state_dict() are the GGUF names, so export is a straight copy.
"""
import dataclasses
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    vocab: int = 4096
    dim: int = 320
    n_layers: int = 8
    n_heads: int = 5
    hidden: int = 768          # SwiGLU inner width
    ctx: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    dropout: float = 0.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def to_json(self):
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(d):
        return Config(**{k: d[k] for k in (f.name for f in dataclasses.fields(Config)) if k in d})


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


def rope_tables(cfg, device):
    """cos/sin [ctx, head_dim/2]: pair i rotates by pos * theta^(-2i/head_dim)."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(cfg.ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float().to(device), torch.sin(ang).float().to(device)


def apply_rope(x, cos, sin):
    """x: [B, H, T, hd]; rotates adjacent pairs (2i, 2i+1)."""
    T = x.shape[2]
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cos[:T], sin[:T]
    y = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return y.flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.dim
        self.cfg = cfg
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.attn_q = nn.Linear(d, d, bias=False)
        self.attn_k = nn.Linear(d, d, bias=False)
        self.attn_v = nn.Linear(d, d, bias=False)
        self.attn_output = nn.Linear(d, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.ffn_gate = nn.Linear(d, cfg.hidden, bias=False)
        self.ffn_up = nn.Linear(d, cfg.hidden, bias=False)
        self.ffn_down = nn.Linear(cfg.hidden, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        H, hd = self.cfg.n_heads, self.cfg.head_dim
        h = self.attn_norm(x)
        q = self.attn_q(h).view(B, T, H, hd).transpose(1, 2)
        k = self.attn_k(h).view(B, T, H, hd).transpose(1, 2)
        v = self.attn_v(h).view(B, T, H, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        p = self.cfg.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        a = a.transpose(1, 2).reshape(B, T, D)
        x = x + F.dropout(self.attn_output(a), p, self.training)
        h = self.ffn_norm(x)
        f = self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))
        return x + F.dropout(f, p, self.training)


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.vocab, cfg.dim)
        self.blk = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.output_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        cos, sin = rope_tables(cfg, "cpu")
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init()

    def _init(self):
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * self.cfg.n_layers) if n.endswith(("attn_output.weight",
                                                                        "ffn_down.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, idx):
        x = self.token_embd(idx)
        p = self.cfg.dropout if self.training else 0.0
        x = F.dropout(x, p, self.training)
        for b in self.blk:
            x = b(x, self.rope_cos, self.rope_sin)
        x = self.output_norm(x)
        return x @ self.token_embd.weight.t().to(x.dtype)   # tied output head

    def n_params(self):
        return sum(p.numel() for p in self.parameters())


def gguf_name(torch_name):
    """'blk.3.attn_q.weight' is already GGUF's name; only the top-level ones need no change."""
    return torch_name


def load_state(model, tensors):
    """tensors: {gguf name: torch tensor}; fills model (float32), refusing missing/extra names."""
    sd = model.state_dict()
    missing = set(sd) - set(tensors)
    extra = set(tensors) - set(sd)
    if missing or extra:
        raise ValueError(f"state mismatch: missing {sorted(missing)[:5]} extra {sorted(extra)[:5]}")
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(sd[k].shape):
            raise ValueError(f"{k}: shape {tuple(v.shape)} != {tuple(sd[k].shape)}")
        sd[k].copy_(v.to(sd[k].dtype))


def save_config(path, cfg, extra=None):
    d = {"config": cfg.to_json()}
    if extra:
        d.update(extra)
    with open(path, "w") as f:
        json.dump(d, f, indent=1)

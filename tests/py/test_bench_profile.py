"""`rawloop bench --profile` on the CPU: a per-step table for decoding and one for a prompt. The
bytes each step says it read are checked against the model file as the gguf package reads it
(the matrices' sizes, the KV cache's rows); times are only required to be positive (speed
belongs to benchmarks, not tests)."""
import json

import gguf
import pytest

from conftest import ROOT

MODEL = ROOT / "models" / "rawloop-small.gguf"
MATRIX_STEPS = {"qkv": ("attn_q", "attn_k", "attn_v"), "wo+residual": ("attn_output",),
                "gate+up": ("ffn_gate", "ffn_up"), "down+residual": ("ffn_down",)}


def field(r, key):
    return int(r.fields[key].parts[-1][0])


@pytest.fixture(scope="module")
def shape():
    r = gguf.GGUFReader(str(MODEL))
    t = {x.name: int(x.n_bytes) for x in r.tensors}
    n_layer = field(r, "llama.block_count")
    kv_dim = field(r, "llama.attention.head_count_kv") * field(r, "llama.embedding_length") // \
        field(r, "llama.attention.head_count")
    per_step = {s: sum(t[f"blk.{l}.{m}.weight"] for l in range(n_layer) for m in ms)
                for s, ms in MATRIX_STEPS.items()}
    head = t.get("output.weight", t["token_embd.weight"])  # tied embeddings: the head is token_embd
    return n_layer, kv_dim, per_step, head


def test_cpu_profile_steps_and_bytes(rawloop, shape):
    n_layer, kv_dim, per_step, head = shape
    np_, ng = 12, 3
    p = rawloop("bench", "--device", "cpu", "-m", MODEL, "-p", np_, "-n", ng, "-r", "1", "-t", "1",
                "--no-ceiling", "--profile", "--json")
    d = json.loads(p.stdout)
    assert d["launches_per_token"] is None  # a GPU count; the CPU launches no kernels
    assert d["launches_per_chunk"] is None and d["chunk_tokens"] is None
    dec = {r["step"]: r for r in d["profile"]}
    pro = {r["step"]: r for r in d["prompt_profile"]}
    kv_row = 2 * kv_dim * 2  # k and v, f16
    for rows in (dec, pro):
        assert set(rows) == {"embed", "norm+quantize", "qkv", "rope+kv", "attention", "wo+residual",
                             "gate+up", "silu+quantize", "down+residual", "lm_head"}
    # decoding: per token every matrix once, the KV cache up to each token's position (0, 1, 2)
    for s, b in per_step.items():
        assert dec[s]["steps_per_token"] == n_layer and dec[s]["bytes_per_token"] == pytest.approx(b), s
        assert dec[s]["us_per_token"] > 0, s
    assert dec["lm_head"]["bytes_per_token"] == pytest.approx(head)
    assert dec["norm+quantize"]["steps_per_token"] == 3 * n_layer + 1
    assert dec["attention"]["bytes_per_token"] == pytest.approx(n_layer * kv_row * (1 + 2 + 3) / ng)
    # one prompt of 12 tokens in one batch: the weights once, token s reads positions 0..s
    for s, b in per_step.items():
        assert pro[s]["calls"] == n_layer and pro[s]["bytes"] == pytest.approx(b), s
    assert pro["lm_head"]["calls"] == 1 and pro["lm_head"]["bytes"] == pytest.approx(head)
    assert pro["attention"]["bytes"] == pytest.approx(n_layer * kv_row * np_ * (np_ + 1) / 2)
    assert all(r["us"] > 0 for r in pro.values())


def test_cpu_profile_table_and_refusal(rawloop):
    p = rawloop("bench", "--device", "cpu", "-m", MODEL, "-p", "8", "-n", "0", "-r", "1", "-t", "1",
                "--no-ceiling", "--profile")
    out = p.stdout.decode()
    assert "per-step profile of one prompt of 8 tokens at depth 0 (the wall clock after every step" in out
    assert "per-step profile over" not in out  # no generation test, no decoding table
    p = rawloop("bench", "--device", "cpu", "-m", MODEL, "-p", "0", "-n", "0", "-r", "1", "--profile",
                check=False)
    assert p.returncode == 1 and b"--profile needs a generation test (-n > 0), or a prompt" in p.stderr


def test_bench_ctx_size(rawloop):
    """-c sets the KV cache (reported as n_ctx); by default it is what the tests need; one too
    small for them is refused with the sizes named."""
    base = ("bench", "--device", "cpu", "-m", MODEL, "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--no-ceiling",
            "--json")
    assert json.loads(rawloop(*base).stdout)["n_ctx"] == 9  # -d 0 + max(-p 8, -n 2) + 1
    assert json.loads(rawloop(*base, "-c", "300").stdout)["n_ctx"] == 300
    assert json.loads(rawloop(*base, "-d", "4", "-c", "13").stdout)["n_ctx"] == 13
    p = rawloop(*base, "-d", "4", "-c", "12", check=False)
    assert p.returncode == 2
    assert b"-c 12 is too small: the tests need 13 tokens of context" in p.stderr

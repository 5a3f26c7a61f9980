#!/usr/bin/env python3
"""Held-out perplexity of GGUF files as PyTorch computes it, with llama-perplexity's semantics.

    python3 tools/eval_ppl.py --text models/heldout.txt --ctx 512 --json models/model-quality.json \
        FILE.gguf [FILE.gguf ...]

Everything comes from the GGUF file alone: the weights are dequantized with gguf.quants (so a Q8_0
file is scored with exactly the values it stores) and loaded into tools/rl_model.py's Llama; the
tokenizer is rebuilt from tokenizer.ggml.tokens / merges with HF tokenizers.

Semantics (llama.cpp's perplexity tool): tokens = [BOS] + tokenize(text) (add_bos_token is true;
no special-token parsing), split into floor(n / ctx) non-overlapping chunks, the first token of
each chunk replaced by BOS; in each chunk positions ctx/2 .. ctx-2 predict tokens ctx/2+1 .. ctx-1.
PPL = exp(mean NLL); error = PPL * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)).
"""
import argparse
import hashlib
import json
import math
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from rl_model import Config, Llama, load_state  # noqa: E402

import gguf  # noqa: E402


def field(r, key):
    return r.fields[key].contents()


def load_gguf(path):
    """(model, tokenizer, bos id, tensor types) from one GGUF file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    r = gguf.GGUFReader(str(path))
    cfg = Config(vocab=int(field(r, "llama.vocab_size")),
                 dim=int(field(r, "llama.embedding_length")),
                 n_layers=int(field(r, "llama.block_count")),
                 n_heads=int(field(r, "llama.attention.head_count")),
                 hidden=int(field(r, "llama.feed_forward_length")),
                 ctx=int(field(r, "llama.context_length")),
                 rope_theta=float(field(r, "llama.rope.freq_base")),
                 norm_eps=float(field(r, "llama.attention.layer_norm_rms_epsilon")))
    assert int(field(r, "llama.attention.head_count_kv")) == cfg.n_heads
    tensors, types = {}, {}
    for t in r.tensors:
        a = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape)]     # GGUF ne[] is innermost first
        tensors[t.name] = torch.from_numpy(a.reshape(shape).copy())
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    model = Llama(cfg)
    load_state(model, tensors)
    model.eval()
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in field(r, "tokenizer.ggml.merges")]
    ttypes = field(r, "tokenizer.ggml.token_type")
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    assert field(r, "tokenizer.ggml.pre") == "gpt-2"
    # control tokens are not matched in plain text (no special-token parsing), so they are
    # not registered as added tokens here.
    assert all(ttypes[i] == gguf.TokenType.CONTROL for i in (0, 1))
    return model, tok, int(field(r, "tokenizer.ggml.bos_token_id")), types


@torch.no_grad()
def perplexity(model, ids, bos, ctx, batch=8):
    n_chunk = len(ids) // ctx
    t = torch.tensor(ids[: n_chunk * ctx], dtype=torch.long).view(n_chunk, ctx).clone()
    t[:, 0] = bos
    first = ctx // 2
    nll = []
    for i in range(0, n_chunk, batch):
        x = t[i:i + batch]
        logits = model(x).double()
        lp = torch.log_softmax(logits[:, first:ctx - 1], dim=-1)
        tgt = x[:, first + 1:ctx]
        nll.append(-lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).flatten())
    nll = torch.cat(nll)
    m, m2, n = nll.mean().item(), (nll * nll).mean().item(), nll.numel()
    ppl = math.exp(m)
    err = ppl * math.sqrt(max(m2 - m * m, 0.0) / (n - 1))
    return ppl, err, n_chunk, n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--json", help="merge results into this JSON file")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    text = pathlib.Path(args.text).read_text(encoding="utf-8")
    results = {}
    for f in args.files:
        t0 = time.time()
        model, tok, bos, types = load_gguf(f)
        ids = [bos] + tok.encode(text, add_special_tokens=False).ids
        ppl, err, n_chunk, n = perplexity(model, ids, bos, args.ctx)
        p = pathlib.Path(f)
        results[p.name] = {"ppl": ppl, "err": err, "tensor_types": types,
                           "params": model.n_params(), "bytes": p.stat().st_size,
                           "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                           "text_tokens_with_bos": len(ids), "chunks": n_chunk,
                           "scored_tokens": n}
        print(f"{p.name}: PPL = {ppl:.4f} +/- {err:.5f} ({n_chunk} chunks, {n} scored tokens, "
              f"{time.time() - t0:.1f}s)", flush=True)
    if args.json:
        jp = pathlib.Path(args.json)
        d = json.loads(jp.read_text()) if jp.exists() else {}
        d.setdefault("perplexity", {}).update({"text": args.text, "ctx": args.ctx,
                                               "semantics": "llama-perplexity: [BOS]+tokens, "
                                               "chunks of ctx with BOS first, second half "
                                               "scored"})
        d["perplexity"].setdefault("files", {}).update(results)
        jp.write_text(json.dumps(d, indent=1) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Exports a tools/train.py run to GGUF (llama arch, gpt2 byte-level BPE tokenizer).

    python3 tools/export_gguf.py RUN_DIR OUT_DIR

writes OUT_DIR/rawloop-small-f16.gguf, rawloop-small.gguf (Q8_0), rawloop-draft-f16.gguf and
rawloop-draft.gguf (Q8_0). Matrices go to F16 / Q8_0, norm vectors stay F32 (as llama.cpp's own
converter and quantizer do). Q8_0 is quantized from the float32 training weights with
gguf.quants.quantize.
"""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rl_data  # noqa: E402
from rl_model import Config  # noqa: E402

import gguf  # noqa: E402

NAMES = {"main": "rawloop-small", "draft": "rawloop-draft"}


def load_weights(run, files):
    from safetensors.numpy import load_file
    w = {}
    for f in files:
        w.update(load_file(str(run / f)))
    return w


def tokenizer_fields(tok_json):
    """tokens (by id), token types, merges as 'a b' strings, from a HF tokenizer.json."""
    d = json.loads(pathlib.Path(tok_json).read_text(encoding="utf-8"))
    vocab = d["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["id"] for a in d.get("added_tokens", []) if a.get("special")}
    for a in d.get("added_tokens", []):
        if a["id"] >= len(tokens):
            tokens += [None] * (a["id"] + 1 - len(tokens))
        tokens[a["id"]] = a["content"]
    assert all(t is not None for t in tokens)
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
             for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    return tokens, types, merges


def write(path, name, cfg, weights, tok, qtype, train_info):
    tokens, types, merges = tok
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_description("rawloop's own small model, trained on tinyshakespeare + War and Peace "
                      "(public domain); see docs/MODEL.md")
    w.add_context_length(cfg.ctx)
    w.add_embedding_length(cfg.dim)
    w.add_block_count(cfg.n_layers)
    w.add_feed_forward_length(cfg.hidden)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_vocab_size(cfg.vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if qtype == gguf.GGMLQuantizationType.F16
                    else gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    # "gpt-2" selects exactly the GPT-2 regex in llama.cpp-compatible engines (its "default"
    # is a different, multi-regex split), matching the HF ByteLevel pre-tokenizer we trained.
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(rl_data.BOS))
    w.add_eos_token_id(tokens.index(rl_data.EOS))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    order = ["token_embd.weight"] + [k for i in range(cfg.n_layers) for k in (
        f"blk.{i}.attn_norm.weight", f"blk.{i}.attn_q.weight", f"blk.{i}.attn_k.weight",
        f"blk.{i}.attn_v.weight", f"blk.{i}.attn_output.weight", f"blk.{i}.ffn_norm.weight",
        f"blk.{i}.ffn_gate.weight", f"blk.{i}.ffn_up.weight", f"blk.{i}.ffn_down.weight")] + [
        "output_norm.weight"]
    assert set(order) == set(weights), sorted(set(order) ^ set(weights))
    for k in order:
        a = np.ascontiguousarray(weights[k].astype(np.float32))
        if a.ndim == 1:
            w.add_tensor(k, a)
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(k, a.astype(np.float16))
        else:
            w.add_tensor(k, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    log = json.loads((run / "train_log.json").read_text())
    tok = tokenizer_fields(run / "tokenizer.json")
    for kind, base in NAMES.items():
        m = log["models"][kind]
        cfg = Config.from_json(m["config"])
        wts = load_weights(run, m["files"])
        for suffix, qt in (("-f16", gguf.GGMLQuantizationType.F16),
                           ("", gguf.GGMLQuantizationType.Q8_0)):
            p = out / f"{base}{suffix}.gguf"
            write(p, base, cfg, wts, tok, qt, m)
            print(f"{p}: {p.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()

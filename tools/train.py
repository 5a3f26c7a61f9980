#!/usr/bin/env python3
"""Trains rawloop's own models (main + draft, one shared tokenizer); see docs/MODEL.md.

    python3 tools/train.py --out DIR            # full run (an H200 takes a few minutes)
    python3 tools/train.py --out DIR --smoke    # a few CPU steps of tiny models, end to end

Writes to DIR: tokenizer.json, heldout.txt, {main,draft}-NN.safetensors (float32 weights, sharded
under 15 MB so that each file comes back from the device), train_log.json (configs, loss curves of
every run, the chosen runs, samples, timings). tools/export_gguf.py turns that into GGUF files.

Each model is trained once per entry of its grid (dropout, epochs); the run with the lowest
validation loss (a slice of the training side, never the held-out test text) is kept, and within a
run the checkpoint with the lowest validation loss. Held-out (test) loss is only logged, for the
curves.
"""
import argparse
import json
import math
import os
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rl_data  # noqa: E402
from rl_model import Config, Llama  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]

MAIN = dict(dim=320, n_layers=8, n_heads=5, hidden=768)
DRAFT = dict(dim=128, n_layers=4, n_heads=4, hidden=352)
GRID_MAIN = "0.1:8,0.1:16,0.2:16,0.2:32,0.3:32"
GRID_DRAFT = "0.0:16,0.05:32"
SAMPLE_PROMPTS = ["ROMEO:\n", "KING HENRY:\nWhat", "Prince Andrew", "\"Well, Prince, so Genoa"]


def parse_grid(s):
    return [(float(d), float(e)) for d, e in (x.split(":") for x in s.split(","))]


def windows_eval(tokens, ctx, bos):
    """Non-overlapping ctx windows (x with BOS in front, y shifted by one), remainder dropped."""
    n = (len(tokens) - 1) // ctx
    t = torch.tensor(tokens[: n * ctx + 1], dtype=torch.long)
    x = torch.stack([t[i * ctx: (i + 1) * ctx] for i in range(n)])
    y = torch.stack([t[i * ctx + 1: (i + 1) * ctx + 1] for i in range(n)])
    x[:, 0] = bos
    return x, y


@torch.no_grad()
def eval_loss(model, xy, dev, bs, amp):
    model.eval()
    x, y = xy
    tot, cnt = 0.0, 0
    for i in range(0, len(x), bs):
        xb, yb = x[i:i + bs].to(dev), y[i:i + bs].to(dev)
        with amp():
            logits = model(xb)
        tot += F.cross_entropy(logits.float().flatten(0, 1), yb.flatten(), reduction="sum").item()
        cnt += yb.numel()
    model.train()
    return tot / max(cnt, 1)


@torch.no_grad()
def generate(model, tok, prompt, n, dev, temp=0.8, top_k=40, seed=0):
    model.eval()
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = [0] + rl_data.encode(tok, prompt)          # BOS + prompt, as `rawloop run` does
    ctx = model.cfg.ctx
    for _ in range(n):
        x = torch.tensor([ids[-ctx:]], device=dev)
        logits = model(x)[0, -1].float().cpu() / temp
        v, ix = torch.topk(logits, top_k)
        p = torch.softmax(v, -1)
        ids.append(int(ix[torch.multinomial(p, 1, generator=g)]))
        if ids[-1] == 1:
            break
    return tok.decode(ids[1:], skip_special_tokens=True)


def train_one(name, cfg, epochs, data, args, dev, amp, seed):
    torch.manual_seed(seed)
    model = Llama(cfg).to(dev)
    train = data["train"]
    ctx, B = cfg.ctx, args.batch
    steps_per_epoch = max(1, (len(train) - 1) // (ctx * B))
    steps = max(2, int(round(epochs * steps_per_epoch))) if not args.smoke else args.smoke_steps
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=dev.type == "cuda")
    warm = min(args.warmup, steps // 10 + 1)

    def lr_at(s):
        if s < warm:
            return args.lr * (s + 1) / warm
        q = (s - warm) / max(1, steps - warm)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))

    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    train_dev = train.to(dev)
    offs = torch.arange(ctx, device=dev)
    eval_every = max(1, steps_per_epoch // 2) if not args.smoke else max(1, steps // 2)
    curve = {"step": [], "train": [], "val": [], "test": []}
    best = (float("inf"), -1, None)
    run_loss, run_n = 0.0, 0
    t0 = time.time()
    print(f"[{name}] dropout={cfg.dropout} epochs={epochs} steps={steps} "
          f"params={model.n_params():,}", flush=True)
    for s in range(steps + 1):
        if s % eval_every == 0 or s == steps:
            vl = eval_loss(model, data["val"], dev, args.eval_batch, amp)
            tl = eval_loss(model, data["test"], dev, args.eval_batch, amp)
            tr = run_loss / run_n if run_n else float("nan")
            curve["step"].append(s)
            curve["train"].append(tr)
            curve["val"].append(vl)
            curve["test"].append(tl)
            run_loss, run_n = 0.0, 0
            if vl < best[0]:
                best = (vl, s, {k: v.detach().float().cpu().clone()
                                for k, v in model.state_dict().items()})
            print(f"[{name}] step {s:5d}/{steps} lr {lr_at(min(s, steps - 1)):.2e} "
                  f"train {tr:.4f} val {vl:.4f} test {tl:.4f} ({time.time() - t0:.1f}s)", flush=True)
        if s == steps:
            break
        for g_ in opt.param_groups:
            g_["lr"] = lr_at(s)
        ix = torch.randint(0, len(train) - ctx - 1, (B,), generator=gen).to(dev)
        pos = ix[:, None] + offs[None, :]
        x, y = train_dev[pos], train_dev[pos + 1]
        x[:, 0] = 0                                   # BOS first, as in evaluation and generation
        with amp():
            logits = model(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item() if (s % 10 == 0 or s == steps - 1) else 0.0
        run_n += 1 if (s % 10 == 0 or s == steps - 1) else 0
    secs = time.time() - t0
    model.load_state_dict({k: v.to(dev) for k, v in best[2].items()})
    return model, {"dropout": cfg.dropout, "epochs": epochs, "steps": steps,
                   "steps_per_epoch": steps_per_epoch, "best_step": best[1],
                   "best_val": best[0], "seconds": secs, "curve": curve}


def save_sharded(out, prefix, state, limit=15_000_000):
    from safetensors.torch import save_file
    shards, cur, size = [], {}, 0
    for k, v in state.items():
        nb = v.numel() * 4
        if cur and size + nb > limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = v.float().contiguous().cpu()
        size += nb
    shards.append(cur)
    names = []
    for i, sh in enumerate(shards):
        fn = f"{prefix}-{i:02d}.safetensors"
        save_file(sh, str(out / fn))
        names.append(fn)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=None, help="folder with the texts (default ../shared/data, "
                    "else .dev/data)")
    ap.add_argument("--tokenizer", default=None, help="reuse this tokenizer.json")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--grid-main", default=GRID_MAIN, help="dropout:epochs,...")
    ap.add_argument("--grid-draft", default=GRID_DRAFT)
    ap.add_argument("--time-budget", type=float, default=1e9,
                    help="seconds after which no further grid entry starts")
    ap.add_argument("--smoke", action="store_true", help="tiny models, few steps (CPU check)")
    ap.add_argument("--smoke-steps", type=int, default=4)
    args = ap.parse_args()

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = pathlib.Path(args.data) if args.data else (ROOT.parent / "shared" / "data")
    if not (data_dir / rl_data.SOURCES[0]).exists():
        data_dir = ROOT / ".dev" / "data"
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

        def amp():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        import contextlib
        amp = contextlib.nullcontext
    hw = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print(f"device {hw}, torch {torch.__version__}, data {data_dir}", flush=True)

    t_all = time.time()
    splits = rl_data.load_splits(data_dir)
    (out / "heldout.txt").write_text(rl_data.heldout_text(splits), encoding="utf-8")
    if args.tokenizer:
        tok = rl_data.load_tokenizer(args.tokenizer)
    else:
        t0 = time.time()
        tok = rl_data.train_tokenizer([splits[n][p] for n in rl_data.SOURCES
                                       for p in ("train", "val")], args.vocab)
        print(f"tokenizer: {tok.get_vocab_size()} tokens in {time.time() - t0:.1f}s", flush=True)
    tok.save(str(out / "tokenizer.json"))
    bos, eos = tok.token_to_id(rl_data.BOS), tok.token_to_id(rl_data.EOS)
    assert (bos, eos) == (0, 1), (bos, eos)

    train_ids, val_ids = [], []
    counts = {}
    for n in rl_data.SOURCES:
        tr = rl_data.encode(tok, splits[n]["train"])
        va = rl_data.encode(tok, splits[n]["val"])
        te = rl_data.encode(tok, splits[n]["test"])
        counts[n] = {"train_tokens": len(tr), "val_tokens": len(va), "test_tokens": len(te),
                     "train_chars": len(splits[n]["train"]), "val_chars": len(splits[n]["val"]),
                     "test_chars": len(splits[n]["test"])}
        train_ids += tr + [eos]
        val_ids += va + [eos]
    test_ids = [bos] + rl_data.encode(tok, rl_data.heldout_text(splits))
    print(json.dumps(counts), flush=True)

    log = {"device": hw, "torch": torch.__version__, "seed": args.seed, "batch": args.batch,
           "lr": args.lr, "wd": args.wd, "warmup": args.warmup, "vocab": tok.get_vocab_size(),
           "counts": counts, "heldout_tokens": len(test_ids), "models": {}}
    shapes = {"main": MAIN, "draft": DRAFT}
    grids = {"main": parse_grid(args.grid_main), "draft": parse_grid(args.grid_draft)}
    if args.smoke:
        shapes = {"main": dict(dim=64, n_layers=2, n_heads=2, hidden=128),
                  "draft": dict(dim=32, n_layers=1, n_heads=2, hidden=64)}
        grids = {k: v[:2] for k, v in grids.items()}
    for kind in ("draft", "main"):
        base = Config(vocab=tok.get_vocab_size(), ctx=512 if not args.smoke else 64, **shapes[kind])
        data = {"train": torch.tensor(train_ids, dtype=torch.long),
                "val": windows_eval(val_ids, base.ctx, bos),
                "test": windows_eval(test_ids, base.ctx, bos)}
        runs, best_model, best_i = [], None, -1
        for i, (dp, ep) in enumerate(grids[kind]):
            if runs and time.time() - t_all > args.time_budget:
                print(f"[{kind}] time budget spent: skipping {dp}:{ep}", flush=True)
                continue
            cfg = Config(**{**base.to_json(), "dropout": dp})
            model, info = train_one(f"{kind}{i}", cfg, ep, data, args, dev, amp,
                                    args.seed + 100 * i + (0 if kind == "main" else 7))
            runs.append(info)
            if best_i < 0 or info["best_val"] < runs[best_i]["best_val"]:
                best_i, best_model = i, model
            else:
                del model
        r = runs[best_i]
        print(f"[{kind}] chosen run {best_i}: dropout {r['dropout']} epochs {r['epochs']} "
              f"best step {r['best_step']} val {r['best_val']:.4f}", flush=True)
        samples = [{"prompt": p, "text": generate(best_model, tok, p, 80 if not args.smoke else 8,
                                                  dev, seed=args.seed + j)}
                   for j, p in enumerate(SAMPLE_PROMPTS)]
        for s in samples:
            print(f"--- {kind} sample ---\n{s['text']}", flush=True)
        cfg = best_model.cfg
        files = save_sharded(out, kind, best_model.state_dict())
        log["models"][kind] = {"config": {**cfg.to_json(), "dropout": 0.0},
                               "train_dropout": cfg.dropout, "params": best_model.n_params(),
                               "files": files, "chosen": best_i, "runs": runs,
                               "samples": samples}
        del best_model
        log["seconds_total"] = time.time() - t_all
        with open(out / "train_log.json", "w") as f:
            json.dump(log, f, indent=1)
    print(f"done in {log['seconds_total']:.0f}s -> {out}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

#!/usr/bin/env python3
"""Loss curves of the chosen runs in a tools/train.py log: python3 tools/plot_loss.py LOG.json PNG"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    log = json.load(open(sys.argv[1]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, kind in zip(axes, ("main", "draft")):
        m = log["models"][kind]
        r = m["runs"][m["chosen"]]
        c = r["curve"]
        tr = [(s, v) for s, v in zip(c["step"], c["train"]) if v == v]   # drop NaN at step 0
        ax.plot([s for s, _ in tr], [v for _, v in tr], label="training (dropout on)")
        ax.plot(c["step"], c["val"], label="validation (picks checkpoint)")
        ax.plot(c["step"], c["test"], label="held-out test")
        ax.axvline(r["best_step"], color="grey", ls=":", lw=1)
        ax.set_title(f"{kind}: {m['params'] / 1e6:.2f}M params, dropout {r['dropout']}, "
                     f"{r['steps']} steps")
        ax.set_xlabel(f"step ({log['batch']} x {m['config']['ctx']} tokens)")
        ax.set_ylim(2.5, 8.5)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cross-entropy (nats/token)")
    axes[0].legend()
    fig.suptitle(f"rawloop models trained on {log['device']}")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Summarises a persistent-kernel trace (RL_CUDA_PERSIST_TRACE=FILE, written when the CUDA
backend closes: the last decoded token). For every barrier k: phase time (from the previous
release, or the kernel's start, to the last block's arrival), the spread of arrivals, and the
barrier's own latency (last arrival to the last release). Phases are named per layer.

    python3 tests/cuda/pk_trace.py FILE
"""
import sys

import numpy as np

PHASES = ["qkv", "attention", "wo", "gate+up", "down"]


def main(path):
    raw = open(path, "rb").read()
    blocks, nb = np.frombuffer(raw[:8], dtype=np.int32)
    t = np.frombuffer(raw[8:], dtype=np.uint64).astype(np.int64).reshape(2 * nb + 2, blocks)
    t0 = t[0].min()
    t = t - t0
    start, end = t[0], t[2 * nb + 1]
    arr = t[1 : 2 * nb + 1 : 2]  # [nb][blocks]
    rel = t[2 : 2 * nb + 2 : 2]
    per = {p: [] for p in PHASES}
    lat, spread = [], []
    prev = start.max()
    for k in range(nb):
        a_last, a_first, r_last = arr[k].max(), arr[k].min(), rel[k].max()
        per[PHASES[k % 5]].append((a_last - prev) / 1e3)
        spread.append((a_last - a_first) / 1e3)
        lat.append((r_last - a_last) / 1e3)
        prev = r_last
    total = (end.max() - start.min()) / 1e3
    print(f"blocks {blocks}, barriers {nb}, kernel {total:.1f} us (first start to last end)")
    print("| phase | count | median us (prev release -> last arrival) | sum us |")
    print("| --- | ---: | ---: | ---: |")
    for p in PHASES:
        v = per[p]
        if v:
            print(f"| {p} | {len(v)} | {np.median(v):.2f} | {sum(v):.1f} |")
    print(f"| tail (last release -> last end) | 1 | | {(end.max() - prev) / 1e3:.1f} |")
    print(f"barrier latency (last arrival -> last release): median {np.median(lat):.2f} us, "
          f"max {max(lat):.2f}, sum {sum(lat):.1f} us")
    print(f"arrival spread (first -> last arrival): median {np.median(spread):.2f} us")
    print(f"timer resolution hint: distinct start stamps {len(np.unique(start))} of {blocks}")


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env bash
# Builds what bench/exp/run.sh carries to the device: rawloop for sm_90a from this tree (main),
# from this tree with scale-free.patch (sf) and with exp-prologue.patch (exp), each in a copy
# under /tmp, stripped, into build-dev/bins.tar.xz (~10 minutes on 2 cores).
set -eu
cd "$(dirname "$0")/../.."
NV='-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter'
out=/tmp/rl-exp-bins
rm -rf "$out" && mkdir -p "$out" build-dev
for v in main sf exp; do
    src=/tmp/rl-exp-$v
    rm -rf "$src" && mkdir -p "$src" && git archive HEAD | tar x -C "$src"
    case $v in sf) patch=scale-free.patch ;; exp) patch=exp-prologue.patch ;; *) patch= ;; esac
    [ -z "$patch" ] || (cd "$src" && git apply "bench/exp/$patch")
    make -C "$src" BUILD=build-h200 NVFLAGS="$NV" -j"$(nproc)" build-h200/rawloop build-h200/test_cuda >"$out/$v.log" 2>&1 ||
        { echo "$v: build failed (log: $out/$v.log)"; exit 1; }
    mkdir -p "$out/$v" && cp "$src/build-h200/rawloop" "$src/build-h200/test_cuda" "$out/$v/" && strip "$out/$v"/*
    echo "$v: built"
done
tar cJf build-dev/bins.tar.xz -C "$out" main sf exp
ls -la build-dev/bins.tar.xz

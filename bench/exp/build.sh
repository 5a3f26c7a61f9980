#!/usr/bin/env bash
# Builds what bench/exp/run.sh carries to the device: rawloop and test_cuda for sm_90a from
# this tree (main), from this tree with scale-free.patch (sf), with exp-prologue.patch (exp) and
# with lean-loop.patch (lean), each in a copy under /tmp, and the kernel lab (lab_mvs) of main
# and lean, stripped, into build-dev/bins.tar.xz (~15 minutes on 2 cores). Only when named:
# lsf (lean-loop.patch then sf-on-lean.patch, with its lab), lean1 and leanG (lean with other
# epilogue flushes), fma (HEAD + q8-fma.patch, session 33), s8n (stage8n.patch, session 34, on
# 152b09c), apre (att-pre.patch, session 39, on f0f26a8; lost in 40) and floor (floor.patch,
# session 44, on 9948a8c: launches left out by RL_EXP_SKIP), nG (HEAD + callG.patch, session 48:
# mvs_locate called in the GLU kernels only), nQ (called in the others only), tr (HEAD +
# trace.patch: the streamed blocks' time line, RL_EXP_TRACE) and trI (tr + callG.patch called
# everywhere, as leanI), full (HEAD + fullgrid.patch: RL_EXP_FULL=1 keeps every block of a
# streamed launch's cap), trF (trace.patch + fullgrid.patch), attL (HEAD + att-late.patch,
# session 49: the flash decode without launch_dependents) and trA (trace.patch + att-late.patch;
# nG to trA rawloop only), tail (HEAD + tail.patch, session 50: the last items of a streamed
# launch claimed, RL_EXP_TAIL; rawloop and test_cursor), wmaj (HEAD + wmaj.patch, session 51:
# RL_EXP_WMAJ=1 deals a streamed launch's items warp-major, so that the warps with one item
# more are spread over every block; rawloop and test_cuda), trW (trace.patch + wmaj.patch) and
# wide (HEAD + wide.patch, session 51: RL_EXP_WIDE=W lets a one-block-per-SM launch take up to W
# warps a block where that gives its busiest warp fewer items; rawloop and test_cuda) and ampad
# (HEAD + ampad.patch, session 52: the tensor-core flash decode's warp sums without bank
# conflicts, on d98962b, the tree it was made on; rawloop and test_cuda) and trAt (HEAD +
# trace.patch + att-trace.patch, session 52: the flash decode's blocks in the same ring;
# rawloop) and q8x (HEAD + q8x.patch, session 53: the q8 tile's codes as exact f16 operands,
# the scales outside them; rawloop and test_cuda) and clm (HEAD + clm.patch, session 54: the
# cluster merge's loads from the peers all in flight at once, and its last barrier without the
# release that compiles to MEMBAR.ALL.GPU; rawloop and test_cuda) and fdp (HEAD + fdp.patch,
# session 54: the block per head's key loads in one trip and its next value batch in flight, 5
# blocks an SM; rawloop and test_cuda) and clw (HEAD + clm.patch + clw.patch, session 54: clm with
# the cluster variant in twice the warps too, RL_CUDA_ATT_MMA=37; rawloop and test_cuda), each
# into its own
# build-dev/VARIANT.tar.xz; s8n, apre and floor no longer apply to HEAD, so they build on the
# commit that added them, and full and trF on caa8c69, the tree before fullgrid.patch landed
# (session 50). (Landed, their variants gone: qkv-dual.patch and f16-pipe.patch in
# session 30, run.sh dual timing main's RL_CUDA_MVS2; mvx-trim.patch in session 32; mvxw, a
# branch, in session 34; mvxr.patch in session 36 as mvx's RES flag, with mvxr8 and mvxa, which
# built on it; leanI.patch + leanL-on-leanI.patch in session 48, with leanT, leanB and leanTB,
# which lost to them: c28f4d4 has those patches and variants; amq8.patch in session 53: 6ec42dc
# has it, its variant and aq8r, the landed tree beside it. mvx16, 16-warp mvx blocks, lost
# in session 34 and is gone.)
set -eu
cd "$(dirname "$0")/../.."
NV='-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter'
out=/tmp/rl-exp-bins
# variants to build (default all); a variant named here is rebuilt, the others are kept from
# an earlier run of this script
todo=${*:-main sf exp lean}  # lsf, lean1, leanG: only when named
mkdir -p "$out" build-dev
for v in $todo; do
    src=/tmp/rl-exp-$v
    # the patches (closed experiments) apply to c207744, the tree before qkv-dual and f16-pipe
    # landed; main is HEAD, and q8-fma.patch (session 33) applies to it; the later ones to the
    # commits that added them
    case $v in main|fma|nG|nQ|tr|trI|attL|trA|tail|wmaj|trW|wide|trAt|q8x|clm|fdp|clw) rev=HEAD ;; ampad) rev=d98962b ;; full|trF) rev=caa8c69 ;; s8n) rev=152b09c ;; apre) rev=f0f26a8 ;; floor) rev=9948a8c ;; *) rev=c207744 ;; esac
    rm -rf "$src" && mkdir -p "$src" && git archive $rev | tar x -C "$src"
    case $v in sf) patch=scale-free.patch ;; exp) patch=exp-prologue.patch ;; lean) patch=lean-loop.patch ;;
        lsf) patch="lean-loop.patch sf-on-lean.patch" ;; lean1|leanG) patch=lean-loop.patch ;; nG|nQ) patch=callG.patch ;; tr) patch=trace.patch ;; trI) patch="trace.patch callG.patch" ;; full) patch=fullgrid.patch ;; attL) patch=att-late.patch ;; trA) patch="trace.patch att-late.patch" ;; trF) patch="trace.patch fullgrid.patch" ;; tail) patch=tail.patch ;; wmaj) patch=wmaj.patch ;; trW) patch=trace.patch ;; wide) patch=wide.patch ;; ampad) patch=ampad.patch ;; q8x) patch=q8x.patch ;; clm) patch=clm.patch ;; fdp) patch=fdp.patch ;; clw) patch="clm.patch clw.patch" ;; trAt) patch="trace.patch att-trace.patch" ;;
        fma) patch=q8-fma.patch ;; s8n) patch=stage8n.patch ;; apre) patch=att-pre.patch ;; floor) patch=floor.patch ;; *) patch= ;; esac
    # the patch as committed (the archived tree's copy): commit an edited patch before building
    for p in $patch; do (cd "$src" && git apply "bench/exp/$p"); done
    # trW: wmaj.patch on trace.patch, whose lines around mvs_block's deal it moves (fuzz 2)
    if [ $v = trW ]; then (cd "$src" && patch -s -p1 --fuzz=3 < bench/exp/wmaj.patch) || { echo "$v: wmaj.patch failed"; exit 1; }; fi
    # lean's epilogues flushed after every item (lean1), or every 16 in GLU launches only
    # (leanG), instead of every 16 (PERF.md v2.25 section 3)
    case $v in lean1) flush=1 ;; leanG) flush='(GLU ? 16 : 1)' ;; *) flush= ;; esac
    [ -z "$flush" ] || sed -i "s/if (++nk == 16) flush();/if (++nk == $flush) flush();/" "$src/src/cuda/mvs.cuh"
    [ -z "$flush" ] || grep -q "++nk == $flush)" "$src/src/cuda/mvs.cuh" || { echo "$v: flush edit failed"; exit 1; }
    # nQ: the called form in the non-GLU kernels instead
    if [ $v = nQ ]; then sed -i 's/constexpr bool call = GLU;/constexpr bool call = !GLU;/' "$src/src/cuda/mvs.cuh"
        grep -q 'constexpr bool call = !GLU;' "$src/src/cuda/mvs.cuh" || { echo "$v: call edit failed"; exit 1; }; fi
    # trI: the called form everywhere (leanI's)
    if [ $v = trI ]; then sed -i 's/constexpr bool call = GLU;/constexpr bool call = true;/' "$src/src/cuda/mvs.cuh"
        grep -q 'constexpr bool call = true;' "$src/src/cuda/mvs.cuh" || { echo "$v: call edit failed"; exit 1; }; fi
    bins="build-h200/rawloop build-h200/test_cuda"
    case $v in nG|nQ|tr|trI|full|trF|attL|trA|trW|trAt) bins="build-h200/rawloop" ;; tail) bins="build-h200/rawloop build-h200/test_cursor" ;; esac
    case $v in main|lean|lsf) bins="$bins build-h200/lab_mvs" ;; esac
    [ $v != main ] || bins="$bins build-h200/lab_lat" # the queue-latency lab (run.sh lat)
    make -C "$src" BUILD=build-h200 NVFLAGS="$NV" -j"$(nproc)" $bins >"$out/$v.log" 2>&1 ||
        { echo "$v: build failed (log: $out/$v.log)"; exit 1; }
    mkdir -p "$out/$v" && (cd "$src" && cp $bins "$out/$v/") && strip "$out/$v"/*
    echo "$v: built"
done
# archives of what this run built only (an earlier run's leftovers in $out are not re-packed)
built() { for b in "$@"; do case " $todo " in *" $b "*) return 0 ;; esac; done; return 1; }
# (those of main sf exp lean that $out holds: a fresh machine that built only main packs main)
have=; for v in main sf exp lean; do [ ! -d "$out/$v" ] || have="$have $v"; done
! built main sf exp lean || tar cJf build-dev/bins.tar.xz -C "$out" $have
# every other variant named here in its own archive, so that run.sh finds it only where built
for v in $todo; do case $v in main|sf|exp|lean) ;; *) tar cJf build-dev/$v.tar.xz -C "$out" $v ;; esac; done
ls -la build-dev/*.tar.xz

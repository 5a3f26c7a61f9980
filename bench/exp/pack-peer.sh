#!/usr/bin/env bash
# Packs the llama.cpp peer for a same-run comparison (bench/exp/run.sh peer) beside main's and
# lean's rawloop from bench/exp/build.sh: build-dev-peer/peer.tar.xz, carried alone with
# .dev/cuda (with build-dev's 26 MB it would pass the 64 MiB a call carries; llama-bench is
# ~40 MB compressed). llama-bench is built here from unslothai/llama.cpp d32676d77 (fetched
# mirror, `git archive`), never from this repository:
#   cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF
#         -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF
#         -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF
#   cmake --build build --target llama-bench -j2          (~45 minutes on 2 cores)
# usage: bench/exp/pack-peer.sh PATH/TO/llama-bench [VARIANT]   (VARIANT: lean unless named)
set -eu
cd "$(dirname "$0")/../.."
lb=${1:?usage: bench/exp/pack-peer.sh PATH/TO/llama-bench [VARIANT]}
v=${2:-lean} # the build.sh variant timed beside main (run.sh peer: PEER_VAR)
[ -x /tmp/rl-exp-bins/main/rawloop ] && [ -x /tmp/rl-exp-bins/$v/rawloop ] ||
    { echo "run bench/exp/build.sh first (main and $v)"; exit 1; }
d=/tmp/rl-peer && rm -rf $d && mkdir -p $d/main $d/$v $d/lcpp build-dev-peer
cp /tmp/rl-exp-bins/main/rawloop $d/main/ && cp /tmp/rl-exp-bins/$v/rawloop $d/$v/
cp "$lb" $d/lcpp/llama-bench && strip $d/lcpp/llama-bench
tar cJf build-dev-peer/peer.tar.xz -C $d main $v lcpp
ls -la build-dev-peer/peer.tar.xz

#!/usr/bin/env bash
# `make check`: the whole test suite as CI runs it, ending with one "N passed, N failed" line.
#   1. make test       — C unit tests, tokenizer vectors, malformed inputs, HF oracle (pytest)
#   2. make test-arm64 — NEON kernels: test_quant cross-built for arm64, run under qemu-aarch64
#   3. make test-asan  — the same suite (minus `slow` cases) under ASan + UBSan
#   4. make test-tsan  — the thread pool under ThreadSanitizer (one test)
#   5. make fuzz-short — each libFuzzer target for FUZZ_SECONDS (default 30) from its seeds
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/logs
passed=0 failed=0

count() { # adds pytest's "N passed, M failed, K errors" from a log
    local line
    line=$(grep -E '[0-9]+ (passed|failed|error)' "$1" | tail -n 1)
    local p f e
    p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
    f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || true)
    e=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || true)
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0} + ${e:-0}))
}

stage() { # name, command...
    local name=$1; shift
    echo "=== $name: $*"
    if "$@" 2>&1 | tee "build/logs/$name.log"; then :; else
        grep -qE '[0-9]+ (passed|failed)' "build/logs/$name.log" || failed=$((failed + 1))
    fi
}

stage test make -j2 test
count build/logs/test.log
stage test-arm64 make test-arm64
count build/logs/test-arm64.log
stage test-asan make -j2 test-asan
count build/logs/test-asan.log
if make test-tsan 2>&1 | tee build/logs/test-tsan.log; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
if make fuzz-short FUZZ_SECONDS="${FUZZ_SECONDS:-30}" 2>&1 | tee build/logs/fuzz.log; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# CPU decode and prompt speed quiet and beside a busy process (docs/PERF.md, "Work stealing in
# the thread pool"). Per round and model: quiet, then with one busy shell loop running (three
# runnable threads on a 2-core machine), each binary's
#   rawloop bench -m F -p 64 -n 32 -r 3 -t 2 --json --no-ceiling --device cpu
# and, when LLAMA_BENCH names one, llama-bench -m F -p 64 -n 32 -r 3 -t 2 -o jsonl (llama.cpp
# built elsewhere; never built by this repository). Prints one line per run:
#   round model load binary pp64 pp_min pp_max tg32 tg_min tg_max
# then the medians over rounds. Run it on an otherwise idle machine.
# usage: ROUNDS=4 LLAMA_BENCH=path bench/contend.sh RAWLOOP_BIN[,RAWLOOP_BIN...] MODEL...
set -u
bins=${1:?usage: bench/contend.sh RAWLOOP_BIN[,RAWLOOP_BIN...] MODEL...}; shift
[ $# -ge 1 ] || { echo "name at least one model"; exit 2; }
rounds=${ROUNDS:-4} lb=${LLAMA_BENCH:-} threads=${THREADS:-2}
log=$(mktemp)
rl() { "$1" bench -m "$2" -p 64 -n 32 -r 3 -t "$threads" --json --no-ceiling --device cpu 2>/dev/null |
    python3 -c 'import json,sys;d=json.load(sys.stdin);print(d["pp_tps"],d["pp_min"],d["pp_max"],d["tg_tps"],d["tg_min"],d["tg_max"])'; }
peer() { "$lb" -m "$1" -p 64 -n 32 -r 3 -t "$threads" -o jsonl 2>/dev/null | python3 -c '
import json,sys,statistics as st
v={}
for l in sys.stdin:
    d=json.loads(l); s=d["samples_ts"]; v["pp" if d["n_prompt"] else "tg"]=(st.median(s),min(s),max(s))
print(*v["pp"],*v["tg"])'; }
hog=
trap '[ -n "$hog" ] && kill $hog 2>/dev/null' EXIT
for r in $(seq 1 "$rounds"); do for m in "$@"; do for load in quiet hog; do
    if [ $load = hog ]; then sh -c 'while :; do :; done' & hog=$!; sleep 1; fi
    for b in ${bins//,/ }; do echo "$r $(basename "$m") $load $b $(rl "$b" "$m")" | tee -a "$log"; done
    [ -n "$lb" ] && echo "$r $(basename "$m") $load llama-bench $(peer "$m")" | tee -a "$log"
    if [ -n "$hog" ]; then kill $hog; wait $hog 2>/dev/null; hog=; fi
done; done; done
echo "== medians over $rounds rounds (pp64, tg32)"
python3 - "$log" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) == 10: d[tuple(f[1:4])].append((float(f[4]), float(f[7])))
for k, v in d.items():
    print(*k, "%.1f" % st.median(a for a, _ in v), "%.2f" % st.median(b for _, b in v))
PY
rm -f "$log"

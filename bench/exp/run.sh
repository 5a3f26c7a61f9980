# Device script for bench/exp (README.md there). Build here first with bench/exp/build.sh
# (build-dev/bins.tar.xz: main, main + scale-free.patch, main + exp-prologue.patch, main +
# lean-loop.patch, for sm_90a), copy the llama SPM test vocabulary to .dev/cuda, and carry
# build-dev and .dev/cuda. One mode per call (each fits the 600 s of a call):
#   bash bench/exp/run.sh tests-lean   tests/cuda/run_device.sh "k e r g b" (or TSTAGES) on the lean build (or
#                                      tests-VARIANT on any variant carried: lean1, leanG, ...),
#                                      and its test_cuda in 16-warp blocks with RQ2's two-round
#                                      stages (RL_CUDA_RQ2_ROUNDS=2)
#   bash bench/exp/run.sh bits         decoding logits (--prefill exact -b 1, fast and --exact; before
#                                      session 47 the fast ones lacked --prefill exact and so went
#                                      through the cuBLAS prefill, not the kernels) of main, lean
#                                      and lean with RL_CUDA_RQ2_ROUNDS=2 on TinyLlama / 7B
#                                      Q4_0, 7B RQ2, 7B Q4_K_M: the same bytes, or lean is wrong
#   bash bench/exp/run.sh lean         tg128 main / lean alternated (TinyLlama and 7B Q4_0, 7B
#                                      RQ2 also with two-round stages, 7B Q4_K_M, two rounds;
#                                      scale-free, lsf, lean1 and leanG beside, where carried),
#                                      then lab_mvs section 4 (the matvec alone on tensors
#                                      larger than L2) of main, lean, lean with two rounds
#   bash bench/exp/run.sh flush        tg128 main / lean / lean1 / leanG alternated (TinyLlama and
#                                      7B Q4_0, 7B RQ2, 7B Q4_K_M, two rounds), then bench
#                                      --profile of 7B Q4_0 for main and lean1
#   bash bench/exp/run.sh dual         main's RL_CUDA_MVS2 (a mixed-type QKV in one launch, landed
#                                      in session 30) against two launches, TinyLlama / 7B / 8B
#                                      Q4_K_M (DUAL=... other files of models()): bits,
#                                      launches, tg128, profile
#   bash bench/exp/run.sh table        main's tg128 at d0 and d4096 on issue 4's ten goal files (TABLE, ROUNDS)
#   bash bench/exp/run.sh chunks       exact chunks against one token at a time (issue 4's S=16 >=
#                                      8x S=1, last measured in v2.12): pp512 in exact chunks of 16
#                                      and pp128 with -b 1 (v2.12's commands), then each chunk size
#                                      over the other's prompt (the same-prompt ratios), two
#                                      rounds, on CHUNKS="tl 7b 8b 7bq8" by default
#   bash bench/exp/run.sh astage       an exact chunk's Wo input staged by the flash decode
#                                      (RL_CUDA_ATT_STAGE, session 32): chunk logits (-b 16; on
#                                      TinyLlama 4/8/16) = one-token logits, knob on and off, 40
#                                      ids and TinyLlama at 300 (merged splits); S=1 and S=16
#                                      with the knob off / on alternated, two rounds
#   bash bench/exp/run.sh gqa          an exact chunk's flash decode per KV group (RL_CUDA_ATT_GQA,
#                                      session 38) and its graphs by splits, against per head and
#                                      the build before (base.tar.xz): test_cuda, chunk logits =
#                                      one-token logits, S=1 and S=16 (512, 1024, 2048 ids) under
#                                      each GQA_CF="0 8 16 32" in turn, two rounds, CHUNKS="tl 8b"
#   bash bench/exp/run.sh apre         att-pre.patch (build.sh apre, session 39): the flash decode's
#                                      first key and value rows copied before its PDL wait, against
#                                      main: SKIPPERF=1 bits and sanitizer, SKIPBITS=1 tg128 at d0 /
#                                      d4096 and S=16 (two calls; CHUNKS)
#   bash bench/exp/run.sh cmp-VAR      a variant carried as build-dev/VAR.tar.xz against main (session 46:
#                                      leanI; session 48: leanL, both landed since): decoding
#                                      logits byte for byte (--prefill exact -b 1, fast and --exact,
#                                      40 ids; session 46's fast ones lacked --prefill exact), tg128
#                                      alternated (ROUNDS, 2), lab_mvs 20 4 of both (CMP: the files,
#                                      default "tl 7b 7brq2 7bq4km"; SKIPBITS=1 / SKIPPERF=1 /
#                                      SKIPLAB=1); cmp-A+B+... compares several variants with main
#   bash bench/exp/run.sh kb           one knob's bytes: logits under each KB_V of KB_K the same (KB_B, KB_N, CHUNKS)
#   bash bench/exp/run.sh cfg          knob settings side by side (CFGS, CFG_D, CHUNKS, ROUNDS): tg128
#                                      at depths and S=16, percent against the first setting
#                                      (CFG_BIN: another build's rawloop, e.g. /tmp/b/floor/rawloop)
#   bash bench/exp/run.sh amma         RL_CUDA_ATT_MMA (session 40): the group's flash decode on tensor cores
#                                      under each AMMA_V value: chunks = one token and near the default
#                                      (fast and --exact), tg128 d0 / d4096 and S=16 against the default
#                                      (SKIPBITS / SKIPPERF, CHUNKS, ROUNDS)
#   bash bench/exp/run.sh amprof       ncu of the tensor-core attention against the default kernel at d0 / d1024 /
#                                      d4096 (AMMA_P values, CHUNKS="tl"), --set full of one launch into $OUT
#   bash bench/exp/run.sh stage8       RL_CUDA_MVX_STAGE8 (session 32; 1 by default since 33): down's chunk
#                                      staging in 8-warp blocks with PDL: logits -b 1 = -b 16 with
#                                      the knob at both values, S=16 alternated, two rounds; S8="1 2"
#                                      compares 2 (the normed stagings too: out of main since
#                                      session 34, 6-8% slower; S8_VAR=s8n runs stage8n.patch's
#                                      build), with test_cuda in 16-warp blocks
#   bash bench/exp/run.sh var-VAR      a build variant (build.sh VAR, carried as build-dev/VAR.tar.xz:
#                                      fma = HEAD + q8-fma.patch, session 33's run; mvxr, mvxr8, mvxa
#                                      ran in session 35, v2.32, and are gone: git history at a3f9100)
#                                      against main: its chunks = its
#                                      one-token logits (mvx and dp4a), its distance to main, S=1
#                                      and S=16 of both alternated, two rounds (CHUNKS), its test_cuda
#   bash bench/exp/run.sh res          the exact chunk's layouts (RL_CUDA_MVX_RES 0 blocked, 1 residue;
#                                      session 36): chunks = one-token logits under both and the
#                                      dp4a kernel, main's logits = the old build's (build-dev/old.tar.xz,
#                                      the build before, where carried); S=16 under 0 / 1 (and old)
#                                      alternated, two rounds, on CHUNKS="tl tlq8 7b 8b 7bq8"; test_cuda
#   bash bench/exp/run.sh prologue     scale-free.patch and exp-prologue.patch's knobs against
#                                      main, and 7B F16 with RL_CUDA_MVS=1
#   bash bench/exp/run.sh tests-sf     tests/cuda/run_device.sh "k e r g b" on the scale-free build
#   bash bench/exp/run.sh trace        trace.patch's time line of the decode graph's streamed launches
#                                      (session 48): for each of TRACE's variants (default "tr trI":
#                                      build.sh tr, trI) on each CMP file (default tl), tg128 of main
#                                      and the variant, then one bench with RL_EXP_TRACE and
#                                      bench/exp/trace_agg.py's table (PER_LAYER, 4) and
#                                      trace_sm.py's (by SM, each grid size)
#   bash bench/exp/run.sh full         fullgrid.patch (build.sh full, trF; session 48): every block of a
#                                      streamed launch's cap kept (RL_EXP_FULL=1) against the even
#                                      deal: logits the same bytes (SKIPBITS=1: not checked), tg128
#                                      alternated on CMP (default "tl 7b 7bq4km"), ROUNDS (2), then
#                                      trF's time line with RL_EXP_FULL=1 on TRACE_F (default 7b)
#   bash bench/exp/run.sh late         att-late.patch (build.sh attL, trA; session 49): the flash decode
#                                      without launch_dependents, and RL_CUDA_ATT_PDL_BAND=1 (the
#                                      attention with PDL in the one-split band; never measured
#                                      before), each alone and together against main: logits the
#                                      same bytes (SKIPBITS=1: not checked), tg128 alternated on
#                                      CMP (default "tl 7b 8b"), ROUNDS (2), tg128 at depth 4096 on
#                                      LATE_D (default "tl 8b"; the band knob does not reach those
#                                      graphs), then tr's and trA's time lines on TRACE_A (tl)
#   bash bench/exp/run.sh tail         tail.patch (build.sh tail; session 50): a streamed launch's last
#                                      items claimed, RL_EXP_TAIL=1 and 2 against main (and full,
#                                      where carried): logits the same bytes, tg128 alternated on
#                                      CMP (default "tl 7b 8b 7bq4km"), ROUNDS (2)
#   bash bench/exp/run.sh wmaj         wmaj.patch (build.sh wmaj, trW; session 51): a streamed launch's
#                                      items dealt warp-major (RL_EXP_WMAJ=1), so that the warps
#                                      with an item more are spread over every block: its test_cuda
#                                      under the knob, logits the same bytes as main (SKIPBITS=1:
#                                      not checked), tg128 of the wmaj build with the knob off
#                                      (deal0) and on alternated on CMP (default "tl 7b 8b
#                                      7bq4km"), ROUNDS (2), then tr's and trW's time lines on
#                                      TRACE_W (default none; e.g. "7b tl")
#   bash bench/exp/run.sh wide         wide.patch (build.sh wide; session 51): launches of one 16-warp
#                                      block per SM in blocks of up to 18 warps where that lowers
#                                      the busiest warp's items (RL_EXP_WIDE=18): its test_cuda
#                                      under the knob, logits the same bytes as main, tg128 of
#                                      main, the wide build with the knob unset (its 576-thread
#                                      launch bounds alone) and set, alternated, on CMP (default
#                                      "7b 8b 7bq4km tl"), ROUNDS (2)
#   bash bench/exp/run.sh ampad        ampad.patch (build.sh ampad; session 52): the tensor-core
#                                      flash decode's warp sums in rows of hd + 1 floats (no bank
#                                      conflicts): its test_cuda, logits the same bytes as main
#                                      (40 ids -b 1 fast and --exact; 300 ids -b 1 and -b 16, the
#                                      cluster's merge), tg128 at depth 0 and 4096 alternated with
#                                      main on CMP (default "tl 8b"), ROUNDS (2)
#   bash bench/exp/run.sh q8x          q8x.patch (build.sh q8x; session 53): the tensor-core flash
#                                      decode's q8 tile without int-to-float conversions or f16
#                                      values (codes exact, scales outside the products): f16
#                                      logits main's bytes, q8 -b 1 = -b 16 at 300 ids, tg128 at
#                                      depth 0 and 4096 of main f16 / main q8 / q8x q8 on CMP
#                                      (default "tl 8b"), ROUNDS (2); its test_cuda and stage q:
#                                      TSTAGES="k q" bash bench/exp/run.sh tests-q8x
#   bash bench/exp/run.sh clm          clm.patch (build.sh clm; session 54): the cluster merge's
#                                      loads in one batch and its last barrier without a GPU-scope
#                                      fence: main = clm logits at -b 1 over 2200 ids, tg128 at
#                                      depth 0 and 4096 of main / clm on CMP (default "tl 8b")
#   bash bench/exp/run.sh fdp          fdp.patch (build.sh fdp; session 54): the block per head
#                                      (plain heads, a q8 cache) with a key's loads in one trip and
#                                      the next value batch in flight: main = fdp logits at -b 1
#                                      over 2200 ids (7B; TinyLlama under RL_CUDA_ATT_MMA=0), chunks
#                                      of 16 = -b 1, tg128 d0 / d4096 (f16, q8) and S=16 on 7B
#   bash bench/exp/run.sh clw          clw.patch on clm.patch (build.sh clw; session 54): the
#                                      cluster variant in twice the warps (RL_CUDA_ATT_MMA=37):
#                                      -b 1 = -b 16 under it, tg128 at depth 0 and 4096 of main /
#                                      clw at 33 / clw at 37 on CMP (default "tl 8b")
#   bash bench/exp/run.sh atrace       att-trace.patch (build.sh trAt; session 52): tg128 of main and
#                                      of trAt with the ring off (its cost), then one tg128 with the
#                                      ring on: the streamed launches' table (trace_agg.py) and the
#                                      flash decode's blocks against QKV's end and Wo's release
#                                      (trace_att.py, which trace1 now runs on every ring), on CMP
#                                      (default "tl 8b 7b"); TRACE other builds
#   bash bench/exp/run.sh lat          bench/lab_lat.cu (main's build): a dependent read's latency
#                                      while every SM streams with a given number of bytes in
#                                      flight, by cp.async, loads and bulk copies (no models; ~1 min)
#   bash bench/exp/run.sh models       only the models (tl 7b 7brq2 7bq4km 8b, or those named in
#                                      MODELS), e.g. in the background of a tests call
#   bash bench/exp/run.sh peer         rawloop main, llama.cpp's llama-bench, rawloop lean on the
#                                      same files in the same run (tg128; PEER="tlf16 7bf16 7bq8"
#                                      picks other files of models(), PEER_VAR=lsf the variant
#                                      pack-peer.sh packed beside main; carry build-dev-peer
#                                      from bench/exp/pack-peer.sh and .dev/cuda, not build-dev)
set -u; cd "$(dirname "$0")/../.."
MODE=${1:-lean}
mkdir -p /tmp/m /tmp/b
if [ $MODE = peer ]; then [ -x /tmp/b/lcpp/llama-bench ] || tar xJf build-dev-peer/peer.tar.xz -C /tmp/b
else [ -x /tmp/b/main/rawloop ] || tar xJf build-dev/bins.tar.xz -C /tmp/b
  # every variant build.sh made when named (build-dev/VARIANT.tar.xz), where carried
  for t in build-dev/*.tar.xz; do v=$(basename "$t" .tar.xz)
    [ ! -f "$t" ] || [ $v = bins ] || [ -x /tmp/b/$v/rawloop ] || tar xJf "$t" -C /tmp/b; done; fi
M=/tmp/b/main/rawloop; S=/tmp/b/sf/rawloop X=/tmp/b/exp/rawloop L=/tmp/b/lean/rawloop F=/tmp/b/lsf/rawloop V=.dev/cuda/ggml-vocab-llama-spm.gguf
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv,noheader
mk() { [ -f /tmp/m/$3 ] || { $M mkmodel --shape $1 --type $2 --vocab $V -o /tmp/m/$3.part -t ${MK_T:-4} > /tmp/m/$3.log 2>&1 &&
  mv /tmp/m/$3.part /tmp/m/$3; }; }
# the named files (tl 7b 7brq2 7bq4km 7bf16 8b tlf16 7bq8 8bf16 tlq4km 8bq4km 7bq5km tlq8 8bq8) made side by side, those missing
models() { for f in "$@"; do case $f in
  tl) mk tinyllama-1.1b Q4_0 tl.gguf & ;; 7b) mk llama2-7b Q4_0 7b.gguf & ;; 7brq2) mk llama2-7b RQ2 7brq2.gguf & ;;
  7bq4km) mk llama2-7b Q4_K_M 7bq4km.gguf & ;; 7bf16) mk llama2-7b F16 7bf16.gguf & ;; 8b) mk llama3-8b Q4_0 8b.gguf & ;;
  tlf16) mk tinyllama-1.1b F16 tlf16.gguf & ;; 7bq8) mk llama2-7b Q8_0 7bq8.gguf & ;; 8bf16) mk llama3-8b F16 8bf16.gguf & ;;
  tlq4km) mk tinyllama-1.1b Q4_K_M tlq4km.gguf & ;; 8bq4km) mk llama3-8b Q4_K_M 8bq4km.gguf & ;;
  7bq5km) mk llama2-7b Q5_K_M 7bq5km.gguf & ;; tlq8) mk tinyllama-1.1b Q8_0 tlq8.gguf & ;;
  8bq8) mk llama3-8b Q8_0 8bq8.gguf & ;;
  esac; done; wait; echo "models $(( $(date +%s) - t0 )) s"; }
tg() { local b=$1 f=$2 l=$3; shift 3
  env "$@" $b bench --device cuda -m $f -p 0 -n 128 -r 3 --json 2>/dev/null | tail -1 > /tmp/j.json
  python3 -c "import json;d=json.load(open('/tmp/j.json'));print('%-36s %8.1f %5.1f'%('$l',d['tg_tps'],d['tg_sd']))" || echo "$l FAILED"; }
# same LABEL FIRST OTHER...: every file holds FIRST's bytes, and FIRST is not empty ($f, $ex:
# the file and the arithmetic the caller is at)
same() { local l=$1 a=$2; shift 2
  for o in "$@"; do [ -s $a ] && cmp -s $a $o || { echo "$f ${ex:-fast}: $l: DIFFERENT or failed"; return; }; done
  echo "$f ${ex:-fast}: $l ($(sha256sum < $a | cut -c1-16))"; }
# kbits KNOB "VALUES" "BATCHES" N: logits of ids 1..N by exact chunks of each of BATCHES (-b)
# with the environment knob at each of VALUES, all the same bytes ($f: the file)
# xlg BINARY OUT BATCH IDS: logits of IDS by exact chunks of BATCH into OUT, removed if the run
# fails ($f: the file; the caller's environment holds the knobs; XLG_FLAGS: more, e.g. --exact)
xlg() { $1 logits --device cuda -m /tmp/m/$f.gguf --prefill exact ${XLG_FLAGS:-} -b $3 --ids "$4" -o $2 > /dev/null 2>&1 || rm -f $2; }
kbits() { local k=$1 L= v b ids; ids=$(seq 1 $4 | tr '\n' ' ')
  for v in $2; do for b in $3; do
    (export "$k=$v"; xlg $M /tmp/lg-$v-$b.bin $b "$ids")
    L="$L /tmp/lg-$v-$b.bin"; done; done
  same "$4 ids: -b $(echo $3 | tr ' ' =), $k $(echo $2 | tr ' ' /)" $L; rm -f $L; }
# pp BINARY FLAGS FILE N: "tok/s sd" of an exact prefill of N ids (chunks)
# tgd BINARY FLAGS FILE: "tok/s sd" of tg128 (FLAGS e.g. "-d 4096")
tgd() { $1 bench --device cuda -m /tmp/m/$3.gguf -p 0 -n 128 -r 3 $2 --no-ceiling --json 2>/dev/null | tail -1 |
  python3 -c "import json,sys;d=json.load(sys.stdin);print('%.1f %.1f'%(d['tg_tps'],d['tg_sd']))" || echo "0 0"; }
pp() { $1 bench --device cuda --prefill exact $2 -m /tmp/m/$3.gguf -p $4 -n 0 -r 3 --no-ceiling --json 2>/dev/null | tail -1 |
  python3 -c "import json,sys;d=json.load(sys.stdin);print('%.1f %.1f'%(d['pp_tps'],d['pp_sd']))" || echo "0 0"; }
# trace1 VARIANT FILE: one tg128 of a trace.patch build with the ring on, then its tables
# (trace_agg.py by launch, trace_sm.py by SM) at depth TRD (0); the caller's environment holds the knobs. The ring
# file (~80 MB, /tmp/tr-VARIANT-FILE.bin) stays in /tmp: too large to bring back, query it later.
trace1() { local o=/tmp/tr-$1-$2.bin; rm -f $o
  RL_EXP_TRACE=$o /tmp/b/$1/rawloop bench --device cuda -m /tmp/m/$2.gguf -p 0 -n 128 -d ${TRD:-0} -r 1 --no-ceiling 2>/dev/null | grep "tg128"
  python3 bench/exp/trace_agg.py $o ${PER_LAYER:-4}; python3 bench/exp/trace_sm.py $o; python3 bench/exp/trace_att.py $o; }
# Entries "LABEL:BINARY[:VAR=V]" (a build, and a knob set for it or none), the first the
# reference: vbits checks that all give the same logits of IDS on each file of F, fast and
# --exact (SKIPBITS=1: not); vtg times tg128 of each on each file, alternated, ROUNDS rounds (2)
vbits() { local e l b k n L ls; [ "${SKIPBITS:-0}" = 1 ] && return
  for f in $F; do for ex in "" --exact; do n=0; L=; ls=
    for e in "$@"; do IFS=: read -r l b k <<< "$e"
      (XLG_FLAGS=$ex; [ -z "$k" ] || export "$k"; xlg $b /tmp/l-$n 1 "$IDS")
      L="$L /tmp/l-$n"; ls="$ls${ls:+ = }$l"; n=$((n + 1)); done
    same "$ls" $L; rm -f $L; done; done; }
# varsetup VARIANT FILES: B the variant's rawloop (or exit 2 where not carried), F the files
# (CMP, else FILES) made, IDS the 40 ids vbits compares; vtest VARIANT [KNOB=V]: its test_cuda
# under the knob, or none (SKIPTEST=1: not)
varsetup() { B=/tmp/b/$1/rawloop; [ -x $B ] || { echo "no build of $1 here"; exit 2; }
  F=${CMP:-$2}; models $F; IDS=$(seq 100 139 | tr '\n' ' '); }
vtest() { [ "${SKIPTEST:-0}" = 1 ] && return
  env ${2:+"$2"} /tmp/b/$1/test_cuda > /tmp/tc-$1.log 2>&1; echo "test_cuda, $1, ${2:-no knob}: $(tail -1 /tmp/tc-$1.log)"; }
vtg() { local e l b k r
  for r in $(seq 1 ${ROUNDS:-2}); do for f in $F; do for e in "$@"; do IFS=: read -r l b k <<< "$e"
    tg $b /tmp/m/$f.gguf "$f $l r$r" $k; done; done; done; }
# vchunks N "LABEL:BINARY:FLAGS"...: logits of ids 1..N at -b 1 and -b 16 (exact chunks) of each
# entry (FLAGS: more logits flags, e.g. --kv-type q8) on each file of F, all the same bytes
vchunks() { local n=$1 e l b k c L ls; shift; ls=$(printf '%s\n' "$@" | cut -d: -f1 | paste -sd, | sed 's/,/ = /g')
  for f in $F; do L=; for e in "$@"; do IFS=: read -r l b k <<< "$e"; for c in 1 16; do
      (XLG_FLAGS=$k; xlg $b /tmp/lc-$l-$c $c "$(seq 1 $n | tr '\n' ' ')"); L="$L /tmp/lc-$l-$c"; done; done
    ex=$k same "$n ids, -b 1 = -b 16: $ls" $L; rm -f $L; done; }
# vtgd "LABEL:BINARY:FLAGS"...: tg128 at depths 0 and 4096 of each entry (FLAGS: more bench
# flags, e.g. --kv-type q8) on each file of F, alternated, one line a file and depth with each
# entry's percent against the first, ROUNDS rounds (2)
vtgd() { local r d e l b k line b0 v
  for r in $(seq 1 ${ROUNDS:-2}); do for f in $F; do for d in 0 4096; do line="$f r$r tg128 d$d"; b0=
    for e in "$@"; do IFS=: read -r l b k <<< "$e"; v=$(tgd $b "-d $d $k" $f)
      line="$line | $l: ${v% *} ± ${v#* }$([ -z "$b0" ] || echo " ($(rel $b0 ${v% *}))")"; b0=${b0:-${v% *}}; done
    echo "$line"; done; done; done; }
# cfgrun: the files F, each CFGS entry "LABEL:VAR=V,VAR=V" (LABEL alone: no knobs set) at tg128
# for each CFG_D depth ("0 4096") and S=16 over 512 ids at -c 4096 (CFG_S16=0: not), one line a
# file and depth, each entry's percent against the first, ROUNDS rounds (2)
rel() { python3 -c "print('%+.1f%%'%(100*($2/$1-1)) if $1 else 'n/a')"; }
cfgrun() { local r d c e line b0
  for r in $(seq 1 ${ROUNDS:-2}); do for f in $F; do
    for d in ${CFG_D:-0 4096} $([ "${CFG_S16:-1}" = 0 ] || echo S16); do
      line="$f r$r $([ $d = S16 ] && echo "S=16/512 -c 4096" || echo "tg128 d$d")"; b0=
      for c in $CFGS; do e=${c#*:}; [ "$e" != "$c" ] || e=
        set -- $([ -z "$e" ] || export $(echo $e | tr , ' '); [ $d = S16 ] && pp ${CFG_BIN:-$M} "-c 4096" $f 512 || tgd ${CFG_BIN:-$M} "-d $d" $f)
        line="$line | ${c%%:*}: $1 ± $2$([ -z "$b0" ] || echo " ($(rel $b0 $1))")"; b0=${b0:-$1}; done
      echo "$line"; done
  done; done; }
t0=$(date +%s)
case $MODE in
tests-*)
  v=${MODE#tests-}; [ -x /tmp/b/$v/test_cuda ] || { echo "no build of $v here"; exit 2; }
  rm -rf /tmp/bd && mkdir -p /tmp/bd && cp /tmp/b/$v/* /tmp/bd/
  # TTIME: a limit on run_device.sh itself (a timeout around run.sh leaves it running alone)
  OUT=/tmp/rl-out-$v timeout ${TTIME:-560} bash tests/cuda/run_device.sh /tmp/bd "${TSTAGES:-k e r g b}"
  cat /tmp/rl-out-$v/summary.txt
  # the lean builds also in 16-warp blocks; lean-loop.patch's (c207744's tree) also with its
  # two-round knob, which main's loop (leanI + leanL, landed in session 48) does not have
  if [ "${v#lean}" != "$v" ]; then
    RL_CUDA_MV_WARPS=16 /tmp/bd/test_cuda > /tmp/tc16.log 2>&1; echo "test_cuda, 16 warps: $(tail -1 /tmp/tc16.log)"
    case $v in lean|lsf|lean1|leanG)
      RL_CUDA_MV_WARPS=16 RL_CUDA_RQ2_ROUNDS=2 /tmp/bd/test_cuda > /tmp/tc16u.log 2>&1
      echo "test_cuda, 16 warps, RQ2 two rounds: $(tail -1 /tmp/tc16u.log)" ;; esac
  fi ;;
cmp-*)
  VS=$(echo ${MODE#cmp-} | tr + ' ')
  for v in $VS; do [ -x /tmp/b/$v/rawloop ] || { echo "no build of $v here"; exit 2; }; done
  F=${CMP:-tl 7b 7brq2 7bq4km}; models $F
  IDS=$(seq 100 139 | tr '\n' ' '); E="main:$M"; for v in $VS; do E="$E $v:/tmp/b/$v/rawloop"; done
  vbits $E
  [ "${SKIPPERF:-0}" = 1 ] || {
    vtg $E
    [ "${SKIPLAB:-0}" = 1 ] || for b in main $VS; do [ -x /tmp/b/$b/lab_mvs ] || continue; echo "== lab_mvs 20 4, $b"; /tmp/b/$b/lab_mvs 20 4 | grep -v "^$"; done; } ;;
bits)
  models tl 7b 7brq2 7bq4km
  IDS=$(seq 100 139 | tr '\n' ' ')
  for f in tl 7b 7brq2 7bq4km; do for ex in "" --exact; do
    lg() { local o=$1 b=$2; shift 2; ([ $# = 0 ] || export "$@"; XLG_FLAGS=$ex xlg $b $o 1 "$IDS"); }
    lg /tmp/l-main $M; lg /tmp/l-lean $L; lg /tmp/l-lean2 $L RL_CUDA_RQ2_ROUNDS=2; more= names=
    for v in lean1 leanG; do [ ! -x /tmp/b/$v/rawloop ] || { lg /tmp/l-$v /tmp/b/$v/rawloop; more="$more /tmp/l-$v"; names="$names = $v"; }; done
    same "main = lean = lean two rounds$names" /tmp/l-main /tmp/l-lean /tmp/l-lean2 $more
    # lean + scale-free: scale-free's bits
    [ ! -x $F ] || { lg /tmp/l-sf $S; lg /tmp/l-lsf $F; same "scale-free = lean + scale-free" /tmp/l-sf /tmp/l-lsf; }
    rm -f /tmp/l-*
  done; done ;;
lean)
  models tl 7b 7brq2 7bq4km
  for r in 1 2; do for f in tl 7b 7brq2 7bq4km; do
    tg $M /tmp/m/$f.gguf "$f main r$r"; tg $L /tmp/m/$f.gguf "$f lean r$r"
    [ $f = 7brq2 ] && tg $L /tmp/m/$f.gguf "$f lean two rounds r$r" RL_CUDA_RQ2_ROUNDS=2
    case $f in tl|7b) tg $S /tmp/m/$f.gguf "$f scale-free r$r"; [ -x $F ] && tg $F /tmp/m/$f.gguf "$f lean + scale-free r$r" ;; esac
    for v in lean1 leanG; do [ ! -x /tmp/b/$v/rawloop ] || tg /tmp/b/$v/rawloop /tmp/m/$f.gguf "$f $v r$r"; done
  done; done
  for v in main lean lean2 lsf; do [ -x /tmp/b/$v/lab_mvs ] || [ $v = lean2 ] || continue; echo "== lab_mvs 20 4, $v"
    if [ $v = lean2 ]; then RL_CUDA_RQ2_ROUNDS=2 /tmp/b/lean/lab_mvs 20 4; else /tmp/b/$v/lab_mvs 20 4; fi | grep -v "^$"
  done ;;
flush)
  # lean's epilogue flushes against main and lean, tg128 alternated, two rounds; then the
  # per-launch profile of 7B Q4_0 for main and lean1
  models tl 7b 7brq2 7bq4km
  for r in 1 2; do for f in tl 7b 7brq2 7bq4km; do
    tg $M /tmp/m/$f.gguf "$f main r$r"; tg $L /tmp/m/$f.gguf "$f lean r$r"
    for v in lean1 leanG; do [ ! -x /tmp/b/$v/rawloop ] || tg /tmp/b/$v/rawloop /tmp/m/$f.gguf "$f $v r$r"; done
  done; done
  for v in main lean1; do [ -x /tmp/b/$v/rawloop ] || continue; echo "== 7b profile, $v"
    /tmp/b/$v/rawloop bench --device cuda -m /tmp/m/7b.gguf -p 0 -n 64 -r 2 --profile 2>&1 | grep "^| [a-z]" | tail -10; done ;;
dual)
  # RL_CUDA_MVS2=0 is two launches (the same SASS for every other kernel), so one binary: logits byte for byte (decoding fast and --exact, and exact
  # chunks of 16 against decoding), launches per token, tg128 alternated, profiles
  F=${DUAL:-tlq4km 7bq4km 8bq4km}; models $F
  IDS=$(seq 100 139 | tr '\n' ' ')
  # decoding token by token (--prefill exact -b 1), fast and --exact: with the knob on and off,
  # and exact chunks of 16 (the register kernels, one launch per type) against it
  for f in $F; do for ex in "" --exact; do
    lg() { local o=$1 b=$2; shift 2; env "$@" $M logits --device cuda -m /tmp/m/$f.gguf --ids "$IDS" --prefill exact $ex -b $b -o $o > /dev/null 2>&1; }
    lg /tmp/l-one 1; lg /tmp/l-two 1 RL_CUDA_MVS2=0; lg /tmp/l-ch 16
    same "one launch = two" /tmp/l-one /tmp/l-two; same "exact chunks of 16 = decoding" /tmp/l-one /tmp/l-ch; rm -f /tmp/l-*
  done; done
  for f in $F; do for v in 1 0; do RL_CUDA_MVS2=$v $M bench --device cuda -m /tmp/m/$f.gguf -p 0 -n 16 -r 1 --json 2>/dev/null | tail -1 |
    python3 -c "import json,sys;d=json.load(sys.stdin);print('$f MVS2=$v launches/token',d.get('launches_per_token'))"; done; done
  for r in 1 2; do for f in $F; do tg $M /tmp/m/$f.gguf "$f one launch r$r"; tg $M /tmp/m/$f.gguf "$f two (MVS2=0) r$r" RL_CUDA_MVS2=0; done; done
  for v in 1 0; do echo "== 7bq4km profile, MVS2=$v"
    RL_CUDA_MVS2=$v $M bench --device cuda -m /tmp/m/7bq4km.gguf -p 0 -n 64 -r 2 --profile 2>&1 | grep "^| [a-z]" | tail -9; done ;;
prologue)
  models tl 7b 7bf16
  for f in tl 7b; do for r in 1 2; do
    tg $M /tmp/m/$f.gguf "$f main r$r"; tg $S /tmp/m/$f.gguf "$f scale-free r$r"
    tg $X /tmp/m/$f.gguf "$f exp NONORM r$r" RL_EXP_NONORM=1
    for e in 1 2 4 5; do tg $X /tmp/m/$f.gguf "$f exp RL_EXP=$e r$r" RL_EXP=$e; done
  done; done
  for r in 1 2; do
    tg $M /tmp/m/7bf16.gguf "7B F16 main r$r"; tg $M /tmp/m/7bf16.gguf "7B F16 RL_CUDA_MVS=1 r$r" RL_CUDA_MVS=1
  done ;;
peer)
  models ${PEER:-tl 7b 7bq4km 8b}
  for f in ${PEER:-tl 7b 7bq4km 8b}; do
    tg $M /tmp/m/$f.gguf "$f rawloop main"
    /tmp/b/lcpp/llama-bench -m /tmp/m/$f.gguf -p 0 -n 128 -r 3 -ngl 99 -o json 2>/dev/null > /tmp/lb.json
    python3 -c "import json;d=[r for r in json.load(open('/tmp/lb.json')) if r['n_gen']>0][0];print('%-36s %8.1f %5.1f'%('$f llama.cpp',d['avg_ts'],d['stddev_ts']))" || echo "$f llama.cpp FAILED"
    pv=${PEER_VAR:-lean}; tg /tmp/b/$pv/rawloop /tmp/m/$f.gguf "$f rawloop $pv"
  done ;;
table)
  # issue 4's tg rows (session 40): main's tg128 at d0 and d4096 on every file of the goal
  # table (TABLE to pick), one line a file, ROUNDS rounds
  F=${TABLE:-tl tlf16 7b 7bq4km 7bq8 7bf16 8b 8bq4km 8bq8 8bf16}; models $F
  for r in $(seq 1 ${ROUNDS:-1}); do for f in $F; do
    set -- $(tgd $M "" $f) $(tgd $M "-d 4096" $f)
    echo "$f r$r tg128 d0 $1 ± $2 | d4096 $3 ± $4"; done; done ;;
chunks)
  F=${CHUNKS:-tl 7b 8b 7bq8}; models $F
  for r in 1 2; do for f in $F; do
    # v2.12's pair (S=1 over 128 ids, S=16 over 512), then both over the same prompt: the
    # longer prompt's attention costs either chunk size more, so the pair alone understates S=16
    # CHUNK_FLAGS: bench flags for all four (session 40: "-c 4096", a run's context as in gqa)
    X=${CHUNK_FLAGS:-}
    set -- $(pp $M "-b 1 $X" $f 128) $(pp $M "$X" $f 512) $(pp $M "-b 1 $X" $f 512) $(pp $M "$X" $f 128)
    python3 -c "r=lambda a,b: a/b if b else 0; print('%-5s r$r  S=1 p128 %7.1f ± %4.1f  S=16 p512 %8.1f ± %5.1f  %5.2fx | S=1 p512 %7.1f ± %4.1f  %5.2fx | S=16 p128 %8.1f ± %5.1f  %5.2fx'%('$f',$1,$2,$3,$4,r($3,$1),$5,$6,r($3,$5),$7,$8,r($7,$1)))"
  done; done ;;
astage)
  F=${CHUNKS:-tl 7b 8b 7bq8}; models $F
  for f in $F; do
    if [ $f = tl ]; then kbits RL_CUDA_ATT_STAGE "1 0" "1 4 8 16" 40; kbits RL_CUDA_ATT_STAGE "1 0" "1 4 8 16" 300
    else kbits RL_CUDA_ATT_STAGE "1 0" "1 16" 40; fi
  done
  for r in 1 2; do for f in $F; do
    set -- $(pp $M "-b 1" $f 128) $(RL_CUDA_ATT_STAGE=0 pp $M "" $f 512) $(RL_CUDA_ATT_STAGE=1 pp $M "" $f 512)
    python3 -c "print('%-6s r$r S=1 %7.1f ± %4.1f  S=16 stage off %8.1f ± %5.1f (%5.2fx)  on %8.1f ± %5.1f (%5.2fx)'%('$f',$1,$2,$3,$4,$3/$1 if $1 else 0,$5,$6,$5/$1 if $1 else 0))"
  done; done ;;
gqa)
  # an exact chunk's flash decode in a block per KV group (session 38; RL_CUDA_ATT_GQA: above
  # that many splits a token times the group's heads, 0 never) and each chunk's graph by its
  # splits (the grid's splits capped), against the block per head and against the build before
  # (build-dev/base.tar.xz,
  # where carried): test_cuda (its attention lines: the grouped kernel's outputs, partials,
  # merge and plane byte for byte the per-head kernel's), chunk logits = one-token logits under
  # each (40 ids, and 300 / 600 / 1100: merged and widened splits, every band), S=1 and S=16 over
  # 512, 1024 and 2048 ids under each setting in turn, two rounds, on CHUNKS="tl 8b"; GQA_FLAGS
  # adds bench flags to the S=16 runs (e.g. "-c 4096": a run's context, where the build before
  # launched idle splits; base.tar.xz built before bd83052 has no bench -c and prints 0)
  F=${CHUNKS:-tl 8b}; models $F; B=/tmp/b/base/rawloop
  $(dirname $M)/test_cuda > /tmp/tc-gqa.log 2>&1; grep -E "attention staging|FAIL" /tmp/tc-gqa.log | head -30
  echo "test_cuda: $(tail -1 /tmp/tc-gqa.log)"
  for f in $F; do
    kbits RL_CUDA_ATT_GQA "4 0 16" "1 16" 300
    [ $f != tl ] || { kbits RL_CUDA_ATT_GQA "1 0" "1 4 8 16" 40; RL_CUDA_ATT_MAXSPLIT=2 kbits RL_CUDA_ATT_GQA "1 0" "1 16" 600
      kbits RL_CUDA_ATT_GQA "16 0" "1 8 16" 1100; }
    if [ -x $B ]; then ids=$(seq 1 300 | tr '\n' ' ')
      $B logits --device cuda -m /tmp/m/$f.gguf --prefill exact -b 16 --ids "$ids" -o /tmp/lg-b.bin > /dev/null 2>&1
      $M logits --device cuda -m /tmp/m/$f.gguf --prefill exact -b 16 --ids "$ids" -o /tmp/lg-m.bin > /dev/null 2>&1
      same "300 ids -b 16: main = the build before" /tmp/lg-b.bin /tmp/lg-m.bin; fi
  done
  CF=${GQA_CF:-0 8 16 32}
  for r in 1 2; do for f in $F; do
    set -- $(pp $M "-b 1" $f 128); echo "$f r$r S=1 over 128 ids: $1 ± $2"
    for n in 512 1024 2048; do line="$f r$r S=16/$n"; base=
      if [ -x $B ]; then set -- $(pp $B "${GQA_FLAGS:-}" $f $n); base=$1; line="$line | before $1 ± $2"; fi
      for c in $CF; do set -- $(RL_CUDA_ATT_GQA=$c pp $M "${GQA_FLAGS:-}" $f $n)
        [ -n "$base" ] || base=$1
        line="$line | GQA=$c $1 ± $2 ($(python3 -c "print('%+.1f%%'%(100*($1/$base-1)))"))"; done
      echo "$line"; done
  done; done ;;
apre)
  # att-pre.patch (session 39, build.sh apre; ran in session 40 and lost: PERF v2.37):
  # flash_decode_kernel copies what earlier launches wrote (each thread's first key row, each
  # warp's first batch of value rows) into shared memory before its PDL wait, and stages the
  # merge's partials in one batch (RL_CUDA_ATT_PRE: 1 the attention launched with PDL, 2 the
  # keys, 4 the values (with 2), 8 the merge). Two calls, each within 600 s, on CHUNKS="tl 8b":
  #   SKIPPERF=1: logits, main's and apre's under every value the same bytes (decoding -b 1 and
  #     chunks -b 16 at 300 ids, 600 widened, 4200, 1100), then compute-sanitizer memcheck and
  #     racecheck with 15 (split 32: merged splits; TinyLlama -b 1 and -b 16, 8B -b 1 memcheck)
  #   SKIPBITS=1: tg128 at d0 and d4096 and S=16 over 512 ids (-c 4096), main and apre under
  #     APRE="1 7 9 15", two rounds
  A=/tmp/b/apre/rawloop; [ -x $A ] || { echo "no apre build (build.sh apre, carry build-dev/apre.tar.xz)"; exit 2; }
  F=${CHUNKS:-tl 8b}; models $F; P=${APRE:-1 7 9 15}
  # abits BATCHES N VALUES: logits of ids 1..N in chunks of each of BATCHES by main, and by apre
  # under each RL_CUDA_ATT_PRE value, all the same bytes ($f: the file)
  abits() { local L= b v ids; ids=$(seq 1 $2 | tr '\n' ' ')
    for b in $1; do xlg $M /tmp/la-m-$b.bin $b "$ids"; L="$L /tmp/la-m-$b.bin"
      for v in $3; do RL_CUDA_ATT_PRE=$v xlg $A /tmp/la-$v-$b.bin $b "$ids"; L="$L /tmp/la-$v-$b.bin"; done; done
    same "$2 ids: -b $(echo $1 | tr ' ' =), main = apre under RL_CUDA_ATT_PRE $(echo $3 | tr ' ' /)" $L; rm -f $L; }
  # san TOOL FILE BATCH N: compute-sanitizer on apre with every copy, split 32
  san() { RL_CUDA_ATT_PRE=15 RL_CUDA_ATT_SPLIT=32 timeout ${SAN_T:-150} compute-sanitizer --tool $1 --error-exitcode 3 $A logits \
      --device cuda --prefill exact -b $3 -m /tmp/m/$2.gguf --ids "$(seq 1 $4 | tr '\n' ' ')" -o /tmp/ls.bin > /tmp/san-$1.txt 2>&1
    echo "sanitizer $1, $2, PRE=15 split 32, $4 ids -b $3: rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san-$1.txt | head -1)"; }
  if [ -z "${SKIPBITS:-}" ]; then
    for f in $F; do
      abits "1 16" 300 "0 1 2 6 8 10 14 15"; RL_CUDA_ATT_MAXSPLIT=2 abits "1 16" 600 "15"
      abits "1" 4200 "7 8 15"; abits "16" 1100 "15"; done
    case " $F " in *" tl "*) for t in memcheck racecheck; do san $t tl 1 40; san $t tl 16 40; done ;; esac
    case " $F " in *" 8b "*) san memcheck 8b 1 20 ;; esac
  fi
  [ -z "${SKIPPERF:-}" ] || { echo "total $(( $(date +%s) - t0 )) s"; exit 0; }
  for r in 1 2; do for f in $F; do
    for d in 0 4096; do line="$f r$r tg128 d$d"
      for v in main $P; do b=$A; [ $v != main ] || { b=$M; v=0; }
        set -- $(RL_CUDA_ATT_PRE=$v tgd $b "-d $d" $f); line="$line | $([ $b = $M ] && echo main || echo PRE=$v) $1 ± $2"
      done; echo "$line"; done
    line="$f r$r S=16/512 -c 4096"
    for v in main $P; do b=$A; [ $v != main ] || { b=$M; v=0; }
      set -- $(RL_CUDA_ATT_PRE=$v pp $b "-c 4096" $f 512); line="$line | $([ $b = $M ] && echo main || echo PRE=$v) $1 ± $2"; done
    echo "$line"
  done; done ;;
amma)
  # RL_CUDA_ATT_MMA (session 40): a KV group's flash decode on tensor cores, decoding and chunks
  # (attention.cu flash_mma_kernel; bits: 1 on, 2 the next tile's loads ahead, 4 twice the
  # warps, 8 launched with PDL: 15's bits are 7's). Not the default kernel's bits: under each
  # value its chunks must be its one-token bytes, and its logits near the default's (--exact:
  # fp32 activations, no int8 rounding flips to cascade). SKIPBITS / SKIPPERF as apre;
  # CHUNKS="tl 8b", AMMA_V="1 3 5 7 15" (17: a plain model's heads too; 33: clusters, 2-16
  # splits: with RL_CUDA_ATT_MAXSPLIT=16 exported for every run),
  # AMMA_N="300 4200", AMMA_D="0 4096" (the speed's depths: cfgrun). 1 is the default since
  # session 41, so every comparison is against RL_CUDA_ATT_MMA=0 (the block per head)
  F=${CHUNKS:-tl 8b}; models $F; AV=${AMMA_V-1 3 5 7 15}
  # near REF OTHER N: max over positions of max|a - b| / max|b| and the argmax agreement
  near() { python3 -c "
import numpy as np
a=np.fromfile('$2',dtype=np.float32).reshape($3,-1); b=np.fromfile('$1',dtype=np.float32).reshape($3,-1)
print('max rel %.2e, argmax %d/%d'%((np.abs(a-b).max(1)/np.abs(b).max(1)).max(),(a.argmax(1)==b.argmax(1)).sum(),$3))" 2>&1 | tail -1; }
  if [ -z "${SKIPBITS:-}" ]; then
    for f in $F; do
      for n in ${AMMA_N-300 4200}; do ids=$(seq 1 $n | tr '\n' ' ')
        RL_CUDA_ATT_MMA=0 xlg $M /tmp/am-0.bin 1 "$ids"
        for v in $AV; do
          L=; for b in 1 16; do RL_CUDA_ATT_MMA=$v xlg $M /tmp/am-$v-$b.bin $b "$ids"; L="$L /tmp/am-$v-$b.bin"; done
          same "$n ids, RL_CUDA_ATT_MMA=$v: -b 1 = -b 16" $L
          echo "$f $n ids: MMA=$v against the default kernel (fast): $(near /tmp/am-0.bin /tmp/am-$v-1.bin $n)"; done
        # the cluster bits (32, 64) change no byte: v against v without them, where both ran
        for v in $AV; do w=$((v & ~96)); [ $((v & 96)) = 0 ] || [ ! -f /tmp/am-$w-1.bin ] ||
          same "$n ids: RL_CUDA_ATT_MMA=$v = $w" /tmp/am-$w-1.bin /tmp/am-$v-1.bin; done
        rm -f /tmp/am-*.bin; done
      # fp32 activations: the distance the kernel's own arithmetic makes (no int8 flips)
      ids=$(seq 1 300 | tr '\n' ' '); ex=--exact
      XLG_FLAGS=--exact RL_CUDA_ATT_MMA=0 xlg $M /tmp/am-0.bin 1 "$ids"
      for v in ${AV%% *} ${AV##* }; do
        L=; for b in 1 16; do XLG_FLAGS=--exact RL_CUDA_ATT_MMA=$v xlg $M /tmp/am-$v-$b.bin $b "$ids"; L="$L /tmp/am-$v-$b.bin"; done
        same "300 ids, RL_CUDA_ATT_MMA=$v: -b 1 = -b 16" $L
        echo "$f 300 ids: MMA=$v against the default kernel (--exact): $(near /tmp/am-0.bin /tmp/am-$v-1.bin 300)"; done
      ex=; rm -f /tmp/am-*.bin
    done
  fi
  [ -z "${SKIPPERF:-}" ] || { echo "total $(( $(date +%s) - t0 )) s"; exit 0; }
  CFGS="0:RL_CUDA_ATT_MMA=0 $(for v in $AV; do printf '%s:RL_CUDA_ATT_MMA=%s ' $v $v; done)" CFG_D=${AMMA_D:-0 4096} cfgrun ;;
amprof)
  # ncu of the tensor-core attention (session 40): each launch's duration at d0, d1024 and
  # d4096 (20 launches past the first 66, clocks and caches as found) of the default kernel
  # (0) and of RL_CUDA_ATT_MMA under each AMMA_P value (default "1 7"), on CHUNKS (default tl);
  # then --set full of one d4096 launch of the last value, details and SASS source in $OUT
  F=${CHUNKS:-tl}; models $F; N="ncu --clock-control none --cache-control none"
  for f in $F; do for d in 0 1024 4096; do line="$f d$d"
    for v in 0 ${AMMA_P:-1 7}; do k=flash_decode_kernel; [ $v = 0 ] || k=flash_mma_kernel
      x=$(RL_CUDA_ATT_MMA=$v $N -k regex:$k --launch-skip 66 --launch-count 20 --metrics gpu__time_duration.sum --csv \
          $M bench --device cuda -m /tmp/m/$f.gguf -p 0 -n 8 -r 1 -d $d --no-ceiling 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(l for l in sys.stdin if l.startswith('\"')))
h=r[0]; v=[float(x[h.index('Metric Value')].replace(',','')) for x in r[1:] if x[h.index('Metric Name')]=='gpu__time_duration.sum']
print('%.2f us (%d, %.2f-%.2f)'%(sum(v)/len(v)/1000,len(v),min(v)/1000,max(v)/1000) if v else 'none')")
      line="$line | $v: $x"; done; echo "$line"; done
    v=${AMMA_P:-1 7}; v=${v##* }
    RL_CUDA_ATT_MMA=$v timeout 150 $N -k regex:flash_mma_kernel --launch-skip 60 --launch-count 1 --set full $M bench \
      --device cuda -m /tmp/m/$f.gguf -p 0 -n 8 -r 1 -d 4096 --no-ceiling > ${OUT:-/tmp}/amfull-$f.txt 2>&1
    RL_CUDA_ATT_MMA=$v timeout 150 $N -k regex:flash_mma_kernel --launch-skip 60 --launch-count 1 --set full \
      --print-source sass --page source --csv $M bench --device cuda -m /tmp/m/$f.gguf -p 0 -n 8 -r 1 -d 4096 \
      --no-ceiling > ${OUT:-/tmp}/amsrc-$f.csv 2>/dev/null
    grep -E "Duration|Registers Per|Achieved Occ|Issued Ipc|Warp Cycles Per Issued|Executed Instructions  " \
      ${OUT:-/tmp}/amfull-$f.txt | head -8
  done ;;
stage8)
  # TinyLlama's staging blocks have 8 warps already: the knob changes nothing there. S8: the two
  # knob values compared ("0 1" by default; "1 2": the normed inputs' staging too, session 33,
  # with test_cuda in 16-warp blocks under 2, whose chunk checks then take that path)
  # S8_VAR: a variant's binaries instead of main's (s8n: stage8n.patch, whose knob 2 loads the
  # two virtual threads' squares together; session 34's knob 2 loaded them one after the other)
  [ -z "${S8_VAR:-}" ] || M=/tmp/b/$S8_VAR/rawloop
  F=${CHUNKS:-7b 8b 7bq8}; models $F; set -- ${S8:-0 1}; k0=$1 k1=$2
  for f in $F; do kbits RL_CUDA_MVX_STAGE8 "$k0 $k1" "1 16" 40; done
  for r in 1 2; do for f in $F; do
    set -- $(RL_CUDA_MVX_STAGE8=$k0 pp $M "" $f 512) $(RL_CUDA_MVX_STAGE8=$k1 pp $M "" $f 512)
    python3 -c "print('%-6s r$r S=16 STAGE8=$k0 %8.1f ± %5.1f  STAGE8=$k1 %8.1f ± %5.1f  (%+.1f%%)'%('$f',$1,$2,$3,$4,100*($3/$1-1) if $1 else 0))"
  done; done
  [ $k1 != 2 ] || { RL_CUDA_MV_WARPS=16 RL_CUDA_MVX_STAGE8=2 $(dirname $M)/test_cuda > /tmp/tc-s8.log 2>&1
    echo "test_cuda, 16 warps, STAGE8=2: $(tail -1 /tmp/tc-s8.log)"; } ;;
var-*)
  # a build variant VAR (build.sh VAR, carried as build-dev/VAR.tar.xz: fma = HEAD +
  # q8-fma.patch) against main: its exact chunks (mvx and
  # the dp4a kernel) = its one-token logits, its logits against main's (the same bytes unless
  # its arithmetic differs: fma's does), then S=1 and S=16 of both alternated, two rounds
  # (main's columns are also `chunks`'s figures), and its test_cuda
  VAR=${MODE#var-}; FM=/tmp/b/$VAR/rawloop; [ -x $FM ] || { echo "no $VAR build carried (build-dev/$VAR.tar.xz)"; exit 2; }
  F=${CHUNKS:-tl 7b 8b 7bq8}; models $F
  for f in $F; do
    if [ $f = tl ]; then M=$FM kbits RL_CUDA_MVX "1 0" "1 4 8 16" 40; M=$FM kbits RL_CUDA_MVX "1 0" "1 16" 300
    else M=$FM kbits RL_CUDA_MVX "1 0" "1 16" 40; fi
    ids=$(seq 1 40 | tr '\n' ' ')
    rm -f /tmp/lg-*.bin; for b in $M $FM; do $b logits --device cuda -m /tmp/m/$f.gguf --prefill exact -b 1 --ids "$ids" -o /tmp/lg-${b//\//_}.bin > /dev/null 2>&1; done
    python3 - /tmp/lg-${M//\//_}.bin /tmp/lg-${FM//\//_}.bin $f $VAR <<'PY'
import sys, hashlib, numpy as np
a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:3])
f, var = sys.argv[3], sys.argv[4]
print(f, "main, 40 ids one at a time:", hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16])
if a.size == 0 or a.size != b.size: print(f, var, "vs main: logits missing"); sys.exit()
a, b = a.reshape(40, -1), b.reshape(40, -1)
rel = max(np.abs(a[i] - b[i]).max() / np.abs(a[i]).max() for i in range(40))
print("%s %s vs main, 40 ids one at a time: max rel %.2e, argmax %d/40, identical %s" % (f, var, rel, (a.argmax(1) == b.argmax(1)).sum(), (a == b).all()))
PY
  done
  for r in 1 2; do for f in $F; do
    set -- $(pp $M "-b 1" $f 128) $(pp $FM "-b 1" $f 128) $(pp $M "" $f 512) $(pp $FM "" $f 512)
    python3 -c "print('%-6s r$r S=1 main %7.1f ± %4.1f $VAR %7.1f ± %4.1f (%+.1f%%)  S=16 main %8.1f ± %5.1f (%5.2fx) $VAR %8.1f ± %5.1f (%5.2fx, %+.1f%%)'%('$f',$1,$2,$3,$4,100*($3/$1-1) if $1 else 0,$5,$6,$5/$1 if $1 else 0,$7,$8,$7/$3 if $3 else 0,100*($7/$5-1) if $5 else 0))"
  done; done
  /tmp/b/$VAR/test_cuda > /tmp/tc-$VAR.log 2>&1; echo "test_cuda, $VAR build: $(tail -1 /tmp/tc-$VAR.log)" ;;
res)
  F=${CHUNKS:-tl tlq8 7b 8b 7bq8}; models $F; O=/tmp/b/old/rawloop
  for f in $F; do
    if [ $f = tl ]; then B="1 4 8 16"; else B="1 16"; fi
    kbits RL_CUDA_MVX_RES "0 1" "$B" 40; kbits RL_CUDA_MVX "1 0" "$B" 40
    [ $f != tl ] || kbits RL_CUDA_MVX_RES "0 1" "1 16" 300
    ids=$(seq 1 40 | tr '\n' ' ')
    if [ -x $O ]; then
      for b in $M $O; do $b logits --device cuda -m /tmp/m/$f.gguf --prefill exact -b 16 --ids "$ids" -o /tmp/lg-${b//\//_}.bin > /dev/null 2>&1; done
      same "40 ids -b 16: main = the old build" /tmp/lg-${M//\//_}.bin /tmp/lg-${O//\//_}.bin; fi
  done
  for r in 1 2; do for f in $F; do
    s1=$(pp $M "-b 1" $f 128); set -- $(RL_CUDA_MVX_RES=0 pp $M "" $f 512) $(RL_CUDA_MVX_RES=1 pp $M "" $f 512)
    o="0 0"; [ ! -x $O ] || o=$(pp $O "" $f 512); set -- $s1 "$@" $o
    python3 -c "print('%-6s r$r S=1 %7.1f ± %4.1f  S=16 blocked %8.1f ± %5.1f (%5.2fx)  residue %8.1f ± %5.1f (%5.2fx, %+.1f%%)  old %8.1f ± %5.1f (%+.1f%%)'%('$f',$1,$2,$3,$4,$3/$1 if $1 else 0,$5,$6,$5/$1 if $1 else 0,100*($5/$3-1) if $3 else 0,$7,$8,100*($7/$3-1) if $3 else 0))"
  done; done
  /tmp/b/main/test_cuda > /tmp/tc-main.log 2>&1; echo "test_cuda, main: $(tail -1 /tmp/tc-main.log)" ;;
models) models ${MODELS:-tl 7b 7brq2 7bq4km 8b} ;;
lat) /tmp/b/main/lab_lat ${HOPS:-3000} 5 ;;
full)
  varsetup full "tl 7b 7bq4km"
  set -- "even deal:$B" "every block:$B:RL_EXP_FULL=1"; vbits "$@"; vtg "$@"
  [ ! -x /tmp/b/trF/rawloop ] || for f in ${TRACE_F:-7b}; do models $f; RL_EXP_FULL=1 trace1 trF $f; done ;;
late)
  varsetup attL "tl 7b 8b"; A=$B
  set -- "main:$M" "attL:$A" "main+band1:$M:RL_CUDA_ATT_PDL_BAND=1" "attL+band1:$A:RL_CUDA_ATT_PDL_BAND=1"
  vbits "$@"; vtg "$@"
  for f in ${LATE_D:-tl 8b}; do models $f; for e in "main:$M" "attL:$A" "main:$M" "attL:$A"; do
    echo "$f d4096 ${e%%:*}: $(tgd ${e#*:} "-d 4096" $f)"; done; done
  [ ! -x /tmp/b/trA/rawloop ] || [ ! -x /tmp/b/tr/rawloop ] || for f in ${TRACE_A:-tl}; do models $f
    echo "== tr $f"; trace1 tr $f; echo "== trA $f"; trace1 trA $f
    echo "== trA $f, RL_CUDA_ATT_PDL_BAND=1"; RL_CUDA_ATT_PDL_BAND=1 trace1 trA $f; done ;;
tail)
  varsetup tail "tl 7b 8b 7bq4km"
  set -- "main:$M" "tail1:$B:RL_EXP_TAIL=1" "tail2:$B:RL_EXP_TAIL=2"
  vbits "$@"; [ ! -x /tmp/b/full/rawloop ] || set -- "$@" "full:/tmp/b/full/rawloop:RL_EXP_FULL=1"; vtg "$@" ;;
wmaj)
  varsetup wmaj "tl 7b 8b 7bq4km"; vtest wmaj RL_EXP_WMAJ=1
  vbits "main:$M" "wmaj:$B:RL_EXP_WMAJ=1"; vtg "deal0:$B" "wmaj:$B:RL_EXP_WMAJ=1"
  for f in ${TRACE_W:-}; do models $f
    [ ! -x /tmp/b/tr/rawloop ] || { echo "== tr $f"; trace1 tr $f; }
    [ ! -x /tmp/b/trW/rawloop ] || { echo "== trW $f"; RL_EXP_WMAJ=1 trace1 trW $f; }; done ;;
ampad)
  varsetup ampad "tl 8b"; vtest ampad; vbits "main:$M" "ampad:$B"; vchunks 300 "main:$M:" "ampad:$B:"
  vtgd "main:$M:" "ampad:$B:" ;;
q8x)
  # q8x.patch (session 53): f16 bits = main's, q8 chunks of 16 = one token, tg128 at depths 0
  # and 4096 of main f16 / main q8 / q8x q8 (its test_cuda and stage q: tests-q8x, TSTAGES="k q")
  varsetup q8x "tl 8b"; vbits "main:$M" "q8x:$B"; vchunks 300 "q8x:$B:--kv-type q8"
  vtgd "main-f16:$M:" "main-q8:$M:--kv-type q8" "q8x-q8:$B:--kv-type q8" ;;
wide)
  varsetup wide "7b 8b 7bq4km tl"; vtest wide RL_EXP_WIDE=18
  vbits "main:$M" "wide:$B:RL_EXP_WIDE=18"; vtg "main:$M" "wide0:$B" "wide18:$B:RL_EXP_WIDE=18" ;;
clm)
  # clm.patch (session 54): decoding's logits (-b 1) of main and clm over 2200 ids (16 splits,
  # so the clusters merge), fast and --exact, the same bytes; tg128 at depths 0 and 4096 of main
  # and clm on CMP (default "tl 8b"), ROUNDS (2); its test_cuda: bash bench/exp/run.sh tests-clm
  varsetup clm "tl 8b"; IDS=$(seq 1 2200 | tr '\n' ' '); vbits "main:$M" "clm:$B"; vtgd "main:$M:" "clm:$B:" ;;
fdp)
  # fdp.patch (session 54): the block per head with a key's 16 loads in one trip and the next
  # value batch in flight (5 blocks an SM at 96 registers): main = fdp logits at -b 1 over 2200
  # ids on 7B and TinyLlama with RL_CUDA_ATT_MMA=0 (every head on the block per head), fast
  # and --exact; exact chunks of 16 = -b 1 over 300 ids, both builds; tg128 at depths 0 and
  # 4096 of main / fdp on 7B, f16 and q8 caches; S=16 over 512 ids at -c 4096 on 7B, ROUNDS (2)
  varsetup fdp "7b tl"; IDS=$(seq 1 2200 | tr '\n' ' '); vbits "main:$M:RL_CUDA_ATT_MMA=0" "fdp:$B:RL_CUDA_ATT_MMA=0"
  F=7b; vchunks 300 "main:$M:" "fdp:$B:"
  vtgd "main:$M:" "fdp:$B:"; vtgd "main-q8:$M:--kv-type q8" "fdp-q8:$B:--kv-type q8"
  for r in $(seq 1 ${ROUNDS:-2}); do set -- $(pp $M "-c 4096" 7b 512) $(pp $B "-c 4096" 7b 512)
    echo "7b r$r S=16/512 -c 4096 | main: $1 ± $2 | fdp: $3 ± $4 ($(rel $1 $3))"; done ;;
clw)
  # clw.patch on clm.patch (session 54): the cluster variant in twice the warps (RL_CUDA_ATT_MMA
  # 37 = 1 | 4 | 32; one key tile a warp at 256 positions a split): clw at 33 = clm's bytes;
  # under 37, exact chunks of 16 = -b 1 over 300 ids, fast and --exact; tg128 at depths 0 and
  # 4096 of main / clw at 33 (clm's code), then clw at 33 / 37, on CMP (default "tl 8b"), ROUNDS (2)
  varsetup clw "tl 8b"; C=/tmp/b/clm/rawloop
  [ ! -x $C ] || vbits "clm:$C" "clw:$B"
  (export RL_CUDA_ATT_MMA=37; vchunks 300 "clw37:$B:"; vchunks 300 "clw37:$B:--exact")
  vtgd "main:$M:" "clw33:$B:"
  CFG_BIN=$B CFGS="c33: c37:RL_CUDA_ATT_MMA=37" CFG_D="0 4096" CFG_S16=0 cfgrun ;;
trace|atrace)
  # atrace: the trAt build on three files by default (trace1 adds trace_att.py's table)
  if [ $MODE = atrace ]; then F=${CMP:-tl 8b 7b}; VS=${TRACE:-trAt}; else F=${CMP:-tl}; VS=${TRACE:-tr trI}; fi
  models $F
  for f in $F; do tg $M /tmp/m/$f.gguf "$f main"
    for v in $VS; do [ -x /tmp/b/$v/rawloop ] || { echo "no build of $v here"; continue; }
      tg /tmp/b/$v/rawloop /tmp/m/$f.gguf "$f $v (ring off)"; trace1 $v $f; done; done ;;
kb)
  # one knob's bytes (session 44): logits of KB_N ids by exact chunks of each of KB_B, fast and
  # --exact, under each of KB_V for the knob KB_K, on CHUNKS: all the same, or a line says which not
  F=${CHUNKS:-tl 8b}; models $F
  for f in $F; do for ex in "" --exact; do XLG_FLAGS=$ex kbits $KB_K "$KB_V" "${KB_B:-1 16}" ${KB_N:-300}; done; done ;;
cfg)
  # knob settings side by side (session 42): cfgrun on CHUNKS ("tl 8b")
  F=${CHUNKS:-tl 8b}; models $F; cfgrun ;;
*) echo "unknown mode $MODE (models, table, kb, cfg, amma, amprof, tests-VARIANT, cmp-VAR, bits, lean, flush, dual, chunks, astage, gqa, apre, stage8, var-VAR, res, prologue, tests-sf, peer, lat, trace, full, late, tail, wmaj, wide, ampad, q8x, atrace, clm, fdp, clw)"; exit 2 ;;
esac
echo "total $(( $(date +%s) - t0 )) s"

# Device script (carry build-dev and .dev/cuda, as run.sh): ncu of `bench --prefill exact -p 16
# -n 0 -r 1` (two chunks of 16 and one one-token step: docs/PERF.md v2.29 §2), every launch's
# duration (clocks and caches as found: --clock-control none --cache-control none) for each
# build in CP_BINS (default main), summed per kernel by ncu_agg.py, then one gate+up mvx
# launch's issue and stall figures on 7B Q4_0. First run in session 32 (v2.29: mvx ~80% of a
# 7B chunk, latency-bound at 16 warps an SM, not issue-bound). CP_P: the prompt (default 16; at
# 512 the chunks' attention runs over 0..511 positions, where S = 16 loses 11-16% against a
# 128-id prompt, v2.31 §1: the per-kernel sums then say how much of that is the flash decode;
# CP_TIMEOUT, default 120 s, bounds each ncu run: give it ~400 at 512, 32 chunks of launches).
set -u; cd "$(dirname "$0")/../.."
MODELS="${CP_MODELS:-tl 7b}" bash bench/exp/run.sh models | tail -1
for v in ${CP_BINS:-main}; do M=/tmp/b/$v/rawloop
for f in ${CP_MODELS:-tl 7b}; do
  echo "== $v $f: exact chunks of 16 (bench -p ${CP_P:-16} -n 0 -r 1), every launch"
  timeout ${CP_TIMEOUT:-120} ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv $M bench --device cuda \
    --prefill exact -m /tmp/m/$f.gguf -p ${CP_P:-16} -n 0 -r 1 --no-ceiling > /tmp/ncu_$f.csv 2>/tmp/ncu_$f.err || tail -5 /tmp/ncu_$f.err
  python3 bench/exp/ncu_agg.py /tmp/ncu_$f.csv | head -14
done
f=7b
echo "== $v $f: one gate+up mvx launch"
timeout 120 ncu --clock-control none --cache-control none -k regex:mvx_kernel --launch-skip ${CP_SKIP:-10} --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio $M bench --device cuda --prefill exact \
  -m /tmp/m/$f.gguf -p 16 -n 0 -r 1 --no-ceiling 2>&1 |
  grep -E "mvx_kernel|Duration|Throughput|Issued Ipc|Issue Slots|Eligible Warps|Active Warps Per|No Eligible|Achieved Occ|Warp Cycles Per Issued|stalled" |
  awk '$NF+0 > 0.05 || !/stalled/' | head -40
done

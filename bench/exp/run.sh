# Device script for bench/exp (README.md there). Build here first with bench/exp/build.sh
# (build-dev/bins.tar.xz: main, main + scale-free.patch, main + exp-prologue.patch, for sm_90a),
# copy the llama SPM test vocabulary to .dev/cuda, and carry build-dev and .dev/cuda. The
# scale-free build's tests are tests/cuda/run_device.sh's (unpack it to a build dir first).
set -u; cd "$(dirname "$0")/../.."
mkdir -p /tmp/m /tmp/b; tar xJf build-dev/bins.tar.xz -C /tmp/b
M=/tmp/b/main/rawloop S=/tmp/b/sf/rawloop X=/tmp/b/exp/rawloop V=.dev/cuda/ggml-vocab-llama-spm.gguf
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv,noheader
mk() { [ -f /tmp/m/$3 ] || $M mkmodel --shape $1 --type $2 --vocab $V -o /tmp/m/$3 -t $4 > /tmp/m/$3.log 2>&1; }
tg() { local b=$1 f=$2 l=$3; shift 3
  env "$@" $b bench --device cuda -m $f -p 0 -n 128 -r 3 --json 2>/dev/null | tail -1 > /tmp/j.json
  python3 -c "import json;d=json.load(open('/tmp/j.json'));print('%-36s %8.1f %5.1f'%('$l',d['tg_tps'],d['tg_sd']))" || echo "$l FAILED"; }
t0=$(date +%s)
mk tinyllama-1.1b Q4_0 tl.gguf 4 & mk llama2-7b Q4_0 7b.gguf 6 & mk llama2-7b F16 7bf16.gguf 6 & wait
echo "models $(( $(date +%s) - t0 )) s"
for f in tl 7b; do for r in 1 2; do
  tg $M /tmp/m/$f.gguf "$f main r$r"; tg $S /tmp/m/$f.gguf "$f scale-free r$r"
  tg $X /tmp/m/$f.gguf "$f exp NONORM r$r" RL_EXP_NONORM=1
  for e in 1 2 4 5; do tg $X /tmp/m/$f.gguf "$f exp RL_EXP=$e r$r" RL_EXP=$e; done
done; done
for r in 1 2; do
  tg $M /tmp/m/7bf16.gguf "7B F16 main r$r"; tg $M /tmp/m/7bf16.gguf "7B F16 RL_CUDA_MVS=1 r$r" RL_CUDA_MVS=1
done
echo "total $(( $(date +%s) - t0 )) s"

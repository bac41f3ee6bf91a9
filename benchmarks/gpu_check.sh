#!/usr/bin/env bash
# On a CUDA machine: the generated torch optimizers (default, foreach, fused, capturable paths) and Triton kernels
# against torch.optim (benchmarks/gpu_check.py), then the Triton kernels' achieved memory bandwidth against the
# device's peak (benchmarks/bench_triton.py: vendor figure and a measured device-to-device copy), then the speed
# ratios of issue 39 on the GPU (items 2, 4, 6): the generated Adam's default and fused paths against torch's
# foreach and fused Adam (bench_fused_ab.py), IVON per training iteration against ivon-opt where it is installed
# (bench_ivon_small.py), and a compiled training step against torch.optim's (bench_torch_compile_step.py).
# Run from the repository root after the README's set-up:   bash benchmarks/gpu_check.sh   (about five minutes on
# an H200).  Each part runs under `timeout`; all output is also appended to $OUT/gpu_check.log (or /tmp/gpu_check).
# Without a CUDA device every script says so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null \
  || echo "nvidia-smi: not found"
python -c "import blr_derive.codegen" 2>/dev/null \
  || { echo "gpu_check: blr_derive is not installed here: run the README's set-up (pip install -e .) first"; exit 2; }
python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
status=0
log="$out/gpu_check.log"
part() {  # part NAME SECONDS COMMAND...: run COMMAND under a time limit, its output also appended to $log
  local name=$1 limit=$2; shift 2
  echo "=== $name" | tee -a "$log"
  timeout "$limit" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "=== $name: exit $rc"; status=1; }
}
part check 150 python benchmarks/gpu_check.py --device cuda
part bandwidth 120 python benchmarks/bench_triton.py --numel 1e8 --json "$out/bandwidth.json"
for total in 1.6e4 8e6 1e8; do
  part "fused_$total" 60 python benchmarks/bench_fused_ab.py --device cuda --total "$total" --rounds 200
  part "foreach_$total" 60 python benchmarks/bench_fused_ab.py --device cuda --total "$total" --rounds 200 --path foreach
done
if python -c "import ivon" 2>/dev/null; then
  part ivon_small 120 python benchmarks/bench_ivon_small.py --device cuda --sizes mlp,cnn,1e6 --reps 5 --iters 20
else
  echo "=== ivon_small: ivon-opt is not installed here; skipped"
fi
part compile_step 150 python benchmarks/bench_torch_compile_step.py --device cuda --only adam,sgd_momentum --steps 50 --reps 5
exit $status

#!/usr/bin/env bash
# On a CUDA machine: the generated torch optimizers (default, foreach, fused, capturable paths) and Triton kernels
# against torch.optim (benchmarks/gpu_check.py), then the Triton kernels' achieved memory bandwidth against the
# device's peak (benchmarks/bench_triton.py: vendor figure and a measured device-to-device copy).  Run from the
# repository root after the README's set-up:   bash benchmarks/gpu_check.sh   (about two minutes on an H100)
# Without a CUDA device both scripts say so and exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
status=0
python benchmarks/gpu_check.py --device cuda || status=$?
python benchmarks/bench_triton.py --numel 1e8 || status=$?
exit $status

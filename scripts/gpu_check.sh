#!/usr/bin/env bash
# GPU checks, run on a lent CUDA machine (the device tool) from the repo root:
#   bash scripts/gpu_check.sh            # logs and bench JSON under $OUT (default ./gpu-out)
# Carried wheels and paths: scripts/gpu_env.sh; how to build the wheels in .whl/: docs/gpu.md.
# The local runtime backend is used (monarch does not travel).
set -uo pipefail
source scripts/gpu_env.sh
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
} 2>&1 | tee "$out/device.txt"
timeout 120 python3 scripts/gpu_jail_probe.py 2>&1 | tee "$out/jail_probe.txt"
status=0
if [ "${GPU_APP:-0}" = 1 ]; then  # SFT then GRPO on the GPU (configs/grpo_gpu.yaml)
  timeout 200 python3 -m apps.sft.main --config configs/sft.yaml device=cuda output_dir=runs/gpu/sft \
    "metrics.backends=[{type: jsonl, path: $out/sft_metrics.jsonl}]" 2>&1 | tail -5 | tee "$out/sft.log" || status=1
  timeout ${GPU_APP_TIMEOUT:-300} python3 -m apps.grpo.main --config configs/grpo_gpu.yaml \
    "metrics.backends=[{type: console}, {type: jsonl, path: $out/grpo_metrics.jsonl}]" 2>&1 \
    | tee "$out/grpo.log" | tail -25 || status=1
fi
# GPU_EVAL=1: the eval app on every built-in task (shipped solutions, timed vs eager and
# torch.compile); with GPU_APP=1 also the SFT model, k=4, 3 turns with STTS (GPU_EVAL_NAMES tasks)
if [ "${GPU_EVAL:-0}" = 1 ]; then
  timeout ${GPU_EVAL_TIMEOUT:-300} python3 -m apps.eval.main --config configs/eval_gpu.yaml run_dir="$out/eval_solutions" \
    2>&1 | tail -40 | tee "$out/eval_solutions.log" || status=1
  if [ "${GPU_APP:-0}" = 1 ]; then
    timeout ${GPU_EVAL_TIMEOUT:-300} python3 -m apps.eval.main --config configs/eval_gpu.yaml run_dir="$out/eval_sft" \
      policy.source=generator policy.path=runs/gpu/sft policy.generator.dtype=float32 samples_per_task=4 \
      turns.max_turns=3 "env.config.tasks.names=[${GPU_EVAL_NAMES:-level1/relu,level1/add,level1/mul,level1/gelu,level1/sigmoid,level1/tanh,level1/silu,level1/leaky_relu}]" \
      "env.config.tasks.levels=[1]" 2>&1 | tail -40 | tee "$out/eval_sft.log" || status=1
  fi
fi
# GPU_TESTS narrows the run (e.g. GPU_TESTS=tests/eval); GPU_SMOKE=0 skips the smoke app.
[ "${GPU_TESTS:-}" = none ] || timeout ${GPU_TEST_TIMEOUT:-420} python3 -m pytest ${GPU_TESTS:-} -m gpu -q -s -p no:cacheprovider -o addopts="--import-mode=importlib -ra" 2>&1 | tee "$out/pytest_gpu.log" || status=1
for b in ${GPU_BENCHES:-eval_overhead eval_service}; do
  args=""; [ "$b" = eval_service ] && args="--devices 0"
  timeout 300 python3 -m bench."$b" $args 2>"$out/bench_$b.err" | tee -a "$out/bench.jsonl" || status=1
done
[ "${GPU_SMOKE:-1}" = 0 ] && exit $status  # GPU_TESTS=none skips pytest
timeout 120 python3 -m apps.smoke.main --config configs/smoke.yaml device=cuda \
  "metrics.backends=[{type: console}]" 2>&1 | tail -3 | tee "$out/smoke.log" || status=1
exit $status

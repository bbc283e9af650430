#!/usr/bin/env bash
# Real sizes on a lent two-GPU machine (nvidia-h200-x2), from the repo root, with .whl/ carried:
#   bash scripts/gpu_scale.sh        # cuda_ipc GPU tests, weight sync 1.7B/8B, GRPO at 1.7B and 8B -> $OUT
# SCALE_8B=0 skips the 8B GRPO run. Carried wheels and paths: scripts/gpu_env.sh.
set -uo pipefail
source scripts/gpu_env.sh
export TOKENIZERS_PARALLELISM=false
timeout 200 python3 -m pytest tests/store/test_cuda_ipc_store.py -m gpu -q -p no:cacheprovider \
  -o addopts="--import-mode=importlib -ra" 2>&1 | tail -5 | tee "$out/store_gpu.log"
timeout 330 python3 -m bench.weight_sync_gpu --model qwen3-1.7b --transport cuda_ipc shm 2>"$out/wsync.err" | tee -a "$out/bench.jsonl"
timeout 200 python3 -m bench.weight_sync_gpu --model qwen3-8b --transport cuda_ipc 2>>"$out/wsync.err" | tee -a "$out/bench.jsonl"
timeout 300 python3 -m bench.grpo_scale --config configs/grpo_scale_x2.yaml > "$out/scale_1p7b.log" 2>&1
grep '"bench"' "$out/scale_1p7b.log" | tee -a "$out/bench.jsonl"
if [ "${SCALE_8B:-1}" = 1 ]; then
  rm -rf runs/scale
  timeout 400 python3 -m bench.grpo_scale --config configs/grpo_scale_x2.yaml model.random_init=qwen3-8b steps=4 \
    trainer.optim.dtype=bfloat16 trainer.optim.activation_checkpointing=true trainer.fused_lm_head=true \
    > "$out/scale_8b.log" 2>&1
  grep '"bench"' "$out/scale_8b.log" | tee -a "$out/bench.jsonl"
fi

#!/usr/bin/env bash
# The fused logprob kernels on a lent GPU (device tool), from the repo root:
#   bash scripts/gpu_logprob.sh        # GPU tests, bench.logprob, a block/warps sweep -> $OUT
# The image lacks pydantic (losses/ imports it): carry .whl/ as scripts/gpu_check.sh does.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest tests/losses/test_fused_logprob_gpu.py tests/losses/test_logprobs_gpu.py -m gpu -q \
  -p no:cacheprovider -o addopts="--import-mode=importlib -ra" 2>&1 | tail -8 | tee "$out/logprob_tests.log"
timeout 240 python3 -m bench.logprob 2>"$out/logprob_bench.err" | tee -a "$out/bench.jsonl"
for block in ${SWEEP_BLOCKS:-2048 4096 8192 16384}; do
  for warps in ${SWEEP_WARPS:-4 8 16}; do
    FORGE_LOGPROB_BLOCK=$block FORGE_LOGPROB_WARPS=$warps timeout 60 python3 -m bench.logprob --fused-only \
      --repeats 5 2>>"$out/logprob_sweep.err" | tee -a "$out/logprob_sweep.jsonl"
  done
done

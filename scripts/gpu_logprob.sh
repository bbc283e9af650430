#!/usr/bin/env bash
# Fused logprob kernels on a lent CUDA GPU, in one call (~4-6 min on an H100), from the repo root:
#   bash scripts/gpu_logprob.sh        # carry .whl (pydantic & co: `losses` imports pydantic)
# Worst case (every step at its timeout) ~7.5 min. 1. GPU tests of the kernels (tests/losses/test_logprobs_gpu.py, and the interpreter tests of
#    tests/losses/test_fused_logprob.py, which run on CUDA tensors there); 2. the benchmark JSON
#    (bench/logprob.py: fused vs eager, fused LM head); 3. a sweep of kernel configs (block,
#    warps, stages, splits) printed as a table. A step's failure does not stop the next.
# Everything goes to $OUT (default ./gpu-out): pytest.log, bench.jsonl, sweep.log, summary.txt.
# LOGPROB_BENCH_ARGS adds bench arguments (e.g. --quick, to try this script on a CPU machine).
set -x
out=${OUT:-gpu-out}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET FORGE_LOGPROB_IMPL
status=0
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
} 2>&1 | tee "$out/device.txt"

timeout ${LOGPROB_TEST_TIMEOUT:-150} python3 -m pytest tests/losses/test_logprobs_gpu.py tests/losses/test_fused_logprob.py \
  -q -p no:cacheprovider -o addopts="--import-mode=importlib -ra" 2>&1 | tee "$out/pytest.log" || status=1

timeout ${LOGPROB_BENCH_TIMEOUT:-120} python3 -m bench.logprob ${LOGPROB_BENCH_ARGS:-} 2>"$out/bench.err" | tee -a "$out/bench.jsonl" || status=1
tail -5 "$out/bench.err"

timeout ${LOGPROB_SWEEP_TIMEOUT:-180} python3 -m bench.logprob --sweep --no-eager --no-lm-head --repeats 10 ${LOGPROB_BENCH_ARGS:-} \
  2>"$out/sweep.log" >"$out/sweep.jsonl" || status=1

# the short summary last: the call's reply carries the end of the output
{
  echo "== pytest"; tail -3 "$out/pytest.log"
  echo "== bench"; python3 - "$out/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    keys = ["device", "fwd_ms", "fwd_bwd_ms", "extra_gib", "fwd_gbps", "bwd_gbps", "logprob_max_err",
            "entropy_max_err", "eager_fwd_ms", "eager_fwd_bwd_ms", "eager_extra_gib"]
    print({k: r.get(k) for k in keys})
    print("fused_lm_head", r.get("fused_lm_head"))
PY
  echo "== sweep"; grep -v "^+" "$out/sweep.log" | tail -30
} 2>&1 | tee "$out/summary.txt"
exit $status

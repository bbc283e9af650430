# Sourced by the GPU scripts (scripts/gpu_*.sh) on a lent CUDA machine, from the repo root: the
# output folder ($OUT, default ./gpu-out), the carried wheels installed into /tmp/site (the image
# has torch and triton but not pydantic, omegaconf, fastapi or uvicorn; docs/gpu.md says how to
# build .whl/), and the paths and variables every GPU run needs.
out=${OUT:-gpu-out}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
# NVLink multicast stays off on multi-GPU machines (it can take a shared host's GPUs down)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

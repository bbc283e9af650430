#!/usr/bin/env bash
# Create .venv (idempotently) and install Forge Kernels with its test tools.
#
#   bash scripts/install.sh            # CPU or CUDA, detected from nvidia-smi
#   FORGE_DEVICE=cpu bash scripts/install.sh
#   FORGE_EXTRAS=test,vllm bash scripts/install.sh
#
# Re-running is a no-op (well under a second) while pyproject.toml, the constraints and this
# script are unchanged: a stamp in .venv records the hash of what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-python3}
venv=${FORGE_VENV:-.venv}
extras=${FORGE_EXTRAS:-test}

device=${FORGE_DEVICE:-}
if [[ -z "$device" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    device=cuda
  else
    device=cpu
  fi
fi
case "$device" in
  cpu) constraints=(-c constraints/cpu.txt) ;;
  cuda) constraints=() ;;
  *) echo "install.sh: FORGE_DEVICE='$device' is not one of: cpu, cuda" >&2; exit 2 ;;
esac

stamp_inputs="$device $extras $(cat pyproject.toml constraints/*.txt scripts/install.sh | sha256sum)"
stamp="$venv/.forge-install-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$stamp_inputs" ]]; then
  exit 0
fi

"$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "install.sh: Python >= 3.11 required, found $("$python_bin" --version 2>&1)" >&2; exit 2; }
[[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
echo "install.sh: installing forge-kernels[$extras] for $device into $venv" >&2
log=$(mktemp)
if ! "${pip[@]}" install -q "${constraints[@]}" -e ".[$extras]" >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2; rm -f "$log"; exit 1
fi
rm -f "$log"
# torchstore (the multi-host tensor store backend) pins torch 2.9 and torchmonarch 0.1.2; it runs
# on this project's torch and torchmonarch 0.7 through forge_kernels/store/torchstore_compat.py,
# so it goes in without its dependencies (its one other dependency, pygtrie, is in pyproject.toml).
if [[ "$(uname -s)" == Linux ]]; then
  "${pip[@]}" install -q --no-deps torchstore==0.1.2
fi
# torchvision/torchaudio/torchcodec builds that do not match the installed torch break
# `import transformers`; nothing here needs them.
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$venv/bin/python" -c 'import torch, triton, pydantic, omegaconf'
if [[ "$(uname -s)" == Linux ]]; then
  "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torchstore") is None)'
fi
echo "$stamp_inputs" > "$stamp"

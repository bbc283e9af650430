# The README's two commands: `make demo` and `make test`. Both bootstrap .venv first.
PY := .venv/bin/python
PYTEST := $(PY) -m pytest

.PHONY: install demo test test-slow test-gpu bench clean
install:
	@bash scripts/install.sh

demo: install
	$(PY) -m apps.smoke.main --config configs/smoke.yaml

test: install
	$(PYTEST) -m "not slow and not gpu" -q

test-slow: install
	$(PYTEST) -m "slow and not gpu" -q

test-gpu: install
	$(PYTEST) -m gpu -q

clean:
	rm -rf .venv runs outputs .pytest_cache

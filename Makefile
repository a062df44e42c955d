# Two entry points, each self-sufficient on a fresh machine: the first use builds .venv/.
#   make run    DLRM-HSTU on generated Yambda-schema data, CPU, small (a few minutes)
#   make test   the test suite
VENV   ?= .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.stack-installed

.PHONY: run test test-fast bench venv clean-venv

venv: $(STAMP)

$(STAMP): scripts/setup_venv.sh scripts/requirements-extra.txt pyproject.toml
	VENV=$(VENV) bash scripts/setup_venv.sh

run: $(STAMP)
	$(PYTHON) -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin

test: $(STAMP)
	$(PYTHON) -m pytest -q

# everything except tests marked slow
test-fast: $(STAMP)
	$(PYTHON) -m pytest -q -m "not slow"

bench: $(STAMP)
	bash scripts/benchmark.sh

clean-venv:
	rm -rf $(VENV)

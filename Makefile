# Two entry points, each self-sufficient on a fresh machine: the first use builds .venv/.
#   make run    DLRM-HSTU on generated Yambda-schema data, CPU, small (a few minutes)
#   make test   the test suite
#   make replay RUN=<run dir>   replays the run's exported load with DLIO 2.0.0 (builds .venv-dlio/ on first use)
VENV   ?= .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.stack-installed

.PHONY: help run test test-fast bench replay venv clean-venv
.DEFAULT_GOAL := help

# `make` alone: the targets, one line each, with how long each takes on the 2-core development machine
help:
	@echo "make run          DLRM-HSTU on generated Yambda-schema data, CPU, small: builds .venv/ and the data first (~7 min fresh)"
	@echo "make test         the test suite on two workers, as CI runs it (25-40 min, by the machine; TEST_WORKERS=1: one process, about 1.7x that)"
	@echo "make test-fast    the suite without the slow and over-budget tests (~3 min)"
	@echo "make bench        every benchmark's loader and training throughput (docs/datasets.md)"
	@echo "make replay RUN=<run dir>   a run's measured load replayed with DLIO 2.0.0 (builds .venv-dlio/ on first use)"
	@echo "make venv         only the pinned Python stack in .venv/ (~2 min); make clean-venv removes it"
	@echo "Docs: README.md, docs/README.md; the tests: docs/testing.md"

venv: $(STAMP)

$(STAMP): scripts/setup_venv.sh scripts/requirements-extra.txt pyproject.toml
	VENV=$(VENV) bash scripts/setup_venv.sh

run: $(STAMP)
	$(PYTHON) -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin

# one pytest session on two xdist workers (tests/parallel.py groups what cannot share the machine and sends
# the longest work out first, hence --no-loadscope-reorder): 1,475-2,400 s of pytest by the machine, 1.75x faster
# than one process on the same machine (docs/measurements.md). TEST_WORKERS=1 runs it in one process. PYTEST_ARGS
# adds to the command line.
TEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder,)
test: $(STAMP)
	$(PYTHON) -m pytest -q $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# the inner loop: everything except the tests marked slow or over the time budget (docs/testing.md)
test-fast: $(STAMP)
	$(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m "not slow and not over_budget" $(PYTEST_ARGS)

bench: $(STAMP)
	bash scripts/benchmark.sh

# DLIO itself runs in .venv-dlio/ (storage/dlio/environment/setup_env.sh); the replay module builds it when missing
replay:
	@test -n "$(RUN)" || { echo "usage: make replay RUN=<run dir>" >&2; exit 2; }
	@$(MAKE) -s --no-print-directory $(STAMP)
	$(PYTHON) -m storage.dlio replay $(RUN)

clean-venv:
	rm -rf $(VENV)

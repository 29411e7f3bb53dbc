# bdl: common tasks. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export BDL_DATA_DIR ?= $(abspath ../shared/data)

.DEFAULT_GOAL := help
.PHONY: help install run test test-slow lint format bench reproduce-chen-mnist reproduce-uci-boston

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-22s %s\n", $$1, $$2}'

$(BIN)/bdl-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e ".[dev]"
	@touch $@

install: $(BIN)/bdl-run ## create .venv and install bdl with its dev tools

run: install ## SGHMC on MNIST with Chen et al.'s setup (the quick start)
	$(BIN)/bdl-run sampler=sghmc dataset=mnist

test: install ## the default test suite (slow tests excluded)
	$(BIN)/pytest

test-slow: install ## the slow statistical and end-to-end checks
	$(BIN)/pytest -m slow

lint: install ## ruff lint and format check
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

format: install ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix src tests scripts
	$(BIN)/ruff format src tests scripts

bench: install ## SGHMC epoch vs a bare PyTorch SGD-momentum loop on MNIST, same process
	$(BIN)/python scripts/bench.py

reproduce-chen-mnist: install ## Chen et al. 2014 MNIST: SGD, SGD+momentum, SGLD, SGHMC x 2 seeds
	$(BIN)/bdl-run -m experiment=chen2014_mnist sampler=sgd,sgd_momentum,sgld,sghmc seed=0,1 \
		hydra.sweep.dir=multirun/chen2014_mnist
	$(BIN)/bdl-report multirun/chen2014_mnist

reproduce-uci-boston: install ## SGHMC on the 20 standard Boston splits
	$(BIN)/bdl-run -m experiment=uci_sghmc dataset=boston \
		dataset.split=$$(seq -s, 0 19) hydra.sweep.dir=multirun/uci_boston
	$(BIN)/bdl-report multirun/uci_boston --by dataset sampler

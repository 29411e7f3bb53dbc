# bdl: common tasks. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Real data: a shared/data folder beside the checkout, where there is one (else downloads).
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)),)
export BDL_DATA_DIR ?= $(SHARED_DATA)
endif

.DEFAULT_GOAL := help
.PHONY: help install install-dev run demo test test-generic test-slow lint format docs docs-serve bench bench-peers mutation mutation-full reproduce-chen-mnist reproduce-uci reproduce-uci-quick check \
	reproduce-izmailov-mnist reproduce-blundell-mnist reproduce-blundell-mnist-1200

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-30s %s\n", $$1, $$2}'

# A user's install is bdl and what its commands need; a contributor's adds the tests' tools and
# every extra (so that the extras' tests run). The stamps rebuild both when pyproject.toml changes.
$(BIN)/bdl-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e .
	@touch $@

$(VENV)/.dev: $(BIN)/bdl-run
	$(BIN)/pip install -e ".[dev]"
	@touch $@

install: $(BIN)/bdl-run ## create .venv and install bdl (what its commands need)
install-dev: $(VENV)/.dev ## the same plus the tests' tools and every extra (pytest, ruff, MkDocs, ...)

run: install ## SGHMC on MNIST with Chen et al.'s setup (the quick start)
	$(BIN)/bdl-run sampler=sghmc dataset=mnist

demo: install ## a first result in seconds: SGHMC on MNIST for 10 epochs, a demo (make run is the real run)
	$(BIN)/bdl-run sampler=sghmc dataset=mnist epochs=10 burn_in=5
	@echo "make demo: 10 epochs are a demo of the workflow, too few to converge (its verdict says so); make run samples the full run"

# Two worker processes of one thread each: the suite's tests are small and mostly one-core work
test: install-dev ## the default test suite (slow tests excluded), on two worker processes
	OMP_NUM_THREADS=1 $(BIN)/pytest -n 2 --dist loadfile

# The suite as a CPU without AVX-512 computes it (an AMD EPYC's AVX2, or older): torch's own kernels
# pinned to CPU_CAPABILITY (torch reads ATEN_CPU_CAPABILITY: default, avx2 or avx512; any other
# value is ignored), and MKL's and oneDNN's held to AVX2, so that a developer on an AVX-512 machine
# sees the rounding another user sees. No test may depend on it.
CPU_CAPABILITY ?= default
test-generic: install-dev ## the default suite with torch's kernels below AVX-512 (CPU_CAPABILITY=default, or avx2)
	ATEN_CPU_CAPABILITY=$(CPU_CAPABILITY) MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
		OMP_NUM_THREADS=1 $(BIN)/pytest -n 2 --dist loadfile

test-slow: install-dev ## the slow statistical and end-to-end checks
	$(BIN)/pytest -m slow

# the Python that ruff checks and formats
PYTHON_SOURCES := src tests scripts docs/hooks

lint: install-dev ## ruff lint and format check
	$(BIN)/ruff check $(PYTHON_SOURCES)
	$(BIN)/ruff format --check $(PYTHON_SOURCES)

format: install-dev ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix $(PYTHON_SOURCES)
	$(BIN)/ruff format $(PYTHON_SOURCES)

MUTATION_SEED ?= 0
MUTATION_SAMPLE ?= 40
MUTATION_JOBS ?= 1
mutation: install-dev ## a seeded sample of mutmut's mutants of every module: docs/mutation/results-<seed>.json (under an hour, one core)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/mutation.py --seed $(MUTATION_SEED) --sample $(MUTATION_SAMPLE) --jobs $(MUTATION_JOBS)

mutation-full: install-dev ## every mutant of src/bdl (17 659 at bde1161: over a week of one core at 40 s a mutant)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/mutation.py --seed $(MUTATION_SEED) --sample 1.0

# Material's banner about MkDocs 2 is no warning of this build's
export NO_MKDOCS_2_WARNING := 1
docs: install-dev ## the documentation site into site/ (mkdocs build --strict: offline, a warning fails)
	$(BIN)/mkdocs build --strict

docs-serve: install-dev ## serve the documentation site at http://127.0.0.1:8000, rebuilt on each edit
	$(BIN)/mkdocs serve

bench: install ## bdl vs bare PyTorch, same process: SGHMC vs SGD-momentum epoch; BBB vs SGD step; stacked chains; compile=true vs eager; a run's cost against its sizes; vs NumPyro and BlackJAX (extra peers)
	$(BIN)/python scripts/bench.py
	$(BIN)/python scripts/bench_bbb.py
	$(BIN)/python scripts/bench_hmc.py
	$(BIN)/python scripts/bench_distributed.py
	$(BIN)/python scripts/bench_chains.py
	$(BIN)/python scripts/bench_chains.py --dataset boston --sampler sghmc_uci
	$(BIN)/python scripts/bench_chains.py --dataset yacht --sampler hmc
	$(BIN)/python scripts/bench_ess.py
	$(BIN)/python scripts/bench_ess.py compile=true
	$(BIN)/python scripts/bench_compile.py
	$(BIN)/python scripts/bench_store.py
	$(BIN)/python scripts/bench_store.py --run 100
	$(BIN)/python scripts/bench_scaling.py
	$(BIN)/python scripts/bench_peers.py

bench-peers: install ## the guard on bdl's lead over BlackJAX (extra peers; a quiet machine, ~15 min): fails when a ratio crosses its line
	OMP_NUM_THREADS=1 $(BIN)/python scripts/bench_peers.py --guard --rounds 10

CHEN := multirun/chen2014_mnist
CHEN_SEEDS ?= 0,1,2,3,4
reproduce-chen-mnist: install-dev ## Chen et al. 2014 MNIST (Fig. 3): SGD, SGD+momentum, SGLD, SGHMC, SGHMC with Gamma hyperprior x 5 seeds
	$(BIN)/bdl-run -m experiment=chen2014_mnist sampler=sgd,sgd_momentum,sgld,sghmc seed=$(CHEN_SEEDS) \
		hydra/launcher=joblib hydra.sweep.dir=$(CHEN)/gaussian
	$(BIN)/bdl-run -m experiment=chen2014_mnist sampler=sghmc prior=gamma_hierarchical seed=$(CHEN_SEEDS) \
		hydra/launcher=joblib hydra.sweep.dir=$(CHEN)/gamma
	$(BIN)/bdl-report --paper chen2014 $(CHEN) --out $(CHEN)/table

UCI := multirun/uci
UCI_SETS := boston,concrete,energy,kin8nm,naval,power,wine,yacht
UCI_SPLITS ?= $(shell seq -s, 0 19)
PROTEIN_SPLITS ?= 0,1,2,3,4
# Protein's splits (a third of the table's run time) run one after the other beside the sweep of
# the other sets, which takes every core: run after it, protein's last split would leave cores idle.
# One thread per run: the runs already outnumber the cores.
reproduce-uci: install-dev ## SGHMC on the nine UCI sets' standard splits, beside PBP, MC dropout, deep ensembles
	mkdir -p $(UCI)
	export OMP_NUM_THREADS=1; \
	$(BIN)/bdl-run -m experiment=uci_sghmc dataset=protein dataset.split=$(PROTEIN_SPLITS) \
		hydra.sweep.dir=$(UCI)/sghmc_protein > $(UCI)/protein.log 2>&1 & protein=$$!; \
	$(BIN)/bdl-run -m experiment=uci_sghmc dataset=$(UCI_SETS) dataset.split=$(UCI_SPLITS) \
		hydra/launcher=joblib hydra.sweep.dir=$(UCI)/sghmc; sets=$$?; \
	wait $$protein || { echo "protein's sweep failed: see $(UCI)/protein.log"; exit 1; }; exit $$sets
	$(BIN)/bdl-report --paper uci $(UCI) --out $(UCI)/table

reproduce-uci-quick: ## the UCI table on splits 0-1 (protein 0): a check of the pipeline, not the table
	$(MAKE) reproduce-uci UCI=multirun/uci_quick UCI_SPLITS=0,1 PROTEIN_SPLITS=0

check: install ## bdl-check: every sampler against known posteriors (table, CSV, figures)
	$(BIN)/bdl-check --out outputs/check

IZMAILOV := multirun/izmailov_mnist
reproduce-izmailov-mnist: install-dev ## Izmailov et al.'s table shape on 5k MNIST: 3 HMC chains vs SG-MCMC, MFVI, Laplace
	OMP_NUM_THREADS=1 $(BIN)/bdl-run experiment=izmailov_mnist sampler=hmc chains=3 epochs=150 burn_in=30 \
		thin=1 batch_size=5000 hydra.run.dir=$(IZMAILOV)/hmc
	OMP_NUM_THREADS=1 $(BIN)/bdl-run -m experiment=izmailov_mnist sampler=sgld,sghmc,psgld \
		reference=$(abspath $(IZMAILOV))/hmc hydra.sweep.dir=$(IZMAILOV)/sg
	OMP_NUM_THREADS=1 $(BIN)/bdl-run experiment=izmailov_mnist sampler=sgd \
		reference=$(abspath $(IZMAILOV))/hmc hydra.run.dir=$(IZMAILOV)/sgd
	OMP_NUM_THREADS=1 $(BIN)/bdl-run experiment=izmailov_mnist sampler=mfvi schedule=cosine \
		epochs=300 burn_in=0 init_from=$(IZMAILOV)/sgd reference=$(abspath $(IZMAILOV))/hmc \
		hydra.run.dir=$(IZMAILOV)/mfvi
	OMP_NUM_THREADS=1 $(BIN)/bdl-run -m experiment=izmailov_mnist sampler=laplace epochs=1 burn_in=0 \
		sampler.subset_of_weights=all,last_layer init_from=$(IZMAILOV)/sgd \
		reference=$(abspath $(IZMAILOV))/hmc hydra.sweep.dir=$(IZMAILOV)/laplace
	OMP_NUM_THREADS=1 $(BIN)/bdl-run experiment=izmailov_mnist sampler=sghmc schedule=cyclical \
		schedule.cycles=12 schedule.samples_per_cycle=3 reference=$(abspath $(IZMAILOV))/hmc \
		hydra.run.dir=$(IZMAILOV)/csghmc
	$(BIN)/bdl-report $(IZMAILOV) --by sampler schedule sampler.subset_of_weights \
		--metrics test_accuracy test_nll agreement total_variation accept_rate num_samples rhat_max

BLUNDELL := multirun/blundell2015_mnist
reproduce-blundell-mnist: install ## Blundell et al. 2015: BBB (600 epochs) and SGHMC on 784-400-400-10, pruning tables
	$(BIN)/bdl-run sampler=bbb experiment=blundell2015_mnist schedule=cosine pruning=true \
		hydra.run.dir=$(BLUNDELL)/bbb400
	$(BIN)/bdl-report --pruning $(BLUNDELL)/bbb400
	$(BIN)/bdl-run sampler=sghmc experiment=blundell2015_mnist prior.pi=0.05 epochs=40 burn_in=20 \
		sampler.lr=0.002 pruning=true hydra.run.dir=$(BLUNDELL)/sghmc400
	$(BIN)/bdl-report --pruning $(BLUNDELL)/sghmc400

reproduce-blundell-mnist-1200: install ## the same BBB table on 784-1200-1200-10, Blundell et al.'s Table 1 (a GPU's work)
	$(BIN)/bdl-run sampler=bbb experiment=blundell2015_mnist protocol.mlp.hidden=[1200,1200] \
		schedule=cosine pruning=true hydra.run.dir=$(BLUNDELL)/bbb1200
	$(BIN)/bdl-report --pruning $(BLUNDELL)/bbb1200

# The GPU check (docs/development.md): the bundle is made here, with network; the check runs on a
# GPU machine (no network there), or dry on the CPU. GPU_PYTHON: the GPU image's python3, which
# holds PyTorch there (this checkout has no .venv there).
GPU_BUNDLE ?= .gpu-bundle
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
.PHONY: gpu-bundle gpu-check
gpu-bundle: install-dev ## the wheels and MNIST archives a GPU machine without network needs, into .gpu-bundle/ (git-ignored)
	$(BIN)/python scripts/gpu_check.py bundle --bundle $(GPU_BUNDLE)

gpu-check: ## on a GPU: install the bundle, pytest -m gpu, the benchmarks on CUDA, a real MNIST run, into $OUT/gpu_check.md (8 minutes); dry on the CPU
	$(GPU_PYTHON) scripts/gpu_check.py check --bundle $(GPU_BUNDLE)

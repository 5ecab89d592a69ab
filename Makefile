# harness: every target sets itself up. `make train` and `make test` are all a fresh machine needs.
#
# TORCH picks the PyTorch build installed before everything else. The default is a version whose
# CPU build installs fast where pip has one on disk; on a GPU machine, plain PyPI gives the CUDA
# build of the same version, or keep yours: `make install TORCH=torch` accepts any installed torch.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST := $(PY) -m pytest

.DEFAULT_GOAL := help
.PHONY: help install train overfit ladder doctor sweep vanishing test test-slow test-all bench lint format rename clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)"
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,all]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install (skipped when pyproject.toml is unchanged)

train: $(STAMP)  ## the default job: preflight, then overfit 2 synthetic examples -> PASS/FAIL
	$(PY) train.py

overfit: $(STAMP)  ## overfit N examples (make overfit N=5 ARGS="model=rnn")
	$(PY) train.py mode=overfit n=$(or $(N),2) $(ARGS)

ladder: $(STAMP)  ## the overfit ladder: n=1,2,5 in one sweep
	$(PY) train.py -m experiment=overfit_ladder $(ARGS)

doctor: $(STAMP)  ## the overfit ladder for a model and the substitute, then a diagnosis (make doctor ARGS="model=gpt")
	$(PY) train.py experiment=doctor $(ARGS)

sweep: $(STAMP)  ## a length sweep: data.length=10,50,200
	$(PY) train.py -m data.length=10,50,200 $(ARGS)

vanishing: $(STAMP)  ## the vanishing-gradients preset: 3 models x 3 lengths, summary + plots
	$(PY) train.py -m experiment=vanishing_gradients $(ARGS)

test: $(STAMP)  ## the test suite (under 3 minutes on 2 cores; tests marked slow are left to test-slow)
	$(PYTEST) -m "not slow" $(ARGS)

test-slow: $(STAMP)  ## only the tests marked slow (CI runs them after `make test`)
	$(PYTEST) -m slow $(ARGS)

test-all: $(STAMP)  ## every test
	$(PYTEST) $(ARGS)

bench: $(STAMP)  ## benchmarks -> outputs/bench/*.json and outputs/bench/README.md
	$(PY) -m benchmarks

lint: $(STAMP)  ## ruff check and format check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)  ## ruff fix and format
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

rename:  ## rename the package and every reference to it (make rename NAME=mylab), then run make install
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/rename.py $(NAME)

clean:  ## remove outputs/ and generated or prepared data (keeps .venv)
	rm -rf outputs data/synthetic data/text data/corpus

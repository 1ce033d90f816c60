# Two commands: `make demo` and `make test`. Each creates .venv if missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean

$(STAMP): pyproject.toml $(wildcard src/stepscope/importers/_kineto_*) src/stepscope/capture/cupti/_shim.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/stepscope demo

test: $(STAMP)
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/python -m ruff check src tests

bench: $(STAMP)
	$(BIN)/python benchmarks/import_vs_hta.py --help

clean:
	rm -rf $(VENV) build dist src/*.egg-info stepscope-demo src/stepscope/capture/cupti/*.so src/stepscope/importers/*.so

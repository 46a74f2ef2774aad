# llmsim: `make demo` runs the quickstart scenario, `make test` runs lint + tests.
# Both create .venv and install everything they need on a fresh machine with only Python.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow test-props-long lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/llmsim run scenarios/quickstart.yaml

lint: $(STAMP)
	$(BIN)/ruff check llmsim tests benchmarks
	$(BIN)/ruff format --check llmsim tests benchmarks

test: lint
	$(BIN)/python -m pytest -q -n 2

test-props-long: $(STAMP)
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest tests/test_properties.py -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

format: $(STAMP)
	$(BIN)/ruff format llmsim tests benchmarks
	$(BIN)/ruff check --fix llmsim tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache

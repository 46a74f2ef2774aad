# llmsim: `make demo` runs the quickstart scenario, `make test` runs lint + tests.
# Both create .venv and install everything they need on a fresh machine with only Python.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow test-props-long lint format bench profile clean

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

# where a benchmark case spends its time: a py-spy flame graph (CASE=a, b-chunked, c100k, ...)
CASE ?= a
profile: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[profile]"
	mkdir -p results
	$(BIN)/py-spy record --subprocesses --rate 500 -o results/profile-$(CASE).svg -- $(BIN)/python benchmarks/bench_sim.py $(CASE)

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache

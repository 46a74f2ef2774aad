# llmsim: `make demo` runs the quickstart scenario, `make test` runs lint + tests.
# Both create .venv and install everything they need on a fresh machine with only Python.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The simulator's hot modules, compiled with mypyc by the install (setup.py lists them through
# llmsim/native.py); when one of them changes they are compiled again before a demo or a test.
NATIVE_SRC := $(shell sed -n 's/^    "\(llmsim[.a-z_]*\)",$$/\1/p' llmsim/native.py | tr . / | sed 's/$$/.py/')
NATIVE     := $(VENV)/.compiled

.PHONY: demo test test-slow test-props-long lint format bench profile build clean

# The dependencies and the editable package, not compiled (LLMSIM_PURE_PYTHON=1 makes setup.py list
# no extensions): $(NATIVE) compiles it, once. (Compiling here too compiled twice on a fresh
# clone: make had read $(NATIVE)'s time before this recipe touched it, so it remade it anyway.)
$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	LLMSIM_PURE_PYTHON=1 $(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(NATIVE): $(STAMP) $(NATIVE_SRC)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(NATIVE)

build: $(NATIVE)

demo: $(NATIVE)
	$(BIN)/llmsim run scenarios/quickstart.yaml

lint: $(STAMP)
	$(BIN)/ruff check llmsim tests benchmarks
	$(BIN)/ruff format --check llmsim tests benchmarks

test: lint $(NATIVE)
	$(BIN)/python -m pytest -q -n 2

test-props-long: $(NATIVE)
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest tests/test_properties.py tests/test_fuzz_inputs.py -q

test-slow: $(NATIVE)
	$(BIN)/python -m pytest -q -m slow

format: $(STAMP)
	$(BIN)/ruff format llmsim tests benchmarks
	$(BIN)/ruff check --fix llmsim tests benchmarks

bench: $(NATIVE)
	$(BIN)/python benchmarks/bench_sim.py

# where a benchmark case spends its time: a py-spy flame graph (CASE=a, b-chunked, c100k, ...) of
# the pure-Python modules (py-spy cannot see inside compiled ones: for those, `perf record
# --call-graph dwarf`, as in docs/performance.md)
CASE ?= a
profile: $(NATIVE)
	$(BIN)/python -m pip install --quiet -e ".[profile]"
	mkdir -p results
	LLMSIM_PURE_PYTHON=1 $(BIN)/py-spy record --subprocesses --rate 500 -o results/profile-$(CASE).svg -- $(BIN)/python benchmarks/bench_sim.py $(CASE)

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache build
	find llmsim -name '*.so' -delete; rm -f llmsim__mypyc*.so

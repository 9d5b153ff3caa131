# Two commands for a fresh machine: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXT := $(VENV)/.extension

.PHONY: demo test wheel-check bench setup clean

setup: $(STAMP) $(EXT)

# torch==2.13.0 goes in before the package so that the engine extra's torch range is already met
# by the CPU build and pip never resolves an unpinned torch (several GB of CUDA packages).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[engine,dev,llamacpp]'
	# the browser tests drive Debian's Chromium (a test tool's own browser download cannot work here)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)
	touch $(STAMP) $(EXT)

# The C decoder of the ingest fast path (setup.py) is compiled by the install above; this recompiles it when
# its source changes in a checkout that is already set up.
$(EXT): budgetscope/ingest/_otlpjson.c budgetscope/ingest/_otlpproto.c setup.py | $(STAMP)
	$(PY) -m pip install -q --no-deps -e .
	touch $(EXT)

demo: $(STAMP) $(EXT)
	$(VENV)/bin/budgetscope demo

# The suite includes tests/test_wheel_install.py: the wheel built from this tree, installed non-editable into a
# fresh venv (core and the dashboard extra, never torch), every command run from another directory. About a minute
# and a half on 2 cores; `make wheel-check` runs it alone.
test: $(STAMP) $(EXT)
	$(PY) -m pytest -q

wheel-check: $(STAMP) $(EXT)
	$(PY) -m pytest -q tests/test_wheel_install.py

bench: $(STAMP) $(EXT)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info budgetscope/ingest/*.so

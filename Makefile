# Two commands for a fresh machine: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXT := $(VENV)/.extension

.PHONY: demo test wheel-check bench fuzz faults setup clean

PROMTOOL := /usr/bin/promtool

setup: $(STAMP) $(EXT) $(PROMTOOL)

# The alerting tests run Debian's Prometheus and promtool (docs/alerting.md): `prometheus` and `promtool` come with
# the package. The tests start their own server on a free port and never use the package's service. A target of
# its own, so that a checkout set up before it gets it at its next `make test`.
$(PROMTOOL):
	apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null

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
# fresh venv (core and the dashboard extra, never torch), every command run from another directory, once on the
# oldest declared Python (3.10) and once on the newest (3.13), each found on PATH or under pyenv; a missing one is
# one SKIPPED line. Both: 2.5 minutes on 2 shared cores, pip's cache warm (was 1.5 for one); `make wheel-check` alone.
# Two pytest-xdist workers, each test file in one of them (its module and session fixtures stay whole): many tests
# wait on servers, engines and subprocesses, so two workers on 2 cores took the suite from 1,159 s to 695 s
# (2026-11-29, load 1-4.5; docs/design.md, "Tests").
# The package's bytecode is written first (what has not changed since is kept): where PYTHONDONTWRITEBYTECODE is
# set, every process the tests start (CLIs, collectors, engines) would otherwise compile what it imports again,
# ~0.25 s each for `ingest` (docs/design.md, "Tests").
test: $(STAMP) $(EXT) $(PROMTOOL)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m compileall -q budgetscope
	$(PY) -m pytest -q -n 2 --dist loadfile

wheel-check: $(STAMP) $(EXT)
	$(PY) -m pytest -q tests/test_wheel_install.py

bench: $(STAMP) $(EXT)
	$(PY) benchmarks/run_all.py

# Long fuzz runs (docs/fuzzing.md): every target for FUZZ_SECONDS each, or FUZZ_TARGETS="otlpjson query".
# `make test` runs each for a few seconds. A finding stops its target and leaves the input in build/fuzz/crashes/.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= $(shell $(PY) fuzz/run.py --list 2>/dev/null)
fuzz: $(STAMP) $(EXT)
	@mkdir -p build/fuzz; for t in $(FUZZ_TARGETS); do echo "== $$t ($(FUZZ_SECONDS) s, log build/fuzz/$$t.log)"; \
	  $(PY) fuzz/run.py $$t --seconds $(FUZZ_SECONDS) > build/fuzz/$$t.log 2>&1; rc=$$?; \
	  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)|SUMMARY|Test unit' build/fuzz/$$t.log; \
	  [ $$rc = 0 ] || exit $$rc; done

# The slow fault and abuse scripts (docs/reliability.md): each prints its figures and exits 1 if a promise broke.
# The fast faults run in `make test` (tests/test_fault*.py, test_collector_abuse.py, test_archive_live.py).
# fault_overload.py caps the collector's CPU with a cgroup v1 quota (root; `--collector-cpu 0` for none) so that 2 cores can offer it 5x.
FAULTS ?= fault_kill9_collect fault_collector_abuse fault_overload fault_engine_overload
faults: $(STAMP) $(EXT)
	BUDGETSCOPE_FAULTS_STRICT=1 $(PY) -m pytest -q tests/test_fault_disk_full.py
	@for f in $(FAULTS); do echo "== $$f"; $(PY) benchmarks/$$f.py || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info budgetscope/ingest/*.so

# The two commands: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-all bench conformance lint clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cutover needs Python 3.11+; set PYTHON=python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing cutover and its dependencies into $(VENV) ..."
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cutover demo

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest

test-all: $(STAMP)
	$(PY) -m pytest -m 'not bench and not conformance_full'

bench: $(STAMP)
	$(PY) -m pytest -m bench -s tests/bench tests/spark/test_bench_kafka.py

conformance: $(STAMP)
	$(PY) -m pytest -m conformance_full -s tests/conformance

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

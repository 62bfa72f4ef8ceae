# The two commands of the README:
#   make run   - set up .venv and run the bundled sample deployment (`dvpipe run`)
#   make test  - set up .venv and run the whole test suite
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.dvpipe-installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml setup.py dvpipe/backends/_native.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dvpipe run

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) tools/bench/peers.py --quick

clean:
	rm -rf $(VENV) out .pytest_cache

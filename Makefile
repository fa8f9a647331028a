# `make test` works on a fresh clone of a fresh machine: it builds .venv when missing.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test lint bench-advantages clean

# torch goes in first and pinned: the CPU wheel lies on local disk, while an
# unpinned requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check slca tests benchmarks
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check slca tests benchmarks

bench-advantages: $(STAMP)
	$(PY) benchmarks/advantages.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

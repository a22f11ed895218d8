# Two commands do everything on a fresh machine with Python 3.11:
#   make quickstart   # set-up, then the main job (conf/quickstart.yaml)
#   make test         # set-up, then the whole test suite
# Set-up: a virtual environment in .venv, torch pinned to its CPU build by constraints.txt.
# Where no local CPU wheel of torch 2.13.0 exists, add its index:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
TORCH_INDEX ?=
PIP := $(VENV)/bin/python -m pip install -q -c constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

.PHONY: setup quickstart test test-fast lint bench docs

setup: $(STAMP)

$(STAMP):
	$(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q -U pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test,bench]'
	rm -f $(VENV)/.installed-* && touch $@

quickstart: $(STAMP)
	$(VENV)/bin/crl run conf/quickstart.yaml

# The suite runs on every CPU (at most 4 workers: each holds a Prefect server of its own), a
# module at a time per worker (loadscope), so a module's shared run is computed once.
XDIST := -n auto --maxprocesses 4 --dist loadscope

test: $(STAMP)
	@$(VENV)/bin/python -m pytest -q -p no:cacheprovider $(XDIST); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: the suite is missing" >&2; exit 1; fi; exit $$rc

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(XDIST) -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check crl flows tests bench
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(VENV)/bin/crl bench kernels

# docs/tables.md's column reference, from crl/steps/columns.json (a test fails when stale)
docs: $(STAMP)
	$(VENV)/bin/crl docs tables

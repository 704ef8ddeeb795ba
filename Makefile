# Two commands on a fresh machine:
#   make lab    installs everything into .venv and starts the main job
#   make test   installs everything (test tools included) and runs every test
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.diffract-installed

.PHONY: install system-deps lab analyze test test-python lint docs clean

# Debian packages the tests need: redis-server (the Redis cache tests start their own).
# Installed with apt-get when missing (as root, or through sudo).
system-deps:
	@if ! command -v redis-server >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q redis-server; \
	fi

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch is pinned to the CPU wheel on local disk (torch==2.13.0): see pyproject.toml
$(STAMP): pyproject.toml package.json | $(VENV)/bin/python
	$(PIP) install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

## the main job: analyze the bundled demo model (all-MiniLM-L6-v2) into ./.diffract
lab: analyze

analyze: install
	$(VENV)/bin/diffract analyze

test: install system-deps test-python

test-python:
	KERAS_BACKEND=jax JAX_PLATFORMS=cpu $(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check python tests benchmarks
	$(VENV)/bin/ruff format --check python tests benchmarks

clean:
	rm -rf $(VENV) .diffract build dist

# Two commands on a fresh machine:
#   make lab    installs everything into .venv, analyzes the demo model into notebooks/.diffract
#               and starts JupyterLab on notebooks/ (sidebar "Weight runs", widgets, magics)
#   make test   installs everything (test tools included) and runs every test
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.diffract-installed

.PHONY: install system-deps lab analyze test test-python test-js test-ui chromium js lint docs mutation clean diffract-venv test-diffract

LAB_PORT ?= 8888
ROOT_FLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
JS_SOURCES := $(shell find js style -type f 2>/dev/null) package.json tsconfig.json

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

# this project's own installs pin torch to the CPU wheel on local disk (constraints.txt);
# the package's metadata keeps open ranges (pyproject.toml) so users' pip can resolve it
$(STAMP): pyproject.toml constraints.txt package.json | $(VENV)/bin/python
	@# a development build writes labextension/install.json, which the wheel's shared-data
	@# also maps from ./install.json: a second editable install would add it twice
	rm -f python/diffract/labextension/install.json
	$(PIP) install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

# The front end: node_modules from package-lock.json, the widget bundles and the prebuilt lab
# extension (pip install -e runs this too, but skips it when a build exists), linked into the
# venv like `jupyter labextension develop` would, so `make js` + a page reload shows changes.
JS_STAMP := node_modules/.diffract-built
$(JS_STAMP): $(JS_SOURCES) package-lock.json | $(STAMP)
	@# node_modules follows the lock file (a dependency added by a pull is installed)
	@[ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
	PATH="$(abspath $(VENV))/bin:$$PATH" npm run build
	rm -rf $(VENV)/share/jupyter/labextensions/diffract-lab
	ln -s $(abspath python/diffract/labextension) $(VENV)/share/jupyter/labextensions/diffract-lab
	touch $(JS_STAMP)

js: $(JS_STAMP)

install: $(STAMP) $(JS_STAMP)

## the main job: JupyterLab on notebooks/ with the extension enabled, the demo model analyzed
lab: install
	$(VENV)/bin/diffract analyze --store notebooks/.diffract --quiet
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/jupyter lab --notebook-dir=notebooks --no-browser --port=$(LAB_PORT) $(ROOT_FLAG)

## analyze the bundled demo model (all-MiniLM-L6-v2) into ./.diffract
analyze: install
	$(VENV)/bin/diffract analyze

# pytest runs last so that its summary line closes the output; test-diffract runs the same
# snippets through the published Diffract 0.3.1 (a Python 3.12 venv) and through ours
test: install system-deps lint test-js test-ui test-diffract test-python

# random test order (pytest-randomly), line coverage of python/diffract, and a run with any
# skipped test fails (tests/conftest.py: only the skips listed there, with their reasons)
test-python:
	KERAS_BACKEND=jax JAX_PLATFORMS=cpu $(PY) -m pytest -q -p randomly --cov=diffract --cov-report=term:skip-covered --cov-report=xml:coverage.xml --ignore=tests/diffract_differential

## the published Diffract (diffract-core 0.3.1, Python >= 3.12) in its own venv, and the
## differential suite that runs the same snippets through it and through ours (not part of
## `make test`: building the venv takes minutes; docs/migrating-from-diffract.md, at the end)
DIFFRACT_VENV ?= .venv-diffract
PY312 ?= $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.12*/bin/python $(HOME)/.pyenv/versions/3.12*/bin/python) $(shell command -v python3.12))
$(DIFFRACT_VENV)/.installed:
	@[ -n "$(PY312)" ] || { echo "diffract-venv: no Python 3.12 (pyenv install 3.12, or PY312=/path/to/python3.12)"; exit 1; }
	$(PY312) -m venv $(DIFFRACT_VENV)
	$(DIFFRACT_VENV)/bin/pip install -q "diffract-core[pandas,polars,flax]==0.3.1"
	touch $@

diffract-venv: $(DIFFRACT_VENV)/.installed

test-diffract: $(STAMP) diffract-venv
	KERAS_BACKEND=jax JAX_PLATFORMS=cpu DIFFRACT_PYTHON=$(abspath $(DIFFRACT_VENV))/bin/python $(PY) -m pytest -q -p no:randomly tests/diffract_differential

## the widget modules against a mock model (node:test + jsdom)
test-js: install
	npm run test:js

# Debian's Chromium for the browser tests (never a Playwright browser download)
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; \
	fi

## Galata browser tests in ui-tests/ (Playwright starts and stops JupyterLab itself)
test-ui: install chromium
	cd ui-tests && { [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }
	cd ui-tests && PATH="$(abspath $(VENV))/bin:$$PATH" npx playwright test

## the docs site, built offline into site/ (screenshots from ui-tests/screenshots are copied
## into docs/img first: run after make test-ui to refresh them)
docs: install
	DIFFRACT_DOCS_SCREENSHOTS=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# ruff; the layering contracts (import-linter, pyproject [tool.importlinter]); mypy over
# python/ against its committed baseline (scripts/mypy_gate.py: new errors fail, the baseline
# may only shrink)
lint: $(STAMP)
	$(VENV)/bin/ruff check python tests benchmarks scripts
	$(VENV)/bin/ruff format --check python tests benchmarks scripts
	cd python && ../$(VENV)/bin/lint-imports --config ../pyproject.toml
	$(PY) scripts/mypy_gate.py

## hand-made mutants of the kernels and the store's segment log, each run against the tests
## that should kill it on a temporary copy of the package (scripts/mutation_check.py); fails
## when fewer than 90% are killed
mutation: $(STAMP)
	$(PY) scripts/mutation_check.py

clean:
	rm -rf $(VENV) .diffract build dist node_modules lib tsconfig.tsbuildinfo python/diffract/labextension python/diffract/static ui-tests/node_modules ui-tests/test-results

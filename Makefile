# thunderviz: one entry point.  `make demo` and `make test` set up everything they need.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch 2.13's CPU wheel: installed before the project so pip never pulls a CUDA build.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.thunderviz-installed
VIEWER := thunderviz/widgets/static/viewer.js
LABEXT := thunderviz/labextension/package.json
# `make extension` links the build into the venv (what `jupyter labextension develop` does),
# so `jupyter lab` from the venv serves the current build. The browser tests do not need the
# link: their server reads the build folder through LabApp.extra_labextensions_path.
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/thunderviz
# Keep npm / yarn / Jupyter caches inside the checkout, not in $HOME.
export npm_config_cache := $(CURDIR)/.cache/npm
export YARN_GLOBAL_FOLDER := $(CURDIR)/.cache/yarn
export XDG_CACHE_HOME := $(CURDIR)/.cache/xdg

.PHONY: all setup system-deps frontend extension demo test test-fast test-cuda bench lint clean

all: setup

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test]"
	touch $(STAMP)

# Graphviz `dot` (static pictures) and Chromium (browser tests) come from Debian.
system-deps:
	@if ! command -v dot >/dev/null || ! command -v chromium >/dev/null; then \
	  echo "installing graphviz and chromium from Debian"; \
	  apt-get update -qq && apt-get install -y -qq graphviz chromium chromium-driver >/dev/null; \
	fi

$(VIEWER): $(wildcard frontend/src/*) frontend/package.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build

frontend: $(VIEWER)

$(LABEXT): $(VIEWER) $(wildcard extension/src/* extension/style/*) extension/package.json extension/yarn.lock extension/tsconfig.json extension/rspack.config.js $(STAMP)
	cd extension && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" jlpm install && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" jlpm build
	rm -rf $(LABEXT_LINK) && mkdir -p $(dir $(LABEXT_LINK)) && ln -s $(CURDIR)/thunderviz/labextension $(LABEXT_LINK)

extension: $(LABEXT)

setup: system-deps $(STAMP) frontend extension

demo: setup
	$(PY) examples/demo.py

test: setup lint
	cd frontend && npm test
	$(PY) -m pytest -q -ra

test-fast: setup
	$(PY) -m pytest -q -ra -m "not browser and not slow"

# On a machine with a GPU: the CUDA variants of the tests (a "cuda" case of a test
# parametrized by tests.helpers.DEVICES, or a test named for CUDA; they skip where
# torch.cuda.is_available() is false), then the OpInfo census on CUDA.
test-cuda: $(STAMP)
	$(PY) -m pytest -q -ra -k cuda tests/capture tests/autodiff tests/distributed \
		tests/executor tests/safety tests/debug
	$(PY) -m benchmarks.opinfo_census --device cuda

bench: setup
	$(PY) benchmarks/trace_speed.py
	$(PY) benchmarks/autodiff_speed.py
	$(PY) benchmarks/step_speed.py
	$(PY) benchmarks/saved_memory.py
	$(PY) benchmarks/view_speed.py

FRONTEND_DEPS := frontend/node_modules/.package-lock.json
$(FRONTEND_DEPS): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error

# The virtualenv and the frontend's npm packages; neither Chromium nor graphviz. Pyright's
# node is a wheel in the venv; IGNORE_WARNINGS stops it asking PyPI for a newer version.
# The frontend: eslint, then tsc's checkJs (frontend/jsconfig.json).
lint: $(STAMP) $(FRONTEND_DEPS)
	$(PY) -m ruff check thunderviz tests benchmarks examples
	$(PY) -m ruff format --check thunderviz tests benchmarks examples
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(VENV)/bin/pyright --pythonpath $(PY)
	cd frontend && npm run --silent lint

clean:
	rm -rf $(VENV) .cache frontend/node_modules extension/node_modules extension/.yarn extension/lib thunderviz/labextension $(VIEWER)

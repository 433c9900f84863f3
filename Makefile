# The two commands a newcomer needs:  `make demo`  and  `make test`.
# Each one does its own set-up (virtualenv, packages, bubblewrap) and is safe to re-run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml tests/fixtures/*/pyproject.toml tests/requirements-verl.txt | sha1sum | cut -c1-12)

.PHONY: demo test lint typecheck docs pytest setup system-deps engine clean

# `make demo DEMO_ARGS=--keep-serving` keeps the demo's servers up for its viewer until Ctrl-C.
demo: $(STAMP) system-deps
	$(BIN)/agentroll demo $(DEMO_ARGS)

test: $(STAMP) system-deps lint typecheck docs engine pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy -p agentroll.server -p agentroll.handlers -p agentroll.runtime -p agentroll.trainer_clients -p agentroll.testing

# The docs site into site/ (offline: open site/index.html). --strict: a warning (a broken link
# or anchor, a page left out of the nav, a docstring the reference cannot render) fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

pytest: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

setup: $(STAMP) system-deps

$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev,verl-check,docs]" -e tests/fixtures/external_handler_pkg
	@# verl's wheel also ships top-level `tests` and `scripts` packages: in site-packages its
	@# `tests` would shadow this repository's tests/. So it goes to a folder of its own, and
	@# only its `verl` package is linked into site-packages.
	$(BIN)/pip install -q --no-deps --upgrade --target $(VENV)/verl-nodeps -r tests/requirements-verl.txt
	ln -sfn "$(abspath $(VENV))/verl-nodeps/verl" "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/verl"
	rm -f $(VENV)/.installed-*; touch $@

# vLLM's CPU build and the tiny model the tests/engine lane serves (cached under
# $AGENTROLL_ENGINE_CACHE, default /var/tmp/agentroll-engine; a no-op once there).
engine: $(STAMP)
	$(BIN)/agentroll engine setup

# Debian packages the sandboxes need; installed only when missing.
system-deps:
	@scripts/install-system-deps.sh

clean:
	rm -rf $(VENV)

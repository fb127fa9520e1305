# approvals: every target installs what it needs first, so a fresh clone works with one command.
SHELL := bash
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.9
UV := $(or $(shell command -v uv 2>/dev/null),$(CURDIR)/.tools/bin/uv)
VENV := $(CURDIR)/.venv
RUN := $(UV) run --locked --no-sync

export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

HOST ?= 127.0.0.1
PORT ?= 8000
CHROMIUM ?= /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: help install browser lint fmt test bench run clean

help: ## Show this help.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'

$(CURDIR)/.tools/bin/uv:
	$(PYTHON) -m venv $(CURDIR)/.tools
	$(CURDIR)/.tools/bin/pip install --quiet "uv==$(UV_VERSION)"

$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --all-extras --python $(PYTHON)
	@touch $@

install: $(VENV)/.installed ## Create .venv and install the locked dependencies.

browser: ## Install Debian's headless Chromium for the browser tests (apt-get, when missing).
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends chromium; }

lint: install ## Run ruff and mypy (strict on approvals/).
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy

fmt: install ## Format and auto-fix with ruff.
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

test: install browser lint ## Lint, then run the whole test suite (SQLite and PostgreSQL, headless Chromium).
	$(RUN) pytest

bench: install ## Run the benchmarks in bench/ and print their numbers.
	@for f in bench/bench_*.py; do echo "== $$f"; $(RUN) python $$f || exit 1; done

run: install ## Start the app with the demo agent on SQLite (http://127.0.0.1:8000; HOST=, PORT= to change).
	$(RUN) approvals serve --demo --host $(HOST) --port $(PORT)

clean: ## Remove the virtual environment and caches.
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache approvals.db approvals.db-*

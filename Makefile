# PhantomHub: every routine task is a target. `make run` and `make test` work on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q
PHANTOMHUB_PORT ?= 8000
export PHANTOMHUB_PORT

.PHONY: help venv venv-dev run serve migrate demo test test-pg test-sqlite lint fmt typecheck check bench clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(VENV)/.server: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.server pyproject.toml agent/pyproject.toml
	$(PIP) -e '.[dev]' -e './agent[torch,system]'
	touch $@

venv: $(VENV)/.server ## create .venv with the server's dependencies

venv-dev: $(VENV)/.dev ## create .venv with server, agent, test and lint tools

var/secret.key:
	mkdir -p var
	$(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(48))' > $@
	chmod 600 $@

migrate: venv var/secret.key ## apply database migrations
	$(PY) manage.py migrate --no-input

demo: migrate ## seed the demo organization (idempotent)
	$(PY) manage.py seeddemo

run: demo ## set up and serve PhantomHub on 127.0.0.1:$PHANTOMHUB_PORT (SQLite, no broker)
	$(PY) manage.py collectstatic --no-input -v 0
	@echo "PhantomHub on http://127.0.0.1:$(PHANTOMHUB_PORT)/  (API docs: /api/docs/)"
	PHANTOMHUB_SECURE_COOKIES=0 $(VENV)/bin/gunicorn phantomhub.wsgi --config deploy/gunicorn_embedded.py --bind 127.0.0.1:$(PHANTOMHUB_PORT) --workers 2 --access-logfile -

test: venv-dev ## run the whole suite: everything on PostgreSQL, storage tests again on SQLite
	$(PY) -m pytest
	PHANTOMHUB_TEST_BACKEND=sqlite $(PY) -m pytest -m backends -q

lint: venv-dev ## ruff check + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: venv-dev ## format the code
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: venv-dev ## mypy on the server, strict mypy on the agent
	$(VENV)/bin/mypy phantomhub
	$(VENV)/bin/mypy --strict agent/phantomhub_agent

check: lint typecheck test ## everything CI runs

bench: venv-dev ## run the benchmarks (prints figures, writes bench/results/*.json)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .mypy_cache .ruff_cache

# Developer tasks; CONTRIBUTING.md explains each. CI runs `.ci/run`, which runs `tox`.
PYTHON ?= python3

.PHONY: install test test-fast test-pgbouncer lint demo bench

install:  ## the package with its test, tasks, browser and lint extras, editable
	$(PYTHON) -m pip install -e ".[test,tasks,browser,lint]" import-linter

test:  ## the whole matrix, exactly as CI runs it
	tox

test-fast:  ## the suite once, on this interpreter and Django
	$(PYTHON) -m pytest -n 4

test-pgbouncer:  ## the store, engine, process and pooler tiers through a real PgBouncer in transaction mode
	tox -e pgbouncer

lint:  ## the layering contracts, mypy --strict, system checks and migration drift
	lint-imports
	$(PYTHON) -m mypy
	$(PYTHON) -m django check --settings tests.settings
	$(PYTHON) -m django makemigrations --check --dry-run --settings tests.settings

demo:  ## the example project's workflows end to end
	$(PYTHON) example_project/demo.py

bench:  ## every benchmark, as a table of ratios
	$(PYTHON) bench/run_all.py

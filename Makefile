# Developer tasks; CONTRIBUTING.md explains each. CI runs `.ci/run`, which runs the README's test command.
PYTHON ?= python3

.PHONY: install test test-fast test-pgbouncer lint docs demo bench

install:  ## the package with its tasks extra, editable, and the test, browser and lint dependency groups (pip 25.1+)
	$(PYTHON) -m pip install --upgrade "pip>=25.1"
	$(PYTHON) -m pip install -e ".[tasks]" --group test --group browser --group lint

test:  ## the whole matrix, exactly as CI runs it (two environments at a time)
	tox run-parallel --parallel 2

test-fast:  ## the suite once, on this interpreter and Django
	$(PYTHON) -m pytest -n 4

test-pgbouncer:  ## the store, engine, process and pooler tiers through a real PgBouncer in transaction mode
	tox -e pgbouncer

lint:  ## the layering contracts, dead code (vulture), mypy --strict, system checks and migration drift
	lint-imports
	vulture
	$(PYTHON) -m mypy
	$(PYTHON) -m django check --settings tests.settings
	$(PYTHON) -m django makemigrations --check --dry-run --settings tests.settings

docs:  ## the documentation site, warnings as errors (open docs/_build/index.html)
	$(PYTHON) -m sphinx -W --keep-going -b html docs docs/_build

demo:  ## the example project's workflows end to end
	$(PYTHON) example_project/demo.py

bench:  ## every benchmark, as a table of ratios, written to docs/benchmarks/latest.md too
	$(PYTHON) bench/run_all.py

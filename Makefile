# The developer loop. `make test` is exactly what CI runs (.ci/run); the others are its faster parts.
.PHONY: setup lint format test-fast test

PYTHON ?= python3

setup:  ## the core, every extra, the test tools, llama-cpp-python's server and chromium (once)
	./scripts/setup.sh --dev

lint:  ## the style and type gate of CI: ruff check, ruff format --check, mypy, mypy as on a core install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
	$(PYTHON) scripts/mypy_core.py

format:  ## rewrite the sources in the project's style
	$(PYTHON) -m ruff check --fix .
	$(PYTHON) -m ruff format .

# -n auto: one pytest-xdist worker per CPU; --dist loadgroup keeps each `xdist_group` (tests/conftest.py: Ray, the
# langgraph dev server, a module's shared fixtures) on one worker.
PYTEST_PARALLEL ?= -n auto --dist loadgroup

# Bytecode caches (__pycache__/, ignored by git) are written even where the environment turns them off
# (PYTHONDONTWRITEBYTECODE=1, as in many containers): else every pytest worker, and every process a test starts,
# compiles the project and rewrites the tests' asserts again on each run, about 10 s a worker on 2 cores.
test-fast test: export PYTHONDONTWRITEBYTECODE :=

test-fast:  ## every test but the slow ones (servers, model pipelines, benches)
	$(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

test:  ## exactly CI: setup, the gate, the whole suite
	bash .ci/run

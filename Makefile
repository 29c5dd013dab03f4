# One entry point for people and CI. `make demo` and `make test` both set up what they need first
# (idempotent: a machine that has everything skips straight through).
PYTHON ?= python3

.PHONY: setup demo demo-node test lint unit bench

setup:
	bash .ci/install-system
	$(PYTHON) -m pip install -q -e '.[dev]'

demo: setup
	$(PYTHON) -m demo_cluster

demo-node: setup
	$(PYTHON) -m demo

lint:
	$(PYTHON) -m protos.generate --check
	ruff check .
	mypy

test: setup lint
	$(PYTHON) -m pytest -q -p no:cacheprovider

bench: setup
	$(PYTHON) -m benchmarks.run

# One entry point for people and CI (Debian 12, as root). `make demo`, `make test`, `make lint` and
# `make bench` set up what they need first; set-up is idempotent, so a ready checkout skips
# straight through. Everything Python runs from the project's virtual environment .venv, made from
# Debian's own python3; nothing is pip-installed outside it. `make clean-setup` removes what
# set-up made in this checkout.
SYSTEM_PYTHON ?= /usr/bin/python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup system demo demo-node lint lint-only check test bench clean-setup fresh-debian

setup: $(VENV)/.installed

# System packages of the machine's own suites, and Go, libcni and the reference plugins unpacked
# under .cache/ (never installed); see .ci/install-system.
system:
	bash .ci/install-system

# Made again when pyproject.toml changes (new dependencies); the system step always runs first.
# A venv left without pip (made while python3-venv was missing) is made again (--clear).
$(VENV)/.installed: pyproject.toml | system
	test -x $(VENV)/bin/pip || $(SYSTEM_PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

demo: setup
	$(PY) -m demo_cluster

demo-node: setup
	$(PY) -m demo

lint: setup
	$(MAKE) --no-print-directory lint-only

test: setup
	$(MAKE) --no-print-directory check

bench: setup
	$(PY) -m benchmarks run --all

# What `make test` runs once set up: the generated-code check, ruff, mypy, the import contracts
# (lint-imports: the agent's wings, docs/architecture.md), then the whole suite.
check: lint-only
	$(PY) -m pytest -q -p no:cacheprovider

lint-only:
	$(PY) -m protos.generate --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# Removes everything set-up (and the tests' driver build) made in this checkout. The system
# packages stay; the README names them for `apt-get remove`.
clean-setup:
	rm -rf $(VENV) .cache testbed/libcni/bin *.egg-info

# The proof that set-up and the suite work on a fresh Debian 12: `make setup && make test` in a
# new debootstrap'ed bookworm root (slow: builds the root once; see .ci/fresh-debian).
fresh-debian:
	bash .ci/fresh-debian

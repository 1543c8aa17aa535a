# The commands README.rst promises, for a fresh Debian 12 machine (as root).
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# make check's pytest workers (pytest-xdist): one per core
WORKERS ?= auto
# make test's workers: the cluster's tests take one (they run one after another, see
# XDIST_GROUPS in tests/conftest.py) and mostly wait on Slurm; two more run the rest
TEST_WORKERS ?= 3
CC ?= cc
# The Slurm of the local cluster, the plugins and the tests: empty for Debian's 22.05, 24.11 for
# the one scripts/bootstrap builds (its commands then come first on PATH for every target, so
# `make test SLURM=24.11` runs the tests with 24.11's sbatch, squeue, sinfo...).
SLURM ?=
SLURM_2411_PREFIX := /opt/scratchkeeper/slurm-24.11.5
ifeq ($(SLURM),24.11)
export PATH := $(SLURM_2411_PREFIX)/bin:$(SLURM_2411_PREFIX)/sbin:$(PATH)
else ifneq ($(SLURM),)
$(error SLURM=$(SLURM): expected 24.11, or nothing for Debian's 22.05)
endif

# What the static checks read: every Python file (the scripts without a .py suffix named), every
# shell script (a sh/bash first line), the Lua of the Slurm plugins.
PY_SOURCES := scratchkeeper tests testkit benchmarks scripts/localcluster scripts/local-cluster \
	scripts/pjdfstest scripts/layout-darshan-table
SHELL_SOURCES = $(shell grep -lsE '^\#!(/usr)?/bin/(env )?(ba)?sh\b' scripts/* .ci/run site-config/*/*.sh \
	slurm-plugins/scratchkeeper-healthcheck)
LUA_SOURCES := $(wildcard slurm-plugins/*.lua)
# The fast layer: no cluster, no mount, no root (tests/conftest.py marks tests by their fixtures),
# nothing marked slow (stress and long property runs).
FAST_TESTS := -m "not cluster and not mount and not root and not slow"

.PHONY: deps plugins cluster cluster-down demo test test-2411 test-unit check lint types check-c \
	bench conformance reproduce clean

deps:
	scripts/bootstrap

## The Slurm plugins (SPANK plugin, job_submit.lua) built and installed for the local cluster;
## before `local-cluster up`, which enables job_submit/lua and restarts slurmd when they change.
plugins: $(if $(AFTER_DEPS),check-c,deps)
	$(MAKE) -C slurm-plugins install LOCAL=1 $(if $(SLURM),SLURM=$(SLURM))

## `make cluster SLURM=24.11`: the cluster on scripts/bootstrap's Slurm 24.11 (a cluster running
## the other release must be taken down first: make cluster-down)
cluster: plugins
	scripts/local-cluster up --slurm $(or $(SLURM),22.05)

cluster-down:
	scripts/local-cluster down

## The end-to-end demo: a script with a GridFTP stage-in and a stage-out, chained on the local cluster.
demo: cluster
	scripts/demo

## Every test, the ones on the real local cluster included, after the static checks (CI runs
## this), on TEST_WORKERS pytest-xdist workers (the cluster's tests on one of them); the property
## tests at CI strength, the 25 slowest tests listed at the end; then the Slurm paths' second
## pass on Slurm 24.11 (test-2411) when bootstrap built it.
## The static checks and the cluster's start run side by side once the venv is there (mypy and
## the C build use the CPU while `up` mostly waits on its daemons); the plugins are installed
## after check-c, which builds the same SPANK plugin.
test: deps
	$(MAKE) --no-print-directory -j3 --output-sync=target AFTER_DEPS=1 lint types cluster
	SCRATCHKEEPER_REQUIRE_CLUSTER=1 HYPOTHESIS_PROFILE=ci $(PY) -m pytest -n $(TEST_WORKERS) \
	  --dist loadgroup --durations=25 $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-2411

## The Slurm paths' cluster tests (the SPANK plugin and the chain service, job_submit.lua,
## burst_buffer.lua, the health check) again on scripts/bootstrap's Slurm 24.11, when it is
## built: the cluster brought up on 24.11, the tests run with its commands first on PATH, then
## the cluster back on Debian's 22.05. About 7 minutes here; `make test`'s second pass.
SLURM_2411_TESTS := tests/plugins/test_plugins_cluster.py tests/plugins/test_burst_buffer_cluster.py \
  tests/plugins/test_chain_ends_cluster.py tests/plugins/test_dead_mount_cluster.py \
  tests/planner/test_chain_cluster.py
test-2411: deps
	@if [ ! -f $(SLURM_2411_PREFIX)/.built ]; then \
	  echo "test-2411: no Slurm 24.11 in $(SLURM_2411_PREFIX) (scripts/bootstrap as root builds it):" \
	    "the second pass is not run"; exit 0; fi; \
	scripts/local-cluster down >/dev/null && \
	$(MAKE) --no-print-directory cluster SLURM=24.11 && \
	PATH=$(SLURM_2411_PREFIX)/bin:$(SLURM_2411_PREFIX)/sbin:$$PATH SCRATCHKEEPER_REQUIRE_CLUSTER=1 \
	  $(PY) -m pytest -p no:randomly --durations=10 $(SLURM_2411_TESTS) $(PYTEST_ARGS); \
	rc=$$?; scripts/local-cluster down >/dev/null && $(MAKE) --no-print-directory cluster; \
	exit $$rc

## Only the tests that need no cluster.
test-unit: deps
	$(PY) -m pytest -m "not cluster" $(PYTEST_ARGS)

## The first answer, in about 2 minutes (after make deps): the static checks and every test that
## needs no cluster, no mount and no root, in parallel.
check: lint types check-c
	$(PY) -m pytest $(FAST_TESTS) -n $(WORKERS) -q --durations=10 $(PYTEST_ARGS)

## ruff (rules in pyproject.toml), shellcheck, luacheck (.luacheckrc)
lint:
	$(VENV)/bin/ruff check -q $(PY_SOURCES)
	shellcheck $(SHELL_SOURCES)
	luacheck -q $(LUA_SOURCES)

## mypy over scratchkeeper/ (strict, with the per-package relaxations in pyproject.toml)
types:
	$(VENV)/bin/mypy

## Every C part compiled with warnings as errors, nothing installed: the extensions with
## setup.py's own flags (into build/check-c; only what changed is compiled again), the command's
## client and the SPANK plugin (its Makefile has -Werror) against each Slurm here: Debian's 22.05
## and scripts/bootstrap's 24.11 (said, not failed, when bootstrap has not built it), each with
## the Slurm functions it calls checked against that Slurm's libslurmfull.
check-c:
	CFLAGS="-Wall -Wextra -Werror" $(PY) setup.py -q build_ext --build-temp build/check-c/temp \
	  --build-lib build/check-c/lib
	@mkdir -p build/check-c
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror '-DSK_FALLBACK="/"' '-DSK_PYTHON="/"' \
	  -o build/check-c/client scratchkeeper/cli/native/client.c
	$(MAKE) -s -C slurm-plugins SLURM= spank_scratchkeeper.so check-symbols
	@if [ -f $(SLURM_2411_PREFIX)/.built ]; then \
	  $(MAKE) -s -C slurm-plugins SLURM=24.11 SPANK_SO=$(CURDIR)/build/check-c/spank_scratchkeeper-24.11.so \
	    check-symbols; \
	else echo "check-c: no Slurm 24.11 in $(SLURM_2411_PREFIX) (scripts/bootstrap as root builds it):" \
	  "the SPANK plugin is checked against the system's Slurm only"; fi

bench: deps
	SCRATCHKEEPER_EXTRAS=test,bench scripts/bootstrap
	$(PY) -m benchmarks.run

## pjdfstest's whole suite on bindfs and on the scratch mount, same run (as root, about 10 minutes):
## docs/benchmarks/mount/conformance.md; the fast subset runs in make test (tests/mount).
conformance: deps
	$(PY) -m benchmarks.mount.conformance

## Every replay sweep behind docs/benchmarks/replay/ on the full RICC trace (../shared/traces),
## its figures and reproduction.rst; task results in build/reproduce are reused by a rerun.
reproduce: deps
	nice $(PY) -m scratchkeeper reproduce --output docs/benchmarks/replay --work build/reproduce

clean:
	rm -rf build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The commands README.rst promises, for a fresh Debian 12 machine (as root).
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: deps plugins cluster cluster-down demo test test-unit bench conformance reproduce clean

deps:
	scripts/bootstrap

## The Slurm plugins (SPANK plugin, job_submit.lua) built and installed for the local cluster;
## before `local-cluster up`, which enables job_submit/lua and restarts slurmd when they change.
plugins: deps
	$(MAKE) -C slurm-plugins install LOCAL=1

cluster: plugins
	scripts/local-cluster up

cluster-down:
	scripts/local-cluster down

## The end-to-end demo: a script with a GridFTP stage-in and a stage-out, chained on the local cluster.
demo: cluster
	scripts/demo

## Every test, the ones on the real local cluster included.
test: cluster
	SCRATCHKEEPER_REQUIRE_CLUSTER=1 $(PY) -m pytest $(PYTEST_ARGS)

## Only the tests that need no cluster.
test-unit: deps
	$(PY) -m pytest -m "not cluster" $(PYTEST_ARGS)

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
	rm -rf build *.egg-info .pytest_cache

# The two commands a newcomer runs (see README.md):
#   make demo   local control plane + gang-extender + the seed Horovod gang job
#   make test   every test: unit, property, golden, packaging, and e2e on the real control plane
#   make test-default  the first tier alone: every test but the real tier, on the default release
#   make test-oldest   the gang, wiring and HA scenarios on the oldest supported Kubernetes
#   make demo-real     the Horovod, DeepSpeed and MPI examples for real: mpirun over SSH on 2 real nodes (root)
#   make test-real     the real tier: jobs on real nodes (kubelet, containerd, CNI, DNS, SSH)
# K8S_VERSION=v1.35.4 picks the control plane's release (default: the newest,
# DEFAULT_K8S_VERSION in hack/build-control-plane.sh); each is built once and cached.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# hack/test-all.sh (make test) reads it from the environment.
export PYTEST_ARGS
# Workers for the default release's tier in `make test` (pytest-xdist): one a core;
# each worker starts its own control plane, a test file stays on one worker.
TEST_WORKERS ?= auto
K8S_VERSION ?=
export K8S_VERSION
OLDEST_K8S_VERSION := v1.35.4
OLDEST_SUITE := tests/e2e/test_control_plane.py tests/e2e/test_gang_scheduling.py \
	tests/e2e/test_job_wiring.py tests/e2e/test_ha.py tests/e2e/test_workload_v135.py \
	tests/e2e/test_gang_preemption.py tests/e2e/test_dra.py

.PHONY: demo demo-real test test-default test-oldest test-real unit e2e lint typecheck bench mutate \
	control-plane kueue node dev-up dev-down clean

# One line with its time; pip's output goes to $(VENV)/install.log (tail and path on failure).
$(BIN)/gang-extender: pyproject.toml
	@mkdir -p $(VENV); start=$$(date +%s); \
	printf 'installing gang-extender and its dev tools into $(VENV)... '; \
	if { $(PYTHON) -m venv $(VENV) && $(BIN)/pip install --upgrade pip \
	     && $(BIN)/pip install -e '.[dev]'; } > $(VENV)/install.log 2>&1; \
	then echo "$$(( $$(date +%s) - start )) s"; \
	else echo FAILED; tail -n 30 $(VENV)/install.log; echo "full log: $(VENV)/install.log"; exit 1; fi
	@touch $@

control-plane:
	@hack/build-control-plane.sh $(K8S_VERSION) >/dev/null

# Kueue's manager, CRDs and webhooks (tests/e2e/test_with_kueue.py; cached, ~150 s once).
kueue:
	@hack/build-kueue.sh >/dev/null

# kubelet, containerd, CoreDNS, the fake GPU plugin and the job image (root; cached).
node:
	@hack/build-node.sh >/dev/null

demo: $(BIN)/gang-extender control-plane
	$(BIN)/gang-extender demo

demo-real: $(BIN)/gang-extender control-plane node
	$(BIN)/gang-extender demo --real-nodes 2 --workdir .dev/demo-real

# Every test, in four parts: the layers, ruff and mypy (lint); every test on the
# default release (test-default, TEST_WORKERS at once); the gang, wiring and HA
# scenarios on the oldest supported one (test-oldest); the real tier (test-real).
# hack/test-all.sh builds what they need and overlaps the builds with the parts and
# the parts with each other (the oldest tier beside the first; the real tier after
# it). CI (.ci/run) runs exactly this target.
test:
	@hack/test-all.sh

# Every test but the real tier on the default release. Needs only the control plane
# built first: the tests that use Kueue or helm build them (hack/build-kueue.sh,
# hack/build-helm.sh; a no-op once cached), or wait for a build of them under way,
# and run after the other e2e modules (tests/e2e/module_order.py).
# --max-worker-restart=0: a worker that dies fails the run at once, naming the test it
# died in; replaced, it can leave pytest-xdist's loadfile scheduling waiting forever
# (pytest-xdist #784, #1327: a cold run of ours hung 40 minutes that way).
test-default: $(BIN)/gang-extender control-plane
	$(BIN)/pytest tests --ignore=tests/real -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0 $(PYTEST_ARGS)

# The oldest supported minor: its own cached control plane, the core scenarios.
test-oldest: $(BIN)/gang-extender
	@$(MAKE) --no-print-directory control-plane K8S_VERSION=$(OLDEST_K8S_VERSION)
	K8S_VERSION=$(OLDEST_K8S_VERSION) $(BIN)/pytest $(OLDEST_SUITE) $(PYTEST_ARGS)

# The real tier: 2 real nodes for the session; skips (saying why) where the
# machine cannot run containers (not root, no cgroups), before building anything.
test-real: $(BIN)/gang-extender control-plane
	@if $(BIN)/python -m extender.devcluster.realnode --can-run; then $(MAKE) --no-print-directory node; fi
	$(BIN)/pytest tests/real $(PYTEST_ARGS)

unit: $(BIN)/gang-extender
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

e2e: $(BIN)/gang-extender control-plane kueue
	$(BIN)/pytest tests/e2e $(PYTEST_ARGS)

lint: $(BIN)/gang-extender
	$(BIN)/ruff check extender tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: $(BIN)/gang-extender control-plane
	$(BIN)/pip install --quiet -e '.[dev,bench]'   # matplotlib (plot), py-spy (profile)
	$(BIN)/python -m bench

# Mutation testing of the pure core (extender/domain, and the pure byte work at the
# edges listed in pyproject.toml's [tool.mutmut]): a surviving mutant is a missing
# test. Narrow it to what you changed, e.g.
#   make mutate MUTANTS='extender.domain.planning.scoring* extender.kube.list_split*'
MUTANTS ?= extender.domain.* extender.kube.list_split.* extender.kube.member_indexes.* extender.api.priority_wire.* extender.api.candidates.*
mutate: $(BIN)/gang-extender
	$(BIN)/pip install --quiet -e '.[dev,mutate]'
	rm -rf mutants
	$(BIN)/mutmut run $(MUTANTS) --max-children 2
	$(BIN)/mutmut results

dev-up: $(BIN)/gang-extender control-plane
	$(BIN)/gang-extender dev up

dev-down: $(BIN)/gang-extender
	$(BIN)/gang-extender dev down

clean:
	rm -rf $(VENV) .dev .pytest_cache .mypy_cache .ruff_cache

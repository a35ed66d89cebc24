# The two commands a newcomer runs (see README.md):
#   make demo   local control plane + gang-extender + the seed Horovod gang job
#   make test   every test: unit, property, golden, and e2e on the real control plane
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test unit e2e lint typecheck bench mutate control-plane dev-up dev-down clean

$(BIN)/gang-extender: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

control-plane:
	@hack/build-control-plane.sh >/dev/null

demo: $(BIN)/gang-extender control-plane
	$(BIN)/gang-extender demo

test: $(BIN)/gang-extender control-plane
	$(BIN)/pytest tests $(PYTEST_ARGS)

unit: $(BIN)/gang-extender
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

e2e: $(BIN)/gang-extender control-plane
	$(BIN)/pytest tests/e2e $(PYTEST_ARGS)

lint: $(BIN)/gang-extender
	$(BIN)/ruff check extender tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: $(BIN)/gang-extender control-plane
	$(BIN)/pip install --quiet -e '.[dev,bench]'   # matplotlib (plot), py-spy (profile)
	$(BIN)/python -m bench

# Mutation testing of the pure core (extender/domain): a surviving mutant is a
# missing test. Narrow it to what you changed, e.g.
#   make mutate MUTANTS='extender.domain.scoring* extender.domain.ledger*'
MUTANTS ?= extender.domain.*
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

# The two set-up commands of the README, and the pieces they are made of.
# `make demo` and `make test` each do all set-up on a fresh machine (into .venv/).

VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup tools images demo test test-fast lint crds clean

setup:
	bash .ci/bootstrap

tools:
	bash .ci/tools

## The operator and CPU runtime images, built from images/*/Dockerfile without Docker (root;
## buildah, cached in /var/cache/ascend-llm-images): see images/README.md.
images: tools
	bash images/build.sh

## The main job: a real tiny LLM served on CPU by the in-pod runtime, from examples/cpu-tiny.yaml.
demo: setup
	$(VENV)/bin/ascend-llm demo

## Everything CI runs: import contracts, fresh CRDs, then every test tier (engine tier included),
## the cluster and real-node tiers beside the others (.ci/test).
test: setup tools
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ascend-llm crd --check
	bash .ci/test

## The tests without the real engine (seconds to a minute or two).
test-fast: setup tools
	$(PY) -m pytest -m "not engine"

crds: setup
	$(VENV)/bin/ascend-llm crd

clean:
	rm -rf $(VENV) .cache

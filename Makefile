# slurmlab: the README's two commands are `make up` and `make test`.
# Each does all the set-up a fresh Debian machine needs (apt packages, virtualenv, libvirtd, box).
VENV   ?= .venv
SL      = $(VENV)/bin/slurmlab
PYTEST  = $(VENV)/bin/pytest
SPEC   ?= examples/cluster.yaml

.PHONY: setup host box up down test unit e2e bench clean

setup:            ## Debian packages + virtualenv (idempotent)
	bash scripts/host-setup.sh

host: setup       ## namespace + virtlogd + libvirtd + storage pool (idempotent)
	$(SL) host up

box: host         ## the Debian 13 + Slurm 24.11 box (cached by its inputs)
	$(SL) box build

up: box           ## the main job: build the example cluster, run a job, show how to get in
	$(SL) up $(SPEC)

down:             ## delete the example cluster
	$(SL) delete-cluster demo

unit: setup       ## fast tests, no VMs
	$(PYTEST) -q tests/unit

e2e: box          ## real VMs only
	$(PYTEST) -v -m e2e tests

test: box         ## every test: unit + real VMs
	mkdir -p artifacts
	$(PYTEST) -v --junitxml=artifacts/junit.xml tests

clean:
	rm -rf $(VENV) artifacts

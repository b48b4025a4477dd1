# slurmlab: the README's two commands are `make up` and `make test`.
# Each does all the set-up a fresh Debian machine needs (apt packages, virtualenv, libvirtd, box).
VENV   ?= .venv
SL      = $(VENV)/bin/slurmlab
PYTEST  = $(VENV)/bin/pytest
PYTHON  = $(VENV)/bin/python
SPEC   ?= examples/cluster.yaml

.PHONY: setup host box up down test unit lint golden e2e bench clean

# With CI_PHASES=FILE (.ci/run sets it), each step before pytest notes "PHASE SECONDS" there for
# scripts/ci_times.py; without it, the commands run as they are.
timed = $(if $(CI_PHASES),s=$$(date +%s); $(2); rc=$$?; echo "$(1) $$(( $$(date +%s) - s ))" >> $(CI_PHASES); exit $$rc,$(2))

setup:            ## Debian packages + virtualenv (idempotent)
	$(call timed,setup,bash scripts/host-setup.sh)

host: setup       ## namespace + virtlogd + libvirtd + storage pool (idempotent)
	$(call timed,setup,$(SL) host up)

box: host         ## the Debian 13 + Slurm 24.11 box (cached by its inputs) and its warm-start templates
	$(call timed,setup,$(SL) box build $(BOX_FOR))

up: box           ## the main job: build the example cluster, run a job, show how to get in
	$(SL) up $(SPEC)

down:             ## delete the example cluster
	$(SL) delete-cluster demo

lint: setup       ## ruff's pyflakes rules on the Python; yamllint, ansible-lint (production profile, offline) and shellcheck on the roles, playbooks and example scripts
	$(call timed,lint,$(VENV)/bin/ruff check --no-cache --quiet --select F --select E9 lab bench tests scripts && $(VENV)/bin/yamllint --strict roles playbooks && $(VENV)/bin/ansible-lint --offline --profile production playbooks roles && shellcheck roles/*/files/*.sh examples/*/*.sh)

golden: setup     ## regenerate tests/unit/data/*.golden (tests only compare); review git diff after
	$(PYTHON) -m tests.unit.golden

unit: lint        ## fast tests, no VMs
	$(PYTEST) -q tests/unit

e2e: BOX_FOR = --for examples/workshop.yaml
e2e: box          ## real VMs only
	$(PYTEST) -v --durations=40 -m e2e tests

# Three pytest streams at once (scripts/streams.py, issue 43): the class cluster's module; the other
# clusters' modules (the short ones first, while the class cluster is made), then the unit tests; the API
# tests on the sim provider (no VM: they mostly wait on their engines). The class's tests that run alone
# come last in its stream and wait for the other stream's e2e tests to end; the unit tests run beside
# them, on the core those leave idle (ADR 0029). Every test module is in exactly one stream
# (tests/unit/test_streams.py checks it).
STREAM_CLASS = tests/e2e/test_cluster.py
STREAM_REST  = tests/e2e/test_host.py tests/e2e/test_legacy_rollback.py tests/e2e/test_updates.py tests/e2e/test_hyperpod.py tests/unit
STREAM_API   = tests/api

test: BOX_FOR = --for examples/workshop.yaml  # the e2e clusters' shapes: their templates before the tests
test: box lint    ## every test: lint + unit + real VMs
	mkdir -p artifacts && rm -f artifacts/test-vm-cpu.jsonl
	$(PYTHON) scripts/streams.py $(PYTEST) --junit-dir artifacts $(if $(CI_PHASES),--phases $(CI_PHASES)) \
	  class="-v --durations=20 -p no:cacheprovider $(STREAM_CLASS)" \
	  rest="-v --durations=20 -p no:cacheprovider $(STREAM_REST)" \
	  api="-v --durations=20 -p no:cacheprovider $(STREAM_API)"

clean:
	rm -rf $(VENV) artifacts

# hpcdl: `make run` and `make test` each do all of their own set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

# slurm-wlm + munge: the real local cluster the tests start; openmpi: mpirun and PMIx for srun;
# lmod: loads the generated modulefiles; shellcheck: lints every rendered script; hwloc: topology.
APT_PACKAGES := slurm-wlm munge openmpi-bin libopenmpi-dev lmod shellcheck hwloc
PIP_EXTRAS := torch,test,mpi,containers

.PHONY: run test setup apt venv bench containers images modulefiles golden clean help

help:
	@echo "make run         validate this machine (quick suite): summary table and an HTML report"
	@echo "make test        the whole test suite (installs what it needs first)"
	@echo "make bench       benchmarks; writes docs/performance.md"
	@echo "make containers  regenerate containers/*.def and *.Dockerfile"
	@echo "make images      build the images with apptainer/singularity where installed"
	@echo "make modulefiles regenerate the checked-in modulefiles"
	@echo "make golden      regenerate the golden job scripts and the examples in docs/jobs.md"

setup: apt $(STAMPS)/venv

# dpkg-query is cheap, so the package check runs every time (and installs nothing when all are there).
apt:
	@tools/ensure-apt.sh $(APT_PACKAGES)

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[$(PIP_EXTRAS)]'
	@touch $@

venv: $(STAMPS)/venv

# The quick validation suite through the local executor: environment, collectives, thread
# sweep, throughput, 2-rank scaling and convergence; exits 0 when every check passes.
run: setup
	$(VENV)/bin/hpcdl validate --site local --suite quick

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) -m hpcdl.bench --out docs/performance.md

# One folder per shipped site profile; rendered aside first so a broken profile changes nothing.
# /opt/hpcdl is a placeholder prefix, so the checked-in files do not depend on this machine.
modulefiles: $(STAMPS)/venv
	rm -rf $(STAMPS)/modulefiles.new && mkdir -p $(STAMPS)/modulefiles.new
	$(VENV)/bin/hpcdl modulefiles render --shipped --prefix /opt/hpcdl --out $(STAMPS)/modulefiles.new
	find modulefiles -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
	cp -R $(STAMPS)/modulefiles.new/. modulefiles/
	rm -rf $(STAMPS)/modulefiles.new

# Images: the definitions are generated from containers/images.yaml and checked in.
IMAGES ?= knl-mkldnn volta-cuda hopper-cuda
IMAGE_DIR ?= build/images
# apptainer, else singularity; --fakeroot when not root (both need it to build unprivileged)
CONTAINER_BUILDER := $(shell command -v apptainer || command -v singularity)
FAKEROOT := $(if $(filter 0,$(shell id -u)),,--fakeroot)

containers: $(STAMPS)/venv
	$(VENV)/bin/hpcdl images compat
	$(VENV)/bin/hpcdl images render

images: $(STAMPS)/venv
	@test -n "$(CONTAINER_BUILDER)" || { echo "make images: neither apptainer nor singularity is installed; install Apptainer (https://apptainer.org/docs/admin/latest/installation.html)" >&2; exit 2; }
	$(VENV)/bin/hpcdl images render --check
	@mkdir -p $(IMAGE_DIR)
	@# build runs each image's %test (hpcdl's image check) last; `apptainer test X.sif` re-runs it
	set -e; for image in $(IMAGES); do \
		$(CONTAINER_BUILDER) build $(FAKEROOT) --force $(IMAGE_DIR)/$$image.sif containers/$$image.def; \
	done

clean:
	rm -rf $(STAMPS) runs build *.egg-info

# After a deliberate change to the job-script templates or the site profiles: rewrite the
# golden scripts (tests/golden/) and the examples in docs/jobs.md, then review the diff.
golden: setup
	HPCDL_UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/test_render_golden.py tests/test_docs_jobs.py

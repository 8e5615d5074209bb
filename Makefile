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

.PHONY: run test setup apt venv bench containers images modulefiles clean help

help:
	@echo "make run         plan, render and run the embedded default job on this machine"
	@echo "make test        the whole test suite (installs what it needs first)"
	@echo "make bench       benchmarks; writes docs/performance.md"
	@echo "make containers  regenerate containers/*.def and *.Dockerfile"
	@echo "make images      build the images with apptainer/singularity where installed"
	@echo "make modulefiles regenerate the checked-in modulefiles"

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

run: setup
	$(VENV)/bin/hpcdl run --site local recipes/cifar10-quick.yaml

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) -m hpcdl.bench --out docs/performance.md

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

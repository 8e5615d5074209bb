# hpcdl: `make run` and `make test` each do all of their own set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

# slurm-wlm + munge: the real local cluster the tests start; openmpi: mpirun and PMIx for srun;
# lmod: loads the generated modulefiles; shellcheck: lints every rendered script; hwloc: topology.
APT_PACKAGES := slurm-wlm munge openmpi-bin libopenmpi-dev lmod shellcheck hwloc
PIP_EXTRAS := torch,tensorflow,test,mpi,containers
# MXNet 1.9.1 imports only with numpy < 1.24 (np.bool is gone after), while torch 2.13 and
# TensorFlow 2.21 use numpy 2: MXNet gets its own venv with hpcdl installed there too.
MXNET_VENV := .venv-mxnet
MXNET_PINS := mxnet==1.9.1 'numpy<1.24'
# Horovod 0.28.1 is built from its release source (C++14 -> C++17, see tools/build-horovod.sh);
# the wheel is cached per torch version, since the extension links against that torch.
HOROVOD_VERSION := 0.28.1
WHEEL_CACHE := .cache/wheels

.PHONY: run test setup apt venv mxnet horovod bench containers images modulefiles clean help

help:
	@echo "make run         plan, render and run the embedded default job on this machine"
	@echo "make test        the whole test suite (installs what it needs first)"
	@echo "make bench       benchmarks; writes docs/performance.md"
	@echo "make mxnet       the MXNet 1.9.1 venv (.venv-mxnet, numpy<1.24)"
	@echo "make horovod     build (once, cached in .cache/wheels) and install Horovod $(HOROVOD_VERSION) for PyTorch"
	@echo "make containers  regenerate containers/*.def and *.Dockerfile"
	@echo "make images      build the images with apptainer/singularity where installed"
	@echo "make modulefiles regenerate the checked-in modulefiles"

setup: apt $(STAMPS)/venv $(STAMPS)/mxnet $(STAMPS)/horovod

# dpkg-query is cheap, so the package check runs every time (and installs nothing when all are there).
apt:
	@tools/ensure-apt.sh $(APT_PACKAGES)

$(STAMPS)/venv: pyproject.toml Makefile
	@mkdir -p $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[$(PIP_EXTRAS)]'
	@touch $@

venv: $(STAMPS)/venv

$(STAMPS)/mxnet: pyproject.toml Makefile
	@mkdir -p $(STAMPS)
	test -x $(MXNET_VENV)/bin/python || $(PYTHON) -m venv $(MXNET_VENV)
	$(MXNET_VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(MXNET_VENV)/bin/python -m pip install -q $(MXNET_PINS) -e '.[test]'
	$(MXNET_VENV)/bin/python -c 'import mxnet, hpcdl; print("mxnet", mxnet.__version__)'
	@touch $@

mxnet: $(STAMPS)/mxnet

# needs mpicc (libopenmpi-dev, from apt) and torch in the venv before it builds
$(STAMPS)/horovod: $(STAMPS)/venv tools/build-horovod.sh | apt
	tools/build-horovod.sh $(PY) $(HOROVOD_VERSION) $(WHEEL_CACHE)
	@touch $@

horovod: $(STAMPS)/horovod

run: setup
	$(VENV)/bin/hpcdl run --site local recipes/cifar10-quick.yaml

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) -m hpcdl.bench --out docs/performance.md

clean:
	rm -rf $(STAMPS) runs build *.egg-info  # keeps .cache/wheels: a Horovod build costs minutes

# hpcdl: `make run` and `make test` each do all of their own set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

# slurm-wlm + munge: the real local cluster the tests start; openmpi: mpirun and PMIx for srun;
# lmod: loads the generated modulefiles; shellcheck: lints every rendered script; hwloc: topology.
# Charliecloud builds and runs the local image (no Apptainer in Debian 12): ch-image needs
# charliecloud-builders, ch-run/ch-convert charliecloud-runtime, SquashFS images squashfs-tools
# and squashfuse, the registry-free Debian 12 base mmdebstrap; siftool writes SIF files.
# chromium: the validation report is laid out by a real headless browser in its test (tests/test_report_browser.py).
# iproute2 (ip netns, veth, tc) and util-linux (unshare, nsenter): `hpcdl cluster up --link-gbit` puts each
# pretend node in a network namespace of its own behind a shaped link (hpcdl.netshape).
APT_PACKAGES := slurm-wlm munge openmpi-bin libopenmpi-dev lmod shellcheck hwloc \
	charliecloud-builders charliecloud-runtime squashfs-tools squashfuse mmdebstrap siftool chromium \
	iproute2 util-linux
PIP_EXTRAS := torch,tensorflow,test,mpi,containers,digits,reports
# MXNet 1.9.1 imports only with numpy < 1.24 (np.bool is gone after), while torch 2.13 and
# TensorFlow 2.21 use numpy 2: MXNet gets its own venv with hpcdl installed there too.
MXNET_VENV := .venv-mxnet
MXNET_PINS := mxnet==1.9.1 'numpy<1.24'
# Horovod 0.28.1 is built from its release source (C++14 -> C++17, see tools/build-horovod.sh);
# the wheel is cached per torch version, since the extension links against that torch, outside
# the checkout so that a fresh clone (CI) reuses it.
HOROVOD_VERSION := 0.28.1
WHEEL_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/hpcdl/wheels

.PHONY: run test setup apt venv mxnet horovod bench containers images images-install modulefiles golden clean help

help:
	@echo "make run         validate this machine (quick suite): summary table and an HTML report"
	@echo "make test        the whole test suite (installs what it needs first)"
	@echo "make bench       benchmarks; writes docs/performance.md"
	@echo "make mxnet       the MXNet 1.9.1 venv (.venv-mxnet, numpy<1.24)"
	@echo "make horovod     build (once, cached in $(WHEEL_CACHE)) and install Horovod $(HOROVOD_VERSION) for PyTorch"
	@echo "make containers  regenerate containers/*.def and *.Dockerfile"
	@echo "make images      build the images with the best builder here (apptainer, singularity, Charliecloud), cached"
	@echo "make images-install PREFIX=DIR  the newest builds to DIR/images/NAME.sif, where the modules look"
	@echo "make modulefiles regenerate the checked-in modulefiles"
	@echo "make golden      regenerate the golden job scripts and the examples in docs/jobs.md"

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
	$(MXNET_VENV)/bin/python -m pip install -q $(MXNET_PINS) -e '.[test,digits,reports]'
	$(MXNET_VENV)/bin/python -c 'import mxnet, hpcdl; print("mxnet", mxnet.__version__)'
	@touch $@

mxnet: $(STAMPS)/mxnet

# needs mpicc (libopenmpi-dev, from apt) and torch in the venv before it builds
$(STAMPS)/horovod: $(STAMPS)/venv tools/build-horovod.sh | apt
	tools/build-horovod.sh $(PY) $(HOROVOD_VERSION) $(WHEEL_CACHE)
	@touch $@

horovod: $(STAMPS)/horovod

# The quick validation suite through the local executor: environment, collectives, thread
# sweep, throughput, 2-rank scaling and convergence; exits 0 when every check passes.
run: apt $(STAMPS)/venv
	$(VENV)/bin/hpcdl validate --site local --suite quick

# The quick tests on every core at once (pytest-xdist), then the slow ones (training, clusters,
# images, anything that times itself) one at a time, so no timing shares the machine with
# another test. Both parts always run; either failing fails `make test`.
# setup installed every tool the tests use, so under `make test` a missing one fails its test instead of
# skipping it (tests/conftest.py: require_tool reads CI); GPU tests skip where CUDA sees no GPU.
test: setup
	@status=0; export CI="$${CI:-true}"; \
	$(PY) -m pytest -m "not slow and not slurm" -n auto || status=$$?; \
	$(PY) -m pytest -m "slow or slurm" || status=$$?; \
	exit $$status

bench: setup
	$(PY) -m hpcdl.bench --out docs/performance.md

# Rendering text (modulefiles, container definitions) needs no framework: the test venv when it
# is there, else a small one with hpcdl's own dependencies and hpccm only. Either runs this
# checkout's code (PYTHONPATH), whichever checkout an editable install points at.
RENDER_VENV := .venv-render
RENDER_PY := $(if $(wildcard $(STAMPS)/venv),$(PY),$(RENDER_VENV)/bin/python)
RENDER_DEP := $(if $(wildcard $(STAMPS)/venv),$(STAMPS)/venv,$(STAMPS)/render)
HPCDL_HERE := PYTHONPATH=$(CURDIR)/platform $(RENDER_PY) -m hpcdl

$(STAMPS)/render:
	@mkdir -p $(STAMPS)
	test -x $(RENDER_VENV)/bin/python || $(PYTHON) -m venv $(RENDER_VENV)
	$(RENDER_VENV)/bin/python -m pip install -q '.[containers]'
	@touch $@

# One folder per shipped site profile; rendered aside first so a broken profile changes nothing.
# /opt/hpcdl is a placeholder prefix, so the checked-in files do not depend on this machine.
modulefiles: | $(RENDER_DEP)
	rm -rf $(STAMPS)/modulefiles.new && mkdir -p $(STAMPS)/modulefiles.new
	$(HPCDL_HERE) modulefiles render --shipped --prefix /opt/hpcdl --out $(STAMPS)/modulefiles.new
	find modulefiles -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
	cp -R $(STAMPS)/modulefiles.new/. modulefiles/
	rm -rf $(STAMPS)/modulefiles.new

# Images: the definitions are generated from containers/images.yaml and checked in.
# `hpcdl images build` picks the builder: apptainer or singularity (the .def, %test runs last),
# else Charliecloud (ch-image from the Dockerfile, then a SquashFS image ch-run runs, and the
# image check inside it). Empty IMAGES: every image (apptainer) or every image whose base needs
# no registry (Charliecloud). Built images are cached by a hash of recipe and inputs in
# $(HPCDL_IMAGE_CACHE) (default /var/cache/hpcdl/images), so a second run builds nothing.
IMAGES ?=
IMAGE_BUILDER ?= auto
# SIF=1: a Charliecloud build also writes NAME-KEY.sif (siftool) beside the SquashFS image
SIF ?=

containers: | $(RENDER_DEP)
	$(HPCDL_HERE) images compat --specs containers/images.yaml
	$(HPCDL_HERE) images render --specs containers/images.yaml --out containers

images: $(STAMPS)/venv
	$(VENV)/bin/hpcdl images render --check
	HPCDL_WHEEL_CACHE=$(WHEEL_CACHE) $(VENV)/bin/hpcdl images build --builder $(IMAGE_BUILDER) $(if $(SIF),--sif) $(IMAGES)

# PREFIX: the prefix the modulefiles were rendered for (--prefix); each image goes to
# PREFIX/images/NAME-VERSION-DIGEST.sif and the link NAME.sif the modules name is switched to it
images-install: $(STAMPS)/venv
	$(if $(PREFIX),,$(error give PREFIX=DIR, the prefix the modulefiles were rendered for))
	$(VENV)/bin/hpcdl images install $(PREFIX) $(IMAGES)

clean:
	rm -rf $(STAMPS) runs build *.egg-info  # the Horovod wheel cache lives outside: a build costs minutes

# After a deliberate change to the job-script templates or the site profiles: rewrite the
# golden scripts (tests/golden/) and the examples in docs/jobs.md, then review the diff.
golden: setup
	HPCDL_UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/test_render_golden.py tests/test_docs_jobs.py

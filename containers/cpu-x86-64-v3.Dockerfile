FROM ubuntu:22.04

# hpcdl image cpu-x86-64-v3: CPU PyTorch for any x86-64-v3 (AVX2) node
# whose MPI is Open MPI (SDSC Expanse, Leonardo DCGP), Open MPI 4 +
# UCX + PMIx and Slurm PMI2, Horovod for PyTorch over MPI. Generated
# by `make containers` from containers/images.yaml; edit the spec, not
# this file.

LABEL org.hpcdl.arch=x86_64 \
    org.hpcdl.base=ubuntu:22.04 \
    org.hpcdl.cpu_target=x86_64_v3 \
    org.hpcdl.fabric=infiniband \
    org.hpcdl.horovod=0.28.1 \
    org.hpcdl.horovod.frameworks=pytorch \
    org.hpcdl.hpcdl=0.1.0 \
    org.hpcdl.image=cpu-x86-64-v3 \
    org.hpcdl.main.mpi4py=4.1.0 \
    org.hpcdl.main.numpy=2.2.6 \
    org.hpcdl.main.torch=2.8.0 \
    org.hpcdl.mpi=openmpi-4.1.6 \
    org.hpcdl.mpi.source=build \
    org.hpcdl.pmix=4.2.9 \
    org.hpcdl.ucx=1.18.1 \
    org.opencontainers.image.title=hpcdl-cpu-x86-64-v3 \
    org.opencontainers.image.version=0.1.0

#     cpu-x86-64-v3: CPU PyTorch for any x86-64-v3 (AVX2) node whose MPI is Open MPI (SDSC Expanse, Leonardo DCGP), Open MPI 4 + UCX + PMIx and Slurm PMI2, Horovod for PyTorch over MPI
#     Run a training recipe (one rank per process; the launcher starts the ranks):
#         srun apptainer run cpu-x86-64-v3.sif recipe.yaml --plan plan.json
#     Pick another environment with HPCDL_IMAGE_ENV (main).
#     Check the image: apptainer test cpu-x86-64-v3.sif
#     Versions of everything inside: apptainer inspect --labels cpu-x86-64-v3.sif

# Python
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 \
        python3-dev && \
    rm -rf /var/lib/apt/lists/*

RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential \
        ca-certificates \
        cmake \
        git \
        hwloc \
        libevent-dev \
        libhwloc-dev \
        libnuma-dev \
        numactl \
        patch \
        python3-venv \
        wget && \
    rm -rf /var/lib/apt/lists/*

# OFED
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -t jammy \
        dapl2-utils \
        ibutils \
        ibverbs-providers \
        ibverbs-utils \
        infiniband-diags \
        libdapl-dev \
        libdapl2 \
        libibmad-dev \
        libibmad5 \
        libibverbs-dev \
        libibverbs1 \
        librdmacm-dev \
        librdmacm1 \
        rdmacm-utils && \
    rm -rf /var/lib/apt/lists/*

# UCX version 1.18.1
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        binutils-dev \
        file \
        libnuma-dev \
        make \
        wget && \
    rm -rf /var/lib/apt/lists/*
RUN mkdir -p /var/tmp && wget -q -nc -P /var/tmp https://github.com/openucx/ucx/releases/download/v1.18.1/ucx-1.18.1.tar.gz && \
    mkdir -p /var/tmp && tar -x -f /var/tmp/ucx-1.18.1.tar.gz -C /var/tmp -z && \
    cd /var/tmp/ucx-1.18.1 &&   ./configure --prefix=/usr/local/ucx --disable-assertions --disable-debug --disable-doxygen-doc --disable-logging --disable-params-check --enable-optimizations --with-rdmacm --with-verbs --without-cuda --without-gdrcopy --without-knem --without-xpmem && \
    make -j$(nproc) && \
    make -j$(nproc) install && \
    rm -rf /var/tmp/ucx-1.18.1 /var/tmp/ucx-1.18.1.tar.gz
ENV CPATH=/usr/local/ucx/include:$CPATH \
    LD_LIBRARY_PATH=/usr/local/ucx/lib:$LD_LIBRARY_PATH \
    LIBRARY_PATH=/usr/local/ucx/lib:$LIBRARY_PATH \
    PATH=/usr/local/ucx/bin:$PATH

# PMIX version 4.2.9
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        file \
        hwloc \
        libevent-dev \
        make \
        tar \
        wget && \
    rm -rf /var/lib/apt/lists/*
RUN mkdir -p /var/tmp && wget -q -nc -P /var/tmp https://github.com/openpmix/openpmix/releases/download/v4.2.9/pmix-4.2.9.tar.gz && \
    mkdir -p /var/tmp && tar -x -f /var/tmp/pmix-4.2.9.tar.gz -C /var/tmp -z && \
    cd /var/tmp/pmix-4.2.9 &&   ./configure --prefix=/usr/local/pmix && \
    make -j$(nproc) && \
    make -j$(nproc) install && \
    rm -rf /var/tmp/pmix-4.2.9 /var/tmp/pmix-4.2.9.tar.gz
ENV CPATH=/usr/local/pmix/include:$CPATH \
    LD_LIBRARY_PATH=/usr/local/pmix/lib:$LD_LIBRARY_PATH \
    PATH=/usr/local/pmix/bin:$PATH

# SLURM PMI2 version 21.08.8
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bzip2 \
        file \
        make \
        perl \
        tar \
        wget && \
    rm -rf /var/lib/apt/lists/*
RUN mkdir -p /var/tmp && wget -q -nc -P /var/tmp https://download.schedmd.com/slurm/slurm-21.08.8.tar.bz2 && \
    mkdir -p /var/tmp && tar -x -f /var/tmp/slurm-21.08.8.tar.bz2 -C /var/tmp -j && \
    cd /var/tmp/slurm-21.08.8 &&   ./configure --prefix=/usr/local/slurm-pmi2 && \
    cd /var/tmp/slurm-21.08.8 && \
    make -C contribs/pmi2 install && \
    rm -rf /var/tmp/slurm-21.08.8 /var/tmp/slurm-21.08.8.tar.bz2

# OpenMPI version 4.1.6
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bzip2 \
        file \
        hwloc \
        libnuma-dev \
        make \
        openssh-client \
        perl \
        tar \
        wget && \
    rm -rf /var/lib/apt/lists/*
RUN mkdir -p /var/tmp && wget -q -nc -P /var/tmp https://www.open-mpi.org/software/ompi/v4.1/downloads/openmpi-4.1.6.tar.bz2 && \
    mkdir -p /var/tmp && tar -x -f /var/tmp/openmpi-4.1.6.tar.bz2 -C /var/tmp -j && \
    cd /var/tmp/openmpi-4.1.6 &&   ./configure --prefix=/usr/local/openmpi --disable-getpwuid --enable-orterun-prefix-by-default --with-hwloc=/usr --with-libevent=/usr --with-pmi=/usr/local/slurm-pmi2 --with-pmix=/usr/local/pmix --with-slurm --with-ucx=/usr/local/ucx --with-verbs --without-cuda && \
    make -j$(nproc) && \
    make -j$(nproc) install && \
    rm -rf /var/tmp/openmpi-4.1.6 /var/tmp/openmpi-4.1.6.tar.bz2
ENV LD_LIBRARY_PATH=/usr/local/openmpi/lib:$LD_LIBRARY_PATH \
    PATH=/usr/local/openmpi/bin:$PATH

RUN if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi && \
    python3 -m venv /opt/envs/main && \
    /opt/envs/main/bin/pip install --no-cache-dir --upgrade pip setuptools wheel 'hatchling>=1.26' && \
    /opt/envs/main/bin/pip install --no-cache-dir --no-binary mpi4py --extra-index-url https://download.pytorch.org/whl/cpu torch==2.8.0 numpy==2.2.6 mpi4py==4.1.0

RUN if [ -n "$(ls /var/tmp/horovod-wheels/horovod-0.28.1-*.whl 2>/dev/null)" ] && /opt/envs/main/bin/pip install --no-cache-dir /var/tmp/horovod-wheels/horovod-0.28.1-*.whl; then echo "Horovod 0.28.1: the build machine's wheel"; else mkdir -p /var/tmp/horovod && cd /var/tmp/horovod || exit 1 && /opt/envs/main/bin/pip download --no-deps --no-binary :all: horovod==0.28.1 && tar -xzf horovod-0.28.1.tar.gz && sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' horovod-0.28.1/CMakeLists.txt horovod-0.28.1/horovod/torch/CMakeLists.txt && grep -q 'CMAKE_CXX_STANDARD 17' horovod-0.28.1/horovod/torch/CMakeLists.txt && /opt/envs/main/bin/pip install --no-cache-dir cmake && HOROVOD_WITH_MPI=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_BUILD_ARCH_FLAGS=-march=x86-64-v3 MAKEFLAGS="-j$(nproc)" /opt/envs/main/bin/pip install --no-cache-dir --no-build-isolation ./horovod-0.28.1 && cd / || exit 1 && rm -rf /var/tmp/horovod; fi

RUN if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi && \
    /opt/envs/main/bin/pip install --no-cache-dir --no-binary mpi4py --extra-index-url https://download.pytorch.org/whl/cpu torch==2.8.0 numpy==2.2.6 mpi4py==4.1.0 'jinja2>=3.1' 'matplotlib>=3.7' 'numpy>=1.23' 'pillow>=9' 'protobuf>=4.21' 'pydantic<3,>=2.5' 'python-hostlist>=2.0' 'pyyaml>=6.0' 'rich>=13' 'scikit-learn>=1.3' 'typer>=0.12'

COPY pyproject.toml /opt/hpcdl/src/pyproject.toml

COPY README.md /opt/hpcdl/src/README.md

COPY platform /opt/hpcdl/src/platform

RUN if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi && \
    /opt/envs/main/bin/pip install --no-cache-dir --no-deps --no-build-isolation /opt/hpcdl/src && \
    "/opt/envs/main/bin/python" -m hpcdl.images.banner --image cpu-x86-64-v3 > /opt/hpcdl/banner && \
    cat /opt/hpcdl/banner

ENV HPCDL_IMAGE=cpu-x86-64-v3 \
    PATH=/opt/envs/main/bin:$PATH

RUN python3 -c 'import json, os, sys; root = sys.argv[2] if len(sys.argv) > 2 else "/"; files = {os.path.join(root, k.lstrip("/")): v for k, v in json.loads(sys.argv[1]).items()}; [(os.makedirs(os.path.dirname(p), exist_ok=True), open(p, "w").write(t), os.chmod(p, 0o755)) for p, t in files.items()]' '{"/.singularity.d/env/90-environment.sh": "#!/bin/sh\n# hpcdl image cpu-x86-64-v3: its environment, as %environment gives it\nexport PATH=/opt/envs/main/bin:\"$PATH\"\nexport HPCDL_IMAGE=cpu-x86-64-v3\n", "/.singularity.d/runscript": "#!/bin/sh\ncat /opt/hpcdl/banner >&2; exec \"/opt/envs/${HPCDL_IMAGE_ENV:-main}/bin/hpcdl\" train \"$@\"\n"}'

ARG HPCDL_CREATED=unknown
ARG HPCDL_REVISION=unknown
ARG HPCDL_SOURCE=unknown

LABEL org.opencontainers.image.created=${HPCDL_CREATED} \
    org.opencontainers.image.revision=${HPCDL_REVISION} \
    org.opencontainers.image.source=${HPCDL_SOURCE}

RUN python3 -c 'import json, os, sys; labels = json.loads(sys.argv[1]); labels.update({k: os.environ.get(v) or "unknown" for k, v in json.loads(sys.argv[2]).items()}); os.makedirs(os.path.dirname(sys.argv[3]), exist_ok=True); json.dump(labels, open(sys.argv[3], "w"), indent=2, sort_keys=True)' '{"org.hpcdl.arch": "x86_64", "org.hpcdl.base": "ubuntu:22.04", "org.hpcdl.cpu_target": "x86_64_v3", "org.hpcdl.fabric": "infiniband", "org.hpcdl.horovod": "0.28.1", "org.hpcdl.horovod.frameworks": "pytorch", "org.hpcdl.hpcdl": "0.1.0", "org.hpcdl.image": "cpu-x86-64-v3", "org.hpcdl.main.mpi4py": "4.1.0", "org.hpcdl.main.numpy": "2.2.6", "org.hpcdl.main.torch": "2.8.0", "org.hpcdl.mpi": "openmpi-4.1.6", "org.hpcdl.mpi.source": "build", "org.hpcdl.pmix": "4.2.9", "org.hpcdl.ucx": "1.18.1", "org.opencontainers.image.title": "hpcdl-cpu-x86-64-v3", "org.opencontainers.image.version": "0.1.0"}' '{"org.opencontainers.image.created": "HPCDL_CREATED", "org.opencontainers.image.revision": "HPCDL_REVISION", "org.opencontainers.image.source": "HPCDL_SOURCE"}' /.singularity.d/labels.json

ENTRYPOINT ["/bin/sh", "-c", "cat /opt/hpcdl/banner >&2; exec \"/opt/envs/${HPCDL_IMAGE_ENV:-main}/bin/hpcdl\" train \"$@\"", "hpcdl"]

# %test (Singularity) runs, and on podman-hpc/Shifter run it by hand:
#   status=0
#   /opt/envs/main/bin/python -m hpcdl.images.check --image cpu-x86-64-v3 --environment main --mode image || status=1
#   exit "${status}"

FROM nvidia/cuda:12.6.3-devel-ubuntu22.04

# hpcdl image cuda12-mpich: CUDA 12 PyTorch for V100, A100 and H100
# (sm_70, sm_80, sm_90) on InfiniBand sites whose MPI keeps the MPICH
# ABI (Intel MPI, ParaStation MPI, MVAPICH; JUWELS Booster, Lonestar6,
# Stampede3, Jean Zay), the host's MPI bound in at run time. Generated
# by `make containers` from containers/images.yaml; edit the spec, not
# this file.

LABEL org.hpcdl.arch=x86_64 \
    org.hpcdl.base=nvidia/cuda:12.6.3-devel-ubuntu22.04 \
    org.hpcdl.cpu_target=x86_64 \
    org.hpcdl.cuda=12.6 \
    org.hpcdl.cudnn=9.10.2.21 \
    org.hpcdl.fabric=infiniband \
    org.hpcdl.gpu_archs=sm_70,sm_80,sm_90 \
    org.hpcdl.hpcdl=0.1.0 \
    org.hpcdl.image=cuda12-mpich \
    org.hpcdl.main.mpi4py=4.1.0 \
    org.hpcdl.main.numpy=2.2.6 \
    org.hpcdl.main.torch=2.8.0 \
    org.hpcdl.mpi=mpich-4.1.2 \
    org.hpcdl.mpi.source=build \
    org.hpcdl.ucx=1.18.1 \
    org.opencontainers.image.title=hpcdl-cuda12-mpich \
    org.opencontainers.image.version=0.1.0

#     cuda12-mpich: CUDA 12 PyTorch for V100, A100 and H100 (sm_70, sm_80, sm_90) on InfiniBand sites whose MPI keeps the MPICH ABI (Intel MPI, ParaStation MPI, MVAPICH; JUWELS Booster, Lonestar6, Stampede3, Jean Zay), the host's MPI bound in at run time
#     Run a training recipe (one rank per process; the launcher starts the ranks):
#         srun apptainer run --nv cuda12-mpich.sif recipe.yaml --plan plan.json
#     Pick another environment with HPCDL_IMAGE_ENV (main).
#     Check the image: apptainer test cuda12-mpich.sif
#     Versions of everything inside: apptainer inspect --labels cuda12-mpich.sif

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
    cd /var/tmp/ucx-1.18.1 &&   ./configure --prefix=/usr/local/ucx --disable-assertions --disable-debug --disable-doxygen-doc --disable-logging --disable-params-check --enable-optimizations --with-cuda=/usr/local/cuda --with-rdmacm --with-verbs --without-gdrcopy --without-knem --without-xpmem && \
    make -j$(nproc) && \
    make -j$(nproc) install && \
    rm -rf /var/tmp/ucx-1.18.1 /var/tmp/ucx-1.18.1.tar.gz
ENV CPATH=/usr/local/ucx/include:$CPATH \
    LD_LIBRARY_PATH=/usr/local/ucx/lib:$LD_LIBRARY_PATH \
    LIBRARY_PATH=/usr/local/ucx/lib:$LIBRARY_PATH \
    PATH=/usr/local/ucx/bin:$PATH

# MPICH version 4.1.2
RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        file \
        gzip \
        make \
        openssh-client \
        perl \
        tar \
        wget && \
    rm -rf /var/lib/apt/lists/*
RUN mkdir -p /var/tmp && wget -q -nc -P /var/tmp https://www.mpich.org/static/downloads/4.1.2/mpich-4.1.2.tar.gz && \
    mkdir -p /var/tmp && tar -x -f /var/tmp/mpich-4.1.2.tar.gz -C /var/tmp -z && \
    cd /var/tmp/mpich-4.1.2 &&   ./configure --prefix=/usr/local/mpich --disable-fortran --with-device=ch4:ucx --with-ucx=/usr/local/ucx && \
    make -j$(nproc) && \
    make -j$(nproc) install && \
    rm -rf /var/tmp/mpich-4.1.2 /var/tmp/mpich-4.1.2.tar.gz
ENV LD_LIBRARY_PATH=/usr/local/mpich/lib:$LD_LIBRARY_PATH \
    PATH=/usr/local/mpich/bin:$PATH

RUN if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi && \
    python3 -m venv /opt/envs/main && \
    /opt/envs/main/bin/pip install --no-cache-dir --upgrade pip setuptools wheel 'hatchling>=1.26' && \
    /opt/envs/main/bin/pip install --no-cache-dir --no-binary mpi4py --extra-index-url https://download.pytorch.org/whl/cu126 torch==2.8.0 numpy==2.2.6 mpi4py==4.1.0 nvidia-cudnn-cu12==9.10.2.21

RUN if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi && \
    /opt/envs/main/bin/pip install --no-cache-dir --no-binary mpi4py --extra-index-url https://download.pytorch.org/whl/cu126 torch==2.8.0 numpy==2.2.6 mpi4py==4.1.0 nvidia-cudnn-cu12==9.10.2.21 'jinja2>=3.1' 'matplotlib>=3.7' 'numpy>=1.23' 'pillow>=9' 'protobuf>=4.21' 'pydantic<3,>=2.5' 'python-hostlist>=2.0' 'pyyaml>=6.0' 'rich>=13' 'scikit-learn>=1.3' 'typer>=0.12'

COPY pyproject.toml /opt/hpcdl/src/pyproject.toml

COPY README.md /opt/hpcdl/src/README.md

COPY platform /opt/hpcdl/src/platform

RUN if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi && \
    /opt/envs/main/bin/pip install --no-cache-dir --no-deps --no-build-isolation /opt/hpcdl/src && \
    "/opt/envs/main/bin/python" -m hpcdl.images.banner --image cuda12-mpich > /opt/hpcdl/banner && \
    cat /opt/hpcdl/banner

ENV CUDA_CACHE_DISABLE=1 \
    HPCDL_IMAGE=cuda12-mpich \
    PATH=/opt/envs/main/bin:$PATH

RUN python3 -c 'import json, os, sys; root = sys.argv[2] if len(sys.argv) > 2 else "/"; files = {os.path.join(root, k.lstrip("/")): v for k, v in json.loads(sys.argv[1]).items()}; [(os.makedirs(os.path.dirname(p), exist_ok=True), open(p, "w").write(t), os.chmod(p, 0o755)) for p, t in files.items()]' '{"/.singularity.d/env/90-environment.sh": "#!/bin/sh\n# hpcdl image cuda12-mpich: its environment, as %environment gives it\nexport PATH=/opt/envs/main/bin:\"$PATH\"\nexport HPCDL_IMAGE=cuda12-mpich\nexport CUDA_CACHE_DISABLE=1\n", "/.singularity.d/runscript": "#!/bin/sh\ncat /opt/hpcdl/banner >&2; exec \"/opt/envs/${HPCDL_IMAGE_ENV:-main}/bin/hpcdl\" train \"$@\"\n"}'

ARG HPCDL_CREATED=unknown
ARG HPCDL_REVISION=unknown
ARG HPCDL_SOURCE=unknown

LABEL org.opencontainers.image.created=${HPCDL_CREATED} \
    org.opencontainers.image.revision=${HPCDL_REVISION} \
    org.opencontainers.image.source=${HPCDL_SOURCE}

RUN python3 -c 'import json, os, sys; labels = json.loads(sys.argv[1]); labels.update({k: os.environ.get(v) or "unknown" for k, v in json.loads(sys.argv[2]).items()}); os.makedirs(os.path.dirname(sys.argv[3]), exist_ok=True); json.dump(labels, open(sys.argv[3], "w"), indent=2, sort_keys=True)' '{"org.hpcdl.arch": "x86_64", "org.hpcdl.base": "nvidia/cuda:12.6.3-devel-ubuntu22.04", "org.hpcdl.cpu_target": "x86_64", "org.hpcdl.cuda": "12.6", "org.hpcdl.cudnn": "9.10.2.21", "org.hpcdl.fabric": "infiniband", "org.hpcdl.gpu_archs": "sm_70,sm_80,sm_90", "org.hpcdl.hpcdl": "0.1.0", "org.hpcdl.image": "cuda12-mpich", "org.hpcdl.main.mpi4py": "4.1.0", "org.hpcdl.main.numpy": "2.2.6", "org.hpcdl.main.torch": "2.8.0", "org.hpcdl.mpi": "mpich-4.1.2", "org.hpcdl.mpi.source": "build", "org.hpcdl.ucx": "1.18.1", "org.opencontainers.image.title": "hpcdl-cuda12-mpich", "org.opencontainers.image.version": "0.1.0"}' '{"org.opencontainers.image.created": "HPCDL_CREATED", "org.opencontainers.image.revision": "HPCDL_REVISION", "org.opencontainers.image.source": "HPCDL_SOURCE"}' /.singularity.d/labels.json

ENTRYPOINT ["/bin/sh", "-c", "cat /opt/hpcdl/banner >&2; exec \"/opt/envs/${HPCDL_IMAGE_ENV:-main}/bin/hpcdl\" train \"$@\"", "hpcdl"]

# %test (Singularity) runs, and on podman-hpc/Shifter run it by hand:
#   status=0
#   /opt/envs/main/bin/python -m hpcdl.images.check --image cuda12-mpich --environment main --mode image || status=1
#   exit "${status}"

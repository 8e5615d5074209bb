#!/usr/bin/env bash
# The wheels a bare GPU node's Python lacks to run hpcdl's GPU tests and benchmark, fetched here
# (where PyPI is reachable) into .whl/ for tools/gpu-node.sh to install there without a network.
#
#   tools/gpu-wheels.sh [PYTHON_VERSION]      # default 3.12, the GPU image's python3
#
# The versions are the ones this checkout's .venv runs (the tests passed with them); the node's
# image already holds torch, numpy, Pillow, PyYAML, jinja2, typer, rich, matplotlib, protobuf,
# scikit-learn, pytest and hypothesis. DALI is not among them: its wheel is hundreds of MB.
set -euo pipefail
cd "$(dirname "$0")/.."
pyver=${1:-3.12}
venv_python=.venv/bin/python
[ -x "$venv_python" ] || { echo "gpu-wheels: $venv_python is missing (make setup first)" >&2; exit 2; }

version() { "$venv_python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1"; }

pins=()
for name in pydantic pydantic_core annotated-types typing-inspection; do
    pins+=("$name==$(version "$name")")
done
rm -rf .whl && mkdir -p .whl
platforms=()
for n in 17 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
"$venv_python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
# python-hostlist is published as a source archive only: a pure-Python wheel built here serves any Python 3
"$venv_python" -m pip wheel -q --no-deps -w .whl "python-hostlist==$(version python-hostlist)"
ls -l .whl

#!/usr/bin/env bash
# Build Horovod from its release source for PyTorch (+ MPI and Gloo), cache the wheel, install it.
# Usage: tools/build-horovod.sh PYTHON VERSION CACHE_DIR
#
# Horovod 0.28.1 (2023-06, the last release) compiles its PyTorch extension with
# CMAKE_CXX_STANDARD 14, and torch >= 2.1 headers need C++17 (horovod#3996, #4014; fixed on
# master by #3998, never released). The one change made here is 14 -> 17 in the two
# CMakeLists.txt that set it. TensorFlow support is left out: TF 2.21's XLA headers miss
# highwayhash, and Horovod with Keras 3 (TF >= 2.16) fails at run time (horovod#4290).
set -euo pipefail
python=$1
version=$2
cache=$3

torch_version=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')
wheels="$cache/horovod-$version-torch-$torch_version"
mkdir -p "$wheels"
wheel=$(find "$wheels" -name "horovod-$version-*.whl" -print -quit)
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$work" "horovod==$version"
  tar -xzf "$work/horovod-$version.tar.gz" -C "$work"
  src="$work/horovod-$version"
  for cmake in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$cmake" || {
      echo "build-horovod: $cmake no longer sets CMAKE_CXX_STANDARD 14; check the patch" >&2
      exit 1
    }
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$cmake"
  done
  echo "build-horovod: building Horovod $version for torch $torch_version (takes minutes)"
  start=$SECONDS
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS=-j2 \
    "$python" -m pip wheel -q --no-deps --no-build-isolation -w "$wheels" "$src"
  echo "build-horovod: built in $((SECONDS - start)) s"
  wheel=$(find "$wheels" -name "horovod-$version-*.whl" -print -quit)
fi
"$python" -m pip install -q "$wheel"
"$python" -c 'import horovod, horovod.torch as hvd; assert hvd.gloo_built() and hvd.mpi_built(); print("horovod", horovod.__version__, "for PyTorch, with Gloo and MPI")'

#!/usr/bin/env bash
# What a bare GPU node's Python lacks to run hpcdl's GPU benchmark with NVIDIA DALI, packed where PyPI
# is reachable, for a node that has no network and takes files in bounded pieces.
#
#   tools/gpu-carry.sh [PART_MIB]     # default 52: parts under .gpu-carry/1, .gpu-carry/2, ...
#
# DALI's wheel alone is about 190 MB, with nvImageCodec, nvCOMP and nvJPEG about 260 MB: more than
# one transfer of 64 MiB. The wheels (hpcdl's pure-Python needs from tools/gpu-wheels.sh, DALI for
# the node's CUDA 13 and its libraries) are installed here into one folder for the node's Python
# (3.12, the GPU image's python3), with DALI's and nvImageCodec's extension modules for other Python
# versions left out, packed as one tar.xz, and split into numbered parts, one folder each. Send the
# folders one at a time and gather the parts on the node in one folder (/tmp/hpcdl-carry);
# tools/gpu-node.sh unpacks them from there, in order, before it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
part_mib=${1:-52}
pyver=3.12
tag=cp${pyver/./}
venv_python=.venv/bin/python
[ -x "$venv_python" ] || { echo "gpu-carry: $venv_python is missing (make setup first)" >&2; exit 2; }

bash tools/gpu-wheels.sh "$pyver" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for n in 17 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64)
# DALI 2.4 for CUDA 13 (the GPU image's PyTorch is cu130), what it requires, and the nvJPEG that
# nvImageCodec loads for the GPU decoder; JPEG 2000 and TIFF codecs are not needed for a JPEG folder
"$venv_python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$work/wheels" \
    nvidia-dali-cuda130==2.4.0 "nvidia-nvimgcodec-cu13>=0.9,<0.10" nvidia-libnvcomp-cu13==5.3.0.16 nvidia-nvjpeg \
    "astunparse>=1.6,<=1.6.3" "gast>=0.3.3,<=0.7.0" optree nvtx makefun "libcst~=1.8"
cp .whl/*.whl "$work/wheels/"
"$venv_python" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" --python-version "$pyver" \
    --implementation cp --only-binary=:all: "${platforms[@]}" "$work"/wheels/*.whl
find "$work/site" -name '*.cpython-3*-x86_64-linux-gnu.so' ! -name "*.cpython-${tag#cp}-*" -delete
rm -rf "$work/site/bin"
tar -C "$work/site" -cf - . | xz -6 -T0 > "$work/site.tar.xz"
rm -rf .gpu-carry && mkdir -p .gpu-carry
split -b "${part_mib}M" -d -a 2 "$work/site.tar.xz" "$work/part."
i=0
for part in "$work"/part.*; do
    i=$((i + 1))
    mkdir -p ".gpu-carry/$i" && mv "$part" ".gpu-carry/$i/"
done
du -sh .gpu-carry/*
echo "gpu-carry: $i parts; on the node: mkdir -p /tmp/hpcdl-carry && cp .gpu-carry/N/part.* /tmp/hpcdl-carry/"

#!/usr/bin/env bash
# What only a GPU node can show (issue 14), run from a checkout on one, with no network:
#
#   tools/gpu-node.sh tests OUT   # the CUDA tests (pytest -m gpu) and the GPU bench at toy sizes
#   tools/gpu-node.sh bench OUT   # the GPU section of `make bench`, into docs/performance.md
#   SECTIONS=compiled,dali DEADLINE=400 tools/gpu-node.sh bench OUT   # some parts, in this order, in 400 s
#
# Each stage fits in ten minutes on one H100. Results go to OUT (default ./gpu-results):
# nvidia-smi.txt, dev-shm.txt, gpu-tests.txt, rehearsal.txt/.json for `tests`; gpu.json/.txt and
# performance.md/.json/.png for `bench` (commit the last three into docs/; parts not measured keep
# their earlier figures, marked with the device they ran on). The node's Python needs torch with CUDA; what it
# lacks of hpcdl's own needs comes from .whl/ (tools/gpu-wheels.sh fetches them where PyPI is
# reachable), or with NVIDIA DALI from the parts tools/gpu-carry.sh packs, gathered in $CARRY
# (default /tmp/hpcdl-carry), and is installed under $SITE (default /tmp/hpcdl-gpu-site), never into the
# node's environment.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: tools/gpu-node.sh tests|bench [OUT]}
out=${2:-gpu-results}
py=${PYTHON:-python3}
case "$stage" in
tests | bench) ;;
*)
    echo "gpu-node: unknown stage '$stage' (tests or bench)" >&2
    exit 2
    ;;
esac

if ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
    echo "gpu-node: $py's PyTorch sees no CUDA GPU here" >&2
    exit 1
fi

site=${SITE:-/tmp/hpcdl-gpu-site}
carry=${CARRY:-/tmp/hpcdl-carry}
if compgen -G "$carry/part.*" >/dev/null; then
    # tools/gpu-carry.sh's parts, gathered here: the packages installed for this Python, DALI's too
    mkdir -p "$site"
    cat "$carry"/part.* | "$py" -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1])' "$site"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
elif compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/platform:${PYTHONPATH:-}"
# a GPU that went missing fails the gpu-marked tests instead of skipping them
export PYTHONUNBUFFERED=1 HPCDL_REQUIRE_GPU=1 HPCDL_PROGRESS=plain

mkdir -p "$out"

case "$stage" in
tests)
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
    # the bench stage's decode workers hold ResNet-50 batches (154 MB each) in /dev/shm and refuse
    # to start with less than two of them in half its free space: a container's default 64 MB
    # would fail that stage, so the tests stage says how much there is, ahead of it
    df -h /dev/shm > "$out/dev-shm.txt" 2>&1 || true
    # every path of the GPU benchmark at toy sizes on the GPU first: seconds, and it fails loudly;
    # the tests run whatever it did (a GPU node's minutes are too dear to stop at the first failure)
    rehearsal=0
    "$py" -m hpcdl.bench.gpu --rehearsal --device cuda --json "$out/rehearsal.json" 2>&1 |
        tee "$out/rehearsal.txt" || rehearsal=$?
    tests=0
    "$py" -m pytest -m gpu -p no:cacheprovider -q -rA tests/test_gpu.py tests/test_optim.py tests/test_feed.py \
        tests/test_dali_feed.py 2>&1 | tee "$out/gpu-tests.txt" || tests=$?
    if [ "$rehearsal" -ne 0 ]; then
        echo "gpu-node: the GPU bench rehearsal failed (exit $rehearsal): $out/rehearsal.txt" >&2
    fi
    [ "$rehearsal" -eq 0 ] && [ "$tests" -eq 0 ]
    ;;
bench)
    # SECTIONS picks and orders the parts, DEADLINE (seconds) skips those that would not fit: a node
    # lent for minutes measures what matters first; gpu.json is rewritten after each part
    status=0
    "$py" -m hpcdl.bench.gpu ${SECTIONS:+--sections "$SECTIONS"} --deadline "${DEADLINE:-0}" \
        --json "$out/gpu.json" > "$out/gpu.txt" 2>&1 || status=$?
    grep '^bench gpu' "$out/gpu.txt" || true
    "$py" -m hpcdl.bench --only gpu --gpu-json "$out/gpu.json" --out docs/performance.md
    cp docs/performance.md docs/performance.json docs/performance.png "$out/"
    exit "$status"
    ;;
esac

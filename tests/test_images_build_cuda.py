"""The x86_64 CUDA image, built for real with Charliecloud on this GPU-less machine.

`hpcdl images build local-cuda12` makes it as local-cpu is made (debian:12 from mmdebstrap, no
registry; Debian's Open MPI 4.1; hpcdl itself), cached outside the checkout by a hash of recipe
and inputs. Its GPU stack is PyPI's: torch 2.7.1 for x86_64 is a CUDA 12.6 build that pulls
its nvidia-* wheels, the CUDA runtime, cuDNN and NCCL among them. Inside it with ch-run:
  - the image check (what %test runs) passes, its CUDA, cuDNN and NCCL rows report the
    versions torch was built with and loads, its `cuda archs` row shows machine code for
    sm_70, sm_80 and sm_90 (the GPUs the spec claims), and its GPU row is "not applicable";
  - the CUDA runtime, cuDNN and NCCL libraries themselves load with the dynamic loader and
    report their versions (cudaRuntimeGetVersion, cudnnGetVersion, ncclGetVersion need no GPU).
A cold cache builds it (minutes: about 3 GB of wheels); a warm one finds it in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import require_tool

pytestmark = [pytest.mark.slow]

NAME = "local-cuda12"


@pytest.fixture(scope="module")
def cuda_image():
    for tool in ("ch-image", "ch-run", "mksquashfs", "squashfuse", "mmdebstrap"):
        require_tool(tool)
    from hpcdl.images.build import build
    from hpcdl.images.spec import load_image

    return build(load_image(NAME), "charliecloud", log=lambda _: None)


def _inside(built, program: str) -> str:
    from hpcdl.images.build import ch_run_argv

    proc = subprocess.run([*ch_run_argv(built.path), "python", "-c", program], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "USER": os.environ.get("USER", "root")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_cuda_image_is_cached_by_its_key_and_recorded(cuda_image):
    from hpcdl.images.build import build, cache_dir
    from hpcdl.images.spec import load_image

    assert cuda_image.path.startswith(str(cache_dir())) and cuda_image.path.endswith(".sqfs")
    record = json.loads(open(cuda_image.record).read())
    assert record["key"] == cuda_image.key and record["image"] == NAME and record["builder"] == "charliecloud"
    again = build(load_image(NAME), "charliecloud", log=lambda _: None)
    assert again.cached and again.path == cuda_image.path


def test_the_image_check_inside_reports_cuda_cudnn_and_nccl_and_no_gpu(cuda_image):
    from hpcdl.images.build import run_check
    from hpcdl.images.spec import load_image

    spec = load_image(NAME)
    out = run_check(cuda_image.path, spec, log=lambda _: None).stdout
    # each row is "  CHECK (20 wide) STATUS (15 wide) DETAIL" (hpcdl.images.check.main)
    rows = {line[2:22].strip(): line[22:] for line in out.splitlines()[1:]}
    assert f"image check: {NAME} [main, image mode]" in out
    assert "passed" in rows["torch"] and "2.7.1" in rows["torch"], out
    assert "passed" in rows["cuda"] and "CUDA 12.6" in rows["cuda"], out
    assert "passed" in rows["cuda archs"] and all(a in rows["cuda archs"] for a in spec.cuda.gpu_archs), out
    assert "passed" in rows["cudnn"] and "90501" in rows["cudnn"], out  # cuDNN 9.5.1, the spec's pin
    assert "passed" in rows["nccl"] and "torch's NCCL 2.26.2" in rows["nccl"], out
    assert "not applicable" in rows["gpu"] and "no NVIDIA GPU" in rows["gpu"], out
    assert "passed" in rows["mpi allreduce"] and "passed" in rows["labels"], out


def test_the_cuda_runtime_cudnn_and_nccl_libraries_load_and_report_their_versions(cuda_image):
    """Each library through the dynamic loader, as a CUDA program loads it, not only torch's view."""
    program = """
import ctypes, glob, os, site, json
root = site.getsitepackages()[0] + '/nvidia'
def lib(pattern):
    found = sorted(glob.glob(f'{root}/{pattern}'))
    return ctypes.CDLL(found[0]), os.path.basename(found[0])
v = ctypes.c_int()
cudart, cudart_name = lib('cuda_runtime/lib/libcudart.so.12*')
assert cudart.cudaRuntimeGetVersion(ctypes.byref(v)) == 0
runtime = v.value
cudnn, cudnn_name = lib('cudnn/lib/libcudnn.so.9*')
cudnn.cudnnGetVersion.restype = ctypes.c_size_t
nccl, nccl_name = lib('nccl/lib/libnccl.so.2*')
assert nccl.ncclGetVersion(ctypes.byref(v)) == 0
import torch
print(json.dumps({'cudart': [cudart_name, runtime], 'cudnn': [cudnn_name, cudnn.cudnnGetVersion()],
                  'nccl': [nccl_name, v.value], 'torch': [torch.version.cuda, torch.backends.cudnn.version(),
                  list(torch.cuda.nccl.version()), torch.cuda.is_available()]}))
"""
    found = json.loads(_inside(cuda_image, program).strip().splitlines()[-1])
    assert found["cudart"][1] == 12060, found  # CUDA 12.6 (1000 * major + 10 * minor)
    assert found["cudnn"][1] == 90501, found  # cuDNN 9.5.1
    assert found["nccl"][1] == 22602, found  # NCCL 2.26.2
    # torch reports the same libraries, and sees no GPU on this machine
    assert found["torch"] == ["12.6", 90501, [2, 26, 2], False], found


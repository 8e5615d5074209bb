"""The shell tools beside the Makefile: linted, and the GPU-node runbook's refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, shellcheck

TOOLS = sorted((ROOT / "tools").glob("*.sh"))


@pytest.mark.parametrize("script", TOOLS, ids=[t.name for t in TOOLS])
def test_every_tool_script_passes_shellcheck(script):
    shellcheck(script)


def gpu_node(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "tools" / "gpu-node.sh"), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})


def test_the_gpu_node_runbook_names_its_stages():
    proc = gpu_node("everything")
    assert proc.returncode == 2 and proc.stderr == "gpu-node: unknown stage 'everything' (tests or bench)\n"


def test_the_gpu_node_runbook_stops_where_pytorch_sees_no_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = gpu_node("tests", str(tmp_path / "out"))
    assert proc.returncode == 1 and "sees no CUDA GPU here" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_gpu_node_runbook_runs_the_tests_after_a_failed_rehearsal_and_still_fails(tmp_path):
    """One GPU session is too dear to lose its test results to the bench rehearsal's failure."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\ncase "$2" in\n  hpcdl.bench.gpu) echo rehearsal broke; exit 3 ;;\n'
                    '  pytest) echo tests ran ;;\nesac\nexit 0\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.run([str(ROOT / "tools" / "gpu-node.sh"), "tests", str(out)], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)})
    assert proc.returncode != 0 and "rehearsal failed (exit 3)" in proc.stderr
    assert (out / "gpu-tests.txt").read_text() == "tests ran\n"
    assert (out / "rehearsal.txt").read_text() == "rehearsal broke\n"


def test_the_gpu_node_runbook_installs_the_parts_gpu_carry_packs_before_it_starts(tmp_path):
    """tools/gpu-carry.sh's archive of installed packages (DALI's too), split in parts sent one at a
    time, is unpacked in order and put on the path of everything the runbook runs."""
    import io
    import tarfile

    payload = b"WHERE = 'carried'\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        info = tarfile.TarInfo("carried_probe.py")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    data = buf.getvalue()
    carry = tmp_path / "carry"
    carry.mkdir()
    half = len(data) // 2
    (carry / "part.00").write_bytes(data[:half])
    (carry / "part.01").write_bytes(data[half:])
    fake = tmp_path / "python"  # a node whose PyTorch sees a GPU; the rehearsal imports what was carried
    fake.write_text(f'#!/bin/sh\ncase "$2" in\n  *torch.cuda*) exit 0 ;;\n'
                    f'  hpcdl.bench.gpu) exec {sys.executable} -c "import carried_probe; print(carried_probe.WHERE)" ;;\n'
                    f'  pytest) echo tests ran; exit 0 ;;\nesac\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.run([str(ROOT / "tools" / "gpu-node.sh"), "tests", str(out)], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "CARRY": str(carry),
                                            "SITE": str(tmp_path / "site")})
    assert proc.returncode == 0, proc.stderr
    assert (out / "rehearsal.txt").read_text() == "carried\n"
